"""Every step on the datacenter twin (issue 47): a sweep with ``--power-caps auto``, the report, ``harness train`` and
``evaluate`` on one of its caps (the memory feature normalised by the run's 80 GB board, recorded in train.json),
``harness serve`` of the trained picks under ``--power-budget`` at that cap, and the SWE-bench pilot (fixture) at
no_spec / chosen / chosen_bs16. Real processes throughout."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _engine_helpers import read_lines, run_harness
from _loadgen import ClosedLoop, Recorder
from _serve_helpers import PROMPTS, log_lines, serve_session, wait_for

from harness.serve.picks import from_policy

SWEEP = [
    "--engine", "twin", "--twin-profile", "h100-sxm", "--configs", "0:0:0,5:2:8", "--batch-sizes", "1,16",
    "--time-scale", "20", "--output-tokens", "512", "--settle", "0", "--min-window", "4", "--power-caps", "auto",
]  # fmt: skip


@pytest.mark.slow
def test_sweep_train_evaluate_and_serve_on_the_datacenter_profile(tmp_path: Path) -> None:
    run = tmp_path / "run"
    out = run_harness("sweep", *SWEEP, "--out", str(run))
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    caps = json.loads((run / "manifest.json").read_text())["options"]["power_caps"]
    cap = caps[-1]  # the highest: the bs-16 cap
    rep = run_harness("report", "sweep", str(run), "--no-figures")
    assert rep.returncode == 0 and "across passes" in rep.stdout, rep.stderr[-1500:]
    models = tmp_path / "models"
    train = run_harness(
        "train", "--dataset", str(run), "--power-cap", cap, "--out", str(models), "--algos", "lookup_table,linucb"
    )
    assert train.returncode == 0, train.stdout[-2000:] + train.stderr[-2000:]
    reward = json.loads((models / "train.json").read_text())["reward_options"]
    assert reward["memory_term"] == "total" and reward["memory_total_mb"] == 81559
    ev = run_harness("evaluate", "--models", str(models), "--dataset", str(run), "--no-loro", "--json")
    assert ev.returncode == 0, ev.stdout[-2000:] + ev.stderr[-2000:]
    rows = [r for r in read_lines(run / "rows.jsonl") if r["power_limit_w"] == float(cap)]
    assert rows and all(r["hardware"] == "twin:h100-sxm" for r in rows)
    picks = from_policy(models, "lookup_table")
    assert set(picks) == {1, 16}
    with serve_session(tmp_path / "serve", picks, twin_profile="h100-sxm", power_budget_w=float(cap)) as s:
        load = ClosedLoop(s.url, 2, 32, PROMPTS, rec := Recorder()).start()
        wait_for(lambda: len(rec.done) >= 4, timeout_s=30)
        load.stop()
        assert s.world.telemetry.snapshot().power_limit_w == float(cap)
        assert any(e.get("event") == "power_budget" for e in log_lines(s))
        assert all(d.status == 200 for d in rec.done), [d.status for d in rec.done if d.status != 200]


@pytest.mark.slow
def test_the_swebench_pilot_runs_on_the_datacenter_profile(tmp_path: Path) -> None:
    out = run_harness(
        "pilot", "--suite", "swebench", "--fixture", "--engine", "twin", "--twin-profile", "h100-sxm",
        "--time-scale", "10", "--max-new-tokens", "256", "--out", str(tmp_path / "pilot"),
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    rows = read_lines(tmp_path / "pilot" / "dataset_rows.jsonl")
    assert len(rows) == 6 and {r["hardware"] for r in rows} == {"twin:h100-sxm"}
    assert all(0.2 < r["avg_power_watts"] / 700.0 < 0.5 for r in rows)  # far below the datacenter limit
