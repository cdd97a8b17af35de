"""Sweep planning (order, indexes, ids), settle parsing, grid options, and bad input at the CLI (real processes)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.core.errors import UsageError
from harness.grid import ACTIONS
from harness.runs.options import SweepOptions, parse_settle
from harness.runs.plan import plan_cells
from harness.sweep.cli import build_grid

ROOT = Path(__file__).resolve().parents[2]


def harness(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "harness", *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=env
    )


def test_full_plan_is_228_cells_in_published_index_order():
    cells = plan_cells(SweepOptions(repeats=3))
    assert len(cells) == 228
    assert [c.index for c in cells] == list(range(228))
    assert len({c.cell_id for c in cells}) == 228
    assert cells[0].cell_id == "r0-bs1-s0k0d0" and cells[18].config == ACTIONS[18] and cells[19].batch_size == 4
    assert cells[76].repeat == 1


def test_config_mode_runs_config_major_with_the_same_indexes():
    cell_mode = plan_cells(SweepOptions(repeats=2))
    config_mode = plan_cells(SweepOptions(repeats=2, launch_per="config"))
    assert sorted(c.index for c in config_mode) == [c.index for c in cell_mode]
    assert {(c.cell_id, c.index) for c in config_mode} == {(c.cell_id, c.index) for c in cell_mode}
    assert [c.batch_size for c in config_mode[:4]] == [1, 4, 8, 16]
    assert len({c.config for c in config_mode[:4]}) == 1


def test_settle_and_grid_parsing():
    assert parse_settle("5") == ("sleep", 5.0) and parse_settle("cool:60") == ("cool", 60.0)
    with pytest.raises(UsageError):
        parse_settle("warm")
    assert build_grid(None, None, None, None) == [a.as_tuple() for a in ACTIONS]
    assert build_grid("0:0:0,3:4:8", None, None, None) == [(0, 0, 0), (3, 4, 8)]
    assert build_grid(None, "0,3", "0,4", "0,8") == [(0, 0, 0), (3, 4, 8)]
    with pytest.raises(UsageError, match="cannot be combined"):
        build_grid("3:4:8", "3", None, None)


@pytest.mark.parametrize(
    ("args", "code", "needle"),
    [
        (["--configs", "3:4:16"], 2, "num_draft_tokens must be <= steps * topk + 1"),
        (["--configs", "0:4:8"], 2, "only (0,0,0) may contain a zero"),
        (["--bogus-flag"], 2, "No such option"),
        (["--engine", "tgi"], 2, "unknown --engine 'tgi'"),
        (["--engine", "vllm"], 2, "vllm is not installed"),
        (["--mem-fractions", "1.5"], 2, "--mem-fractions"),
        (["--settle", "warm"], 2, "--settle"),
        (["--engine", "sglang", "--sglang-version", "0.6.0"], 2, "outside the supported range 0.5.2 to 0.5.23"),
        (["--engine", "twin", "--sglang-version", "0.5.14"], 2, "the twin engine emulates sglang 0.5.2 and 0.5.23"),
        (["--engine", "sglang", "--configs", "0:0:0", "--batch-sizes", "1"], 2, "sglang is not installed for"),
        (
            ["--engine", "twin", "--twin-gpu", "http://127.0.0.1:9", "--configs", "0:0:0", "--batch-sizes", "1"],
            4,
            "unreachable",
        ),
    ],
)
def test_bad_input_is_a_clear_error(tmp_path, args, code, needle):
    r = harness("sweep", "--out", str(tmp_path / "run"), *args)
    assert r.returncode == code, r.stdout + r.stderr
    assert needle in r.stdout + r.stderr
    assert "Traceback" not in r.stderr


def test_auto_version_without_sglang_writes_nothing(tmp_path):
    """The harness's own venv has no sglang: auto-detection fails before a run folder exists."""
    r = harness("sweep", "--engine", "sglang", "--out", str(tmp_path / "run"))
    assert r.returncode == 2 and "--sglang-version X (supported 0.5.2 to 0.5.23)" in r.stdout + r.stderr
    assert not (tmp_path / "run").exists()


def test_existing_run_is_never_overwritten_and_unwritable_out_is_refused(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    rows = run / "rows.jsonl"
    rows.write_text('{"keep": 1}\n')
    r = harness("sweep", "--out", str(run), "--configs", "0:0:0", "--batch-sizes", "1")
    assert r.returncode == 6 and "already holds a run" in r.stderr and "--resume" in r.stderr
    assert rows.read_text() == '{"keep": 1}\n'
    blocker = tmp_path / "file"
    blocker.write_text("x")
    r = harness("sweep", "--out", str(blocker / "sub"), "--configs", "0:0:0", "--batch-sizes", "1")
    assert r.returncode == 6 and "cannot write" in r.stderr


def test_resume_of_a_folder_without_a_run_and_status(tmp_path):
    r = harness("sweep", "--resume", str(tmp_path))
    assert r.returncode == 3 and "not a sweep run folder" in r.stderr
    r = harness("status", str(tmp_path))
    assert r.returncode == 3


def test_bad_prompts_file(tmp_path):
    bad = tmp_path / "prompts.json"
    bad.write_text("[1, 2")
    r = harness("sweep", "--out", str(tmp_path / "run"), "--prompts", str(bad), "--configs", "0:0:0")
    assert r.returncode == 3 and "not valid JSON" in r.stderr
    assert not (tmp_path / "run").exists()


def test_a_mistyped_attention_backend_is_refused_before_the_run_folder(tmp_path):
    """A typo would otherwise launch every cell with a flag sglang rejects: an error row per cell."""
    out = tmp_path / "run"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness",
            "sweep",
            "--engine",
            "twin",
            "--quick",
            "--attention-backend",
            "flashinfr",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2 and "--attention-backend 'flashinfr'" in r.stderr and "flashinfer" in r.stderr, r.stderr
    assert not out.exists()
