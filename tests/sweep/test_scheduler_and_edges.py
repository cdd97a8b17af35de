"""What real sglang needs for the rows to mean the same thing across versions (issue 39, items 6 and 8): the server's
own request instants (``--enable-metrics``) for server-side window edges, and the scheduler each row ran under
(overlap or not, by the version's own rule), with a way to pin it off for every launch."""

from __future__ import annotations

import json

import pytest
from _engine_helpers import FAST, read_lines, run_harness

from harness.engine.sglang_argv import DISABLE_OVERLAP, build_argv, overlap_scheduled
from harness.engine.sglang_client import parse_server_info
from harness.grid import SpecConfig
from harness.runs.options import SweepOptions

BASE, CHAIN, TREE = SpecConfig(0, 0, 0), SpecConfig(3, 1, 4), SpecConfig(3, 4, 8)


@pytest.mark.parametrize(
    ("version", "config", "args", "env", "overlap"),
    [
        ("0.5.2", BASE, [], {}, True),  # no speculation: the overlap scheduler in every version
        ("0.5.2", CHAIN, [], {}, False),  # EAGLE up to 0.5.11: spec v1, overlap forced off
        ("0.5.2", CHAIN, [], {"SGLANG_ENABLE_SPEC_V2": "1"}, True),  # spec v2 opted in
        ("0.5.12", CHAIN, [], {}, True),  # spec v2 by default: topk 1 only
        ("0.5.12", TREE, [], {}, False),
        ("0.5.19", TREE, [], {}, True),  # from 0.5.14 a v2 worker always: overlap on
        ("0.5.23", TREE, [DISABLE_OVERLAP], {}, False),  # pinned off
        ("0.5.23", BASE, [DISABLE_OVERLAP], {}, False),
    ],
)
def test_the_scheduler_follows_each_versions_rule(version, config, args, env, overlap) -> None:
    assert overlap_scheduled(version, config, args, env) is overlap


def test_real_sglang_launches_report_server_instants_and_can_pin_the_scheduler() -> None:
    real = SweepOptions(engine="sglang", sglang_version="0.5.23", overlap_schedule="off").engine_spec()
    argv = build_argv(real, TREE, 16, 0.65, 30000)
    assert "--enable-metrics" in argv and argv.count(DISABLE_OVERLAP) == 1
    given = SweepOptions(engine="sglang", sglang_version="0.5.23", engine_args=[DISABLE_OVERLAP]).engine_spec()
    assert build_argv(given, TREE, 16, 0.65, 30000).count(DISABLE_OVERLAP) == 1  # never twice
    twin = (
        SweepOptions(engine="twin", sglang_version="0.5.23")
        .engine_spec()
        .model_copy(update={"twin_gpu_url": "http://127.0.0.1:1"})
    )
    assert not twin.enable_metrics and DISABLE_OVERLAP not in build_argv(twin, TREE, 16, 0.65, 30000)


def test_rows_record_the_scheduler_they_ran_under(tmp_path) -> None:
    for mode, expect in (("auto", {"r0-bs1-s0k0d0": "overlap", "r0-bs1-s3k1d4": "no-overlap"}),
                         ("off", {"r0-bs1-s0k0d0": "no-overlap", "r0-bs1-s3k1d4": "no-overlap"})):  # fmt: skip
        run = tmp_path / mode
        r = run_harness("sweep", "--engine", "twin", "--configs", "0:0:0,3:1:4", "--batch-sizes", "1",
                        "--overlap-schedule", mode, "--out", str(run), *FAST)  # fmt: skip
        assert r.returncode == 0, r.stdout + r.stderr
        rows = {row["cell_id"]: row for row in read_lines(run / "rows.jsonl")}
        assert {cid: row["extras"]["scheduler"] for cid, row in rows.items()} == expect
        for row in rows.values():  # what the server said (its resolved disable_overlap_schedule), not the rule
            assert row["extras"]["overlap_schedule_source"] == "server", row["extras"]
            assert row["extras"]["overlap_schedule"] is (row["extras"]["scheduler"] == "overlap")
        logs = "".join(p.read_text() for p in (run / "logs").glob("*.log"))
        assert (DISABLE_OVERLAP in logs) is (mode == "off")
        assert json.loads((run / "manifest.json").read_text())["options"]["overlap_schedule"] == mode


def test_the_row_takes_the_scheduler_from_the_servers_resolved_args() -> None:
    """sglang reports ``disable_overlap_schedule`` after its own rules (0.5.2 ``srt/server_args.py``: EAGLE sets it;
    0.5.23 ``srt/arg_groups/speculative_hook.py`` ``_disable_overlap_schedule_for_cpu``), in the scheduler's
    ``internal_states[0]`` and at the top level; the per-version rule was wrong on CPU and for 0.5.11-0.5.19."""
    shape_052 = {"internal_states": [{"disable_overlap_schedule": True}], "disable_overlap_schedule": False}
    assert parse_server_info(shape_052).overlap_schedule is False  # the scheduler's resolved copy wins
    assert parse_server_info({"disable_overlap_schedule": False}).overlap_schedule is True
    assert parse_server_info({"version": "0.5.23"}).overlap_schedule is None  # says nothing: the rule decides
    assert parse_server_info({"disable_overlap_schedule": "no"}).overlap_schedule is None
