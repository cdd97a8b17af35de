"""End to end: ``harness pilot --suite terminalbench --fixture --engine twin`` with real processes (twin GPU, twin
engine, sampler, Harbor, Terminus 2, the local sandbox). Needs the Harbor venv and root."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from _terminalbench_helpers import harbor_bin_or_skip

from pilots.terminalbench.harbor_install import LOCAL_SANDBOX_IMPORT
from pilots.terminalbench.tasks import FIXTURE_TASKS

pytestmark = pytest.mark.timeout(400)


@pytest.mark.slow
def test_end_to_end_pilot_on_the_twin_with_harbor_terminus2_and_the_local_sandbox(tmp_path: Path) -> None:
    """``harness pilot --suite terminalbench --fixture --engine twin``: twin GPU + twin engine + sampler + Harbor +
    Terminus 2 + the local sandbox on the two local tasks. Every trial fails on the twin's filler text (expected)."""
    harbor = harbor_bin_or_skip()
    out = tmp_path / "run"
    argv = [
        sys.executable,
        "-m",
        "harness",
        "pilot",
        "--suite",
        "terminalbench",
        "--fixture",
        "--engine",
        "twin",
        "--time-scale",
        "20",
        "--configs",
        "no_spec,chosen",
        "--out",
        str(out),
        "--max-turns",
        "2",
        "--max-tokens",
        "48",
        "--agent-timeout-s",
        "2400",
        "--harbor-tz",
        "America/St_Johns",
    ]
    proc = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=280,
        env={**os.environ, "COLUMNS": "200", "HARBOR_BIN": str(harbor)},
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "completed" and manifest["suite_meta"]["environment"] == LOCAL_SANDBOX_IMPORT
    merged = [json.loads(line) for line in (out / "reports" / "merged.jsonl").read_text().splitlines()]
    assert sorted((m["config"], m["task_id"]) for m in merged) == sorted(
        (c, t) for c in ("no_spec", "chosen") for t in FIXTURE_TASKS
    )
    for m in merged:
        r = m["record"]
        assert r["success"] is False and r["reward"] == 0.0 and r["expected_failure"], r  # filler text: expected
        assert r["window_problems"] == [] and r["agent_start_ns"] < r["agent_end_ns"]
        if r["window_valid"]:
            assert r["energy_joules"] > 0 and r["avg_power_watts"] > 0 and r["avg_util_pct"] is not None
        else:  # a sampler gap on a loaded machine: no energy is invented, the reasons say why
            assert r["window_reasons"] and r["energy_joules"] is None and r["avg_power_watts"] is None
        assert r["output_tokens"] > 0 and r["duration_s"] > 0 and r["output_tokens_per_s"] > 0
        # no hidden wait inside the measured window (litellm's ~25 s of Hugging Face hub timeouts when not offline)
        assert r["agent_wall_s"] < 20.0, r["agent_wall_s"]
        assert r["calls"]["n_calls"] >= 1 and r["harbor"]["job_time_zone"] == "inferred:UTC-03:30"
        assert r["accept_length"] is not None and (m["config"] != "no_spec" or r["accept_length"] == 1.0)
        assert Path(r["harbor"]["trial_dir"], "result.json").exists()
    assert sum(1 for m in merged if m["record"]["window_valid"]) >= 2
    rows = [json.loads(line) for line in (out / "dataset_rows.jsonl").read_text().splitlines()]
    assert len(rows) == 4
    for row in rows:
        assert row["speed_source"] == "terminalbench_pilot" and row["batch_size"] == 1 and row["is_baseline"] is False
        assert row["gpu_temp_c_before"] is None and row["gpu_mem_used_mb"] is None and row["gpu_throttling"] is None
        assert row["error"].startswith("agentic_pilot_trace: ")
        if row["window_valid"]:
            assert row["avg_power_watts"] > 0
        else:  # the same sampler-gap case as above: no power is invented
            assert row["window_reasons"] and row["avg_power_watts"] is None
    text = proc.stdout
    for col in (
        "config",
        "task",
        "success",
        "tok/s",
        "output tokens",
        "duration",
        "accept len",
        "avg power",
        "GPU util",
    ):
        assert col in text
    assert "Per-call durations" in text and "as expected on the twin" in text


@pytest.mark.slow
def test_twin_runaway_call_is_reported_as_the_published_stuck_call(tmp_path: Path) -> None:
    """The published chosen_bs16 failure on the twin: ``--twin-fault runaway`` makes one LLM call never return, the
    agent timeout cancels it, and the trial is flagged as a stuck call that ate most of the trial."""
    harbor = harbor_bin_or_skip()
    out = tmp_path / "run"
    argv = [
        sys.executable,
        "-m",
        "harness",
        "pilot",
        "--suite",
        "terminalbench",
        "--fixture",
        "--engine",
        "twin",
        "--time-scale",
        "20",
        "--configs",
        "chosen_bs16",
        "--twin-fault",
        "runaway",
        "--out",
        str(out),
        "--tasks",
        FIXTURE_TASKS[0],
        "--max-turns",
        "4",
        "--max-tokens",
        "48",
        "--agent-timeout-s",
        "300",
    ]
    proc = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=280,
        env={**os.environ, "COLUMNS": "200", "HARBOR_BIN": str(harbor)},
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    merged = [json.loads(line) for line in (out / "reports" / "merged.jsonl").read_text().splitlines()]
    assert [(m["config"], m["task_id"]) for m in merged] == [("chosen_bs16", FIXTURE_TASKS[0])]
    calls = merged[0]["record"]["calls"]
    assert calls["stuck"] is True and calls["longest_kind"] == "in_flight", calls
    assert calls["longest_share"] >= calls["stuck_fraction"]
    assert "Per-call durations" in proc.stdout
