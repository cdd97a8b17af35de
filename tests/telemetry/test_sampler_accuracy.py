"""Window energy against the twin device's exact ``/truth/energy``: <= 0.5 % for windows of 5 s or more at 10 Hz,
<= 2 % for 1 s windows.

The ratio that matters is window length / sampling period. A real-time check runs the device at --time-scale 1
with a 10 Hz sampler; the scaled checks run the device 10x faster and the sampler at 100 Hz wall, i.e. 10 Hz on the
device clock, so a "5 s window" is 5 device seconds = 50 sampling periods and costs 0.5 s of wall time.
Two load patterns: ``random`` (the load changes at random instants) and ``edge`` (the harness pattern: load starts
right after the window opens and stops right before it closes, the hardest case for edge interpolation).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from _sampler_testbed import TwinLoad, measure_windows, start_sampler, start_twin_gpu

from harness.telemetry.client import TelemetryClient

BOUND = {5.0: 0.005, 1.0: 0.02}
# What a late sample on a loaded, shared 2-core box can cause (100 Hz wall sampling in the scaled runs is tight).
LOAD_REASONS = {"slow_probe", "gap_over_3_periods", "coverage_below_95pct"}


def _testbed(tmp_path: Path, scale: float, rate_hz: float):
    gpu = start_twin_gpu(tmp_path, time_scale=scale, seed=3)
    try:
        sp = start_sampler(gpu.url, None, tmp_path, rate_hz=rate_hz)
    except BaseException:
        gpu.stop()
        raise
    return gpu, sp


def _check(rows: list[dict], bound: float, min_valid: float) -> None:
    errs = [r["rel_err"] for r in rows]
    assert all(e is not None for e in errs), rows
    worst = max(abs(e) for e in errs)
    assert worst <= bound, f"worst |rel err| {worst:.4%} > {bound:.1%}: {rows}"
    odd = [r["reasons"] for r in rows if set(r["reasons"]) - LOAD_REASONS]
    assert not odd, f"unexpected validity reasons: {odd}"
    valid = sum(r["valid"] for r in rows) / len(rows)
    assert valid >= min_valid, f"only {valid:.0%} valid: {[r['reasons'] for r in rows]}"


def test_accuracy_real_time_10hz(tmp_path: Path):
    gpu, sp = _testbed(tmp_path, 1.0, 10.0)
    try:
        with TelemetryClient(sp.url) as c:
            c.wait_ready(10)
            load = TwinLoad(gpu.url)
            time.sleep(0.3)
            try:
                one = measure_windows(c, load, scenario="edge", device_s=1.0, count=2, time_scale=1.0, seed=1)
                one += measure_windows(c, load, scenario="random", device_s=1.0, count=2, time_scale=1.0, seed=2)
                five = measure_windows(c, load, scenario="edge", device_s=5.0, count=1, time_scale=1.0, seed=3)
            finally:
                load.close()
    finally:
        sp.stop()
        gpu.stop()
    # Validity can suffer from a late sample on a loaded shared box; the energy bound holds for every window.
    _check(one, BOUND[1.0], min_valid=0.5)
    _check(five, BOUND[5.0], min_valid=0.0)
    assert all(r["duration_s"] == pytest.approx(r["wall_s"], rel=1e-3) for r in one + five)


@pytest.mark.parametrize("scenario", ["edge", "random"])
def test_accuracy_scaled_10hz_device_clock(tmp_path: Path, scenario: str):
    scale = 10.0
    gpu, sp = _testbed(tmp_path, scale, 10.0 * scale)
    try:
        with TelemetryClient(sp.url) as c:
            c.wait_ready(10)
            load = TwinLoad(gpu.url)
            time.sleep(0.3)
            try:
                five = measure_windows(c, load, scenario=scenario, device_s=5.0, count=6, time_scale=scale, seed=11)
                one = measure_windows(c, load, scenario=scenario, device_s=1.0, count=8, time_scale=scale, seed=12)
            finally:
                load.close()
    finally:
        sp.stop()
        gpu.stop()
    # A loaded 2-core box can delay a 100 Hz sample past 3 periods (validity: load reasons only, checked above);
    # the energy bound holds for every window anyway.
    _check(five, BOUND[5.0], min_valid=0.0)
    _check(one, BOUND[1.0], min_valid=0.0)
    assert all(r["duration_s"] == pytest.approx(r["wall_s"] * scale, rel=1e-2) for r in five + one)
