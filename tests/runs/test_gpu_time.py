"""Where a run's GPU time went (issue 48 item 1): device seconds per phase that sum to the total, the measured phase
equal to the windows the rows report, the twin's launch shortening undone, the record carried across ``--resume``,
and the same figure in the manifest, the end-of-sweep line, ``harness status`` and the report's summary.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _engine_helpers import run_harness

from harness.runs.gpu_time import PHASES, GpuTime, gpu_time_line, twin_launch_scale


def test_phases_sum_to_the_total_and_the_twin_launch_scale_is_undone() -> None:
    seen: list[dict] = []
    gt = GpuTime(scale=20.0, launch_scale=0.2, on_change=seen.append)
    gt.add("launch", 1.0)  # 1 wall s at 20x = 20 device s of a launch shortened 5x: 100 s at the real pace
    gt.add_device("measured", 30.0)
    gt.add("teardown", 0.5)
    gt.add("warmup", -1.0)  # a negative span counts as nothing
    rec = gt.record()
    assert rec["launch"] == 100.0 and rec["measured"] == 30.0 and rec["teardown"] == 10.0 and rec["warmup"] == 0.0
    assert rec["total"] == sum(rec[p] for p in PHASES) == 140.0
    assert rec["measured_share"] == round(30 / 140, 4) and rec["per_measured"] == round(140 / 30, 3)
    assert seen[-1] == rec and rec["launch_scale_undone"] == 0.2
    again = GpuTime(scale=20.0, saved=rec)  # a resumed run adds to what the killed one spent
    again.add_device("measured", 10.0)
    assert again.record()["measured"] == 40.0 and again.record()["total"] == 150.0
    with pytest.raises(ValueError, match="unknown GPU-time phase"):
        gt.add("lunch", 1.0)
    line = gpu_time_line(rec)
    assert line is not None and line.startswith("GPU time 2.3 min: measured share 21 % (4.7x the measured windows)")
    assert "launch 71 %" in line and gpu_time_line(None) is None
    assert twin_launch_scale("twin", ["--twin-launch-scale", "0.2"]) == 0.2
    assert twin_launch_scale("twin", ["--twin-launch-scale=0.5"]) == 0.5
    assert twin_launch_scale("sglang", ["--twin-launch-scale=0.5"]) == 1.0 and twin_launch_scale("twin", []) == 1.0


@pytest.mark.slow  # two sweeps and a report (~15 s of a worker): the default suite keeps under its 6 minutes
@pytest.mark.integration
def test_a_twin_sweep_accounts_every_phase_and_a_resume_adds_to_it(tmp_path: Path) -> None:
    run = tmp_path / "run"
    argv = ["sweep", "--configs", "0:0:0,3:1:4", "--batch-sizes", "1,4", "--time-scale", "50", "--output-tokens",
            "128", "--settle", "0", "--plain", "--engine-arg=--twin-launch-scale", "--engine-arg=0.2"]  # fmt: skip
    r = run_harness(*argv, "--out", str(run), timeout=240)
    assert r.returncode == 0, r.stdout + r.stderr
    rec = json.loads((run / "manifest.json").read_text())["gpu_time"]
    rows = [json.loads(line) for line in (run / "rows.jsonl").read_text().splitlines()]
    assert rec["total"] == pytest.approx(sum(rec[p] for p in PHASES), abs=0.01)
    assert rec["measured"] == pytest.approx(sum(row["wall_clock_s"] for row in rows), rel=1e-3)  # the rows' windows
    assert rec["launch"] > 0 and rec["teardown"] > 0 and rec["warmup"] > 0 and rec["launch_scale_undone"] == 0.2
    assert rec["time_scale"] == 50.0 and 0 < rec["measured_share"] < 1 and rec["per_measured"] > 1
    assert "GPU time " in r.stdout and "measured share" in r.stdout  # the end-of-sweep line
    assert r.stderr.startswith("plan: 4 cells, 4 launches, GPU time ~"), r.stderr[:300]  # the first line: the plan
    assert "against a plan of ~" in r.stdout  # and what was spent against it
    plan = json.loads((run / "manifest.json").read_text())["plan"]
    assert plan["estimate"]["cells"] == 4 and plan["published_grid_gpu_s"] > plan["estimate"]["gpu_time"]["total"]
    # the launches by the twin engine's own log lines, sglang's format: its weights and CUDA graphs are the model's
    spent, planned = rec["launch_phases"], plan["estimate"]["launch_phases"]
    assert set(spent) == {"imports", "weights", "cuda_graphs", "other"}
    assert spent["weights"] == pytest.approx(planned["weights"], rel=0.05)
    assert spent["cuda_graphs"] == pytest.approx(planned["cuda_graphs"], rel=0.05)
    status = run_harness("status", str(run))
    assert status.returncode == 0 and "measured share" in status.stdout, status.stdout
    again = run_harness("sweep", "--resume", str(run), "--plain", timeout=240)
    assert again.returncode == 0, again.stdout + again.stderr
    after = json.loads((run / "manifest.json").read_text())["gpu_time"]
    assert after["measured"] == rec["measured"] and after["total"] >= rec["total"]  # nothing measured twice
    report = run_harness("report", "sweep", str(run), timeout=240)
    assert report.returncode == 0, report.stdout + report.stderr
    summary = json.loads((run / "reports" / "summary.json").read_text())
    assert summary["gpu_time"]["total"] == after["total"] and "measured share" in report.stdout
