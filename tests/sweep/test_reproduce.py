"""``harness reproduce``: the published protocol end to end on the twin, its published-layout file and --compare."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _engine_helpers import ROOT, read_lines, run_harness

from harness.runs.rows import PUBLISHED_KEYS, from_native, to_published

FIXTURE = ROOT / "tests" / "fixtures" / "twin_grid_3rep.jsonl"


@pytest.mark.slow
def test_reproduce_quick_writes_the_published_layout_and_compares(tmp_path: Path) -> None:
    reference = tmp_path / "reference.jsonl"  # the committed twin grid in the published 26-key layout
    reference.write_text("".join(json.dumps(to_published(from_native(r))) + "\n" for r in read_lines(FIXTURE)))
    run = tmp_path / "run"
    r = run_harness(
        "reproduce",
        "--engine",
        "twin",
        "--quick",
        "--time-scale",
        "50",
        "--plain",
        "--compare",
        str(reference),
        "--out",
        str(run),
        timeout=300,
    )
    assert r.returncode in (0, 1), r.stdout + r.stderr
    published = read_lines(run / "published.jsonl")
    assert len(published) == 8 and [p["index"] for p in published] == sorted(p["index"] for p in published)
    assert all(tuple(p) == tuple(PUBLISHED_KEYS) and p["hardware"] == "twin:rtx4060-laptop" for p in published)
    assert {(p["batch_size"], p["steps"], p["topk"], p["num_draft_tokens"]) for p in published} == {
        (bs, *c) for bs in (1, 16) for c in ((0, 0, 0), (3, 4, 8), (3, 2, 4), (5, 2, 8))
    }
    # the exit code is the comparison's verdict: the same pair through `harness dataset compare` agrees with it
    again = run_harness("dataset", "compare", str(reference), str(run))
    assert again.returncode == r.returncode, again.stdout + again.stderr


def test_reproduce_with_a_missing_compare_file_fails_before_running(tmp_path: Path) -> None:
    run = tmp_path / "run"
    r = run_harness(
        "reproduce", "--engine", "twin", "--quick", "--compare", str(tmp_path / "nope.jsonl"), "--out", str(run)
    )
    assert r.returncode == 3 and "--compare file not found" in r.stderr and not run.exists()
