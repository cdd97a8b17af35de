"""``harness sampler serve --probe nvml`` and ``benchmarks/nvml_check.py`` as real processes whose nvidia-ml-py
loads the NVML shim (``libnvidia-ml.so.1`` on ``LD_LIBRARY_PATH``): a full driver, a library lacking newer entry
points, counter reset and GPU loss mid-run, no energy counter."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from importlib.metadata import version
from pathlib import Path

import httpx
import pytest
from _nvml_shim_helpers import (
    NOT_SUPPORTED,
    OLD_DRIVER,
    POWER_AVERAGE,
    POWER_INSTANT,
    ShimScript,
    assert_measured,
    session_shim,
)
from _sampler_testbed import Service, harness_argv

from harness.core.clocks import wall_ns
from harness.telemetry.client import TelemetryClient

REPO = Path(__file__).resolve().parents[2]
# A library lacking entry points newer drivers have: field values, v2 memory, the clock-event-reasons name
LACKING = (*OLD_DRIVER, "nvmlDeviceGetFieldValues")


@pytest.fixture(scope="module")
def shim_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return {"full": session_shim(tmp_path_factory), "lacking": session_shim(tmp_path_factory, omit=LACKING)}


def _sampler(tmp_path: Path, env: dict[str, str]) -> Service:
    argv = harness_argv(
        "sampler", "serve", "--probe", "nvml", "--rate-hz", "20", "--port", "0", "--log", str(tmp_path / "log")
    )
    svc = Service(argv, tmp_path / "sampler.log", env)
    svc.wait_url()
    return svc


def _window(tel: TelemetryClient, seconds: float, during=None):
    t0 = wall_ns()
    time.sleep(seconds / 2)
    if during:
        during()
    time.sleep(seconds / 2)
    return tel.window(t0, wall_ns())


def test_sampler_serve_through_the_real_binding(tmp_path: Path, shim_dirs):
    script = ShimScript(tmp_path / "nvml.script")
    with _sampler(tmp_path, script.env(shim_dirs["full"])) as svc, TelemetryClient(svc.url) as tel:
        tel.wait_ready()
        ident = tel.identity()
        assert (
            ident["probe"] == "nvml"
            and ident["name"] == "NVIDIA H200 (shim)"
            and ident["nvidia_ml_py"] == version("nvidia-ml-py")
        )
        assert ident["power_w_source"] == "NVML_FI_DEV_POWER_INSTANT" and ident["unsupported"] == []
        w = _window(tel, 1.0)
        assert_measured(w, 71.5, "counter")
        assert w.power_capped  # clock-event bit 0x4 from the script
        metrics = httpx.get(f"{svc.url}/metrics", timeout=5).text
        assert "gpu_energy_joules_total" in metrics and "gpu_power_watts{" in metrics

        reset = _window(tel, 0.6, during=lambda: script.set({"counter_epoch": 1}))
        assert not reset.valid and "counter_reset" in reset.reasons and reset.energy_j is None

        script.field(POWER_INSTANT, NOT_SUPPORTED)  # the instant field goes away: /v1/info must say so (live)
        time.sleep(0.3)
        ident = tel.identity()
        assert (
            ident["power_w_source"].startswith("nvmlDeviceGetPowerUsage")
            and "NVML_FI_DEV_POWER_INSTANT" in ident["unsupported"]
        )

        lost = _window(tel, 0.6, during=lambda: script.set({"gpu_lost": 1}))
        latest = tel.snapshot()
        assert latest is not None and latest.energy_mj is None and any("GPU is lost" in e for e in latest.errors)
        assert not lost.valid and lost.energy_j is None
    start = json.loads((tmp_path / "log" / "samples.jsonl").read_text().splitlines()[0])
    assert start["kind"] == "start" and start["detail"]["identity"]["power_w_source"] == "NVML_FI_DEV_POWER_INSTANT"


def test_sampler_serve_on_a_library_lacking_newer_entry_points(tmp_path: Path, shim_dirs):
    """A laptop-like GPU on an older driver: no energy counter, no field values, v1 memory, the deprecated
    throttle-reasons call. Every sample is complete and error-free; windows integrate power and stay valid."""
    script = ShimScript(
        tmp_path / "nvml.script", **{"fail.nvmlDeviceGetTotalEnergyConsumption": NOT_SUPPORTED, "clock_events": 0x1}
    )
    with _sampler(tmp_path, script.env(shim_dirs["lacking"])) as svc, TelemetryClient(svc.url) as tel:
        tel.wait_ready()
        ident = tel.identity()
        assert ident["power_w_source"].startswith("nvmlDeviceGetPowerUsage")
        assert ident["memory_source"].startswith("nvmlDeviceGetMemoryInfo (v1")
        assert ident["clock_events_source"] == "nvmlDeviceGetCurrentClocksThrottleReasons"
        assert {"energy", "power_fields", "memory_v2", "clock_events"} <= set(ident["unsupported"])
        w = _window(tel, 1.0)
        latest = tel.snapshot()
    assert latest is not None and latest.errors == [] and latest.power_w == 69.0 and latest.power_avg_w is None
    assert (
        latest.memory_used_mb == 256 + 3072 and latest.memory_reserved_mb is None and latest.clock_event_reasons == 0x1
    )
    assert_measured(w, 69.0, "power_integration")
    start = json.loads((tmp_path / "log" / "samples.jsonl").read_text().splitlines()[0])
    assert start["detail"]["identity"]["power_w_source"].startswith(
        "nvmlDeviceGetPowerUsage"
    )  # known before the first sample


def _nvml_check(env: dict[str, str]) -> dict:
    argv = [sys.executable, str(REPO / "benchmarks" / "nvml_check.py"), "--seconds", "1", "--poll-s", "0.5"]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=120, env={**os.environ, **env})
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout)


def test_nvml_check_against_the_shim(tmp_path: Path, shim_dirs):
    script = ShimScript(tmp_path / "nvml.script", energy_update_ms=100)
    out = _nvml_check(script.env(shim_dirs["full"]))
    assert out["ok"] and out["nvml_py"] == version("nvidia-ml-py") and out["identity"]["name"] == "NVIDIA H200 (shim)"
    assert (
        80 <= out["update_period_ms"]["total_energy"]["median"] <= 150
    )  # the shim republishes its counter every 100 ms
    assert "error" not in out["update_period_ms"]["field_power_instant"]
    assert all(v["error"] is None for v in out["latency_ms"].values())
    a = out["agreement"]
    assert a["energy_method"] == "counter" and a["power_w_source"] == "NVML_FI_DEV_POWER_INSTANT"
    assert a["energy_counter_step_j"] == pytest.approx(71.5 * a["window"]["duration_s"], rel=0.01)
    assert abs(a["rel_diff_power_w_integral_vs_counter"]) < 0.01 and a[
        "energy_average_field_trapezoid_j"
    ] == pytest.approx(70.25 * a["window"]["duration_s"], rel=0.01)


def test_nvml_check_labels_integrated_power_honestly(tmp_path: Path, shim_dirs):
    script = ShimScript(tmp_path / "nvml.script", **{"fail.nvmlDeviceGetTotalEnergyConsumption": NOT_SUPPORTED,
                                                    f"field.{POWER_INSTANT}": NOT_SUPPORTED, f"field.{POWER_AVERAGE}": NOT_SUPPORTED})  # fmt: skip
    out = _nvml_check(script.env(shim_dirs["full"]))
    a = out["agreement"]
    assert a["energy_method"] == "power_integration" and a["power_w_source"].startswith("nvmlDeviceGetPowerUsage")
    assert (
        a["energy_counter_step_j"] is None
        and a["energy_counter_linear_j"] is None
        and a["rel_diff_power_w_integral_vs_counter"] is None
    )
    assert a["energy_power_w_trapezoid_j"] == pytest.approx(69.0 * a["window"]["duration_s"], rel=0.01)
    assert out["update_period_ms"]["field_power_instant"] == {"error": "Not Supported"}  # the field's own return code
    assert "Not Supported" in out["latency_ms"]["total_energy"]["error"]


@pytest.mark.parametrize("case", ["no_driver", "gpu_index"])
def test_sampler_serve_refuses_clearly(tmp_path: Path, shim_dirs, case: str):
    """A library without a driver (no script) and a GPU index the driver does not have: exit code and a fix."""
    script = ShimScript(tmp_path / "nvml.script")
    env = {**os.environ, **script.env(shim_dirs["full"])}
    argv = harness_argv("sampler", "serve", "--probe", "nvml", "--port", "0")
    if case == "no_driver":
        env.pop("NVML_SHIM_SCRIPT")
    else:
        argv += ["--gpu-index", "3"]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env)
    expected = {
        "no_driver": (4, "NVML is not available (Driver Not Loaded)"),
        "gpu_index": (2, "--gpu-index 3 out of range"),
    }[case]
    assert r.returncode == expected[0] and expected[1] in r.stderr and "fix:" in r.stderr, r.stderr
