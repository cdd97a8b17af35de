"""``harness serve --power-budget W`` (issue 47, item 4) on real twin processes: on the datacenter profile (700 W,
settable 200-700 W) a 300 W budget becomes the twin GPU's enforced limit before the instances launch, the controller's
utilization is measured against it (the sampler reads the enforced limit), and the limit found before is put back at
the end; a budget outside the board's limits is refused naming them, with nothing left running."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from _loadgen import ClosedLoop, Recorder
from _serve_helpers import PROMPTS, log_lines, serve_session, wait_for

from harness.gpu.power_cap import TwinCapDevice
from harness.grid import BASELINE

ROOT = Path(__file__).resolve().parents[2]


def test_a_300_w_budget_is_the_limit_the_band_is_held_against_and_is_put_back(tmp_path: Path) -> None:
    with serve_session(tmp_path, {1: BASELINE}, twin_profile="h100-sxm", power_budget_w=300.0) as s:
        url = s.world.twin_gpu_url
        assert url is not None
        limits = TwinCapDevice(url).limits()
        assert limits.enforced_w == 300.0 and (limits.min_w, limits.max_w) == (200.0, 700.0)
        load = ClosedLoop(s.url, 4, 24, PROMPTS, Recorder()).start()
        wait_for(lambda: (s.world.telemetry.snapshot().power_w or 0) > 150, timeout_s=20)
        snap = s.world.telemetry.snapshot()
        assert snap.power_limit_w == 300.0  # u = power / 300 W in the control loop
        load.stop()
        event = next(e for e in log_lines(s) if e.get("event") == "power_budget")
        assert event["budget_w"] == 300.0 and event["original_w"] == 700.0 and event["enforced_w"] == 300.0
        assert s.budget is not None
        s.budget.close()
        assert TwinCapDevice(url).limits().enforced_w == 700.0  # put back while the twin GPU still runs
    record = json.loads((tmp_path / "power_budget.json").read_text())
    assert record["restored"] is True and record["restored_w"] == 700.0 and record["budget_w"] == 300.0


def test_a_budget_outside_the_boards_limits_is_refused_naming_them(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "harness", "serve", "--engine", "twin", "--twin-profile", "h100-sxm",
         "--picks", "1=0:0:0", "--power-budget", "150", "--port", "0", "--out", str(tmp_path / "serve")],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert out.returncode != 0 and "Traceback" not in out.stderr, out.stderr[-2000:]
    text = out.stdout + out.stderr
    assert "150" in text and "[200, 700]" in text, text[-2000:]
    assert not (tmp_path / "serve" / "power_budget.json").exists()  # refused before anything was set
