"""NvmlProbe through the real nvidia-ml-py against the NVML shim (a gcc-built ``libnvidia-ml.so.1`` driven by a
script, loaded in this process), every failure mode of issue 12 item 5; and the GPU check without any NVML."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from importlib.metadata import version
from pathlib import Path

import pytest
from _nvml_shim_helpers import (
    FUNCTION_NOT_FOUND,
    NOT_SUPPORTED,
    POWER_AVERAGE,
    POWER_INSTANT,
    UNKNOWN,
    ShimScript,
    assert_measured,
    call_count,
    load_in_process,
    session_shim,
)  # fmt: skip

from harness.core.clocks import wall_ns
from harness.core.errors import ServiceUnavailableError, UsageError
from harness.telemetry.probes import NvmlProbe
from harness.telemetry.sampler import InProcessSampler

REPO = Path(__file__).resolve().parents[2]
ARG_VERSION_MISMATCH = 25


@pytest.fixture(scope="session")
def shim_lib(tmp_path_factory: pytest.TempPathFactory):
    return load_in_process(session_shim(tmp_path_factory))


@pytest.fixture
def script(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shim_lib) -> ShimScript:
    s = ShimScript(tmp_path / "nvml.script")
    monkeypatch.setenv("NVML_SHIM_SCRIPT", str(s.path))
    return s


@pytest.fixture
def probe(script: ShimScript):
    p = NvmlProbe(0)
    yield p
    p.close()


def test_reading_units_and_fields(probe: NvmlProbe):
    r = probe.read()
    assert r["errors"] == [] and r["device_ns"] is None
    assert r["energy_mj"] >= 5_000_000 and r["power_w"] == 71.5 and r["power_avg_w"] == 70.25
    assert r["name"] == "NVIDIA H200 (shim)" and r["uuid"].startswith("GPU-5h1m") and r["driver_version"] == "575.57.08"
    assert (
        r["memory_total_mb"] == 8192
        and r["memory_reserved_mb"] == 256
        and r["memory_used_mb"] == 3072
        and r["memory_free_mb"] == 8192 - 256 - 3072
    )
    assert r["power_limit_w"] == 600.0 and r["power_management_limit_w"] == 650.0
    assert r["clock_event_reasons"] == 0x4 and r["utilization_pct"] == 97.0
    assert r["sm_clock_mhz"] == 1980 and r["mem_clock_mhz"] == 3201 and r["temperature_c"] == 61
    ident = probe.identity()
    assert ident["nvml_version"] == "12.575.57.08" and ident["nvidia_ml_py"] == version("nvidia-ml-py")
    assert ident["power_default_limit_w"] == 700.0 and ident["unsupported"] == []
    assert (
        ident["power_w_source"] == "NVML_FI_DEV_POWER_INSTANT"
        and ident["memory_source"] == "nvmlDeviceGetMemoryInfo_v2"
    )
    assert ident["clock_events_source"] == "nvmlDeviceGetCurrentClocksEventReasons"


def test_window_energy_is_the_counter_delta(script: ShimScript):
    with InProcessSampler(NvmlProbe(0), rate_hz=20.0) as s:
        time.sleep(0.2)
        t0 = wall_ns()
        time.sleep(1.0)
        w = s.window(t0, wall_ns())
    assert_measured(w, 71.5, "counter")


def test_no_energy_counter_integrates_power_and_stops_asking(script: ShimScript, shim_lib):
    script.fail("nvmlDeviceGetTotalEnergyConsumption", NOT_SUPPORTED)
    before = call_count(shim_lib, "nvmlDeviceGetTotalEnergyConsumption")
    with InProcessSampler(NvmlProbe(0), rate_hz=20.0) as s:
        time.sleep(0.2)
        t0 = wall_ns()
        time.sleep(1.0)
        w = s.window(t0, wall_ns())
        assert "energy" in s.identity()["unsupported"]
    assert call_count(shim_lib, "nvmlDeviceGetTotalEnergyConsumption") - before == 1
    assert_measured(w, 71.5, "power_integration")


@pytest.mark.parametrize("code", [NOT_SUPPORTED, FUNCTION_NOT_FOUND])
def test_field_values_call_absent_falls_back_to_power_usage_once(script: ShimScript, shim_lib, code: int):
    script.fail("nvmlDeviceGetFieldValues", code)
    before = call_count(shim_lib, "nvmlDeviceGetFieldValues")
    p = NvmlProbe(0)
    try:
        reads = [p.read() for _ in range(3)]
        assert call_count(shim_lib, "nvmlDeviceGetFieldValues") - before == 1
        assert all(r["errors"] == [] and r["power_w"] == 69.0 and r["power_avg_w"] is None for r in reads)
        assert (
            p.identity()["power_w_source"].startswith("nvmlDeviceGetPowerUsage")
            and "power_fields" in p.identity()["unsupported"]
        )
    finally:
        p.close()


def test_absent_fields_are_dropped_one_by_one(script: ShimScript):
    script.field(POWER_INSTANT, FUNCTION_NOT_FOUND)
    p = NvmlProbe(0)
    try:
        r = p.read()
        assert r["errors"] == [] and r["power_w"] == 69.0 and r["power_avg_w"] == 70.25  # average field still read
        script.field(POWER_AVERAGE, NOT_SUPPORTED)
        r = p.read()
        assert r["errors"] == [] and r["power_w"] == 69.0 and r["power_avg_w"] is None
        assert {"NVML_FI_DEV_POWER_INSTANT", "NVML_FI_DEV_POWER_AVERAGE"} <= set(p.capabilities()["unsupported"])
        script.fail("nvmlDeviceGetPowerUsage", NOT_SUPPORTED)
        r = p.read()
        assert r["errors"] == [] and r["power_w"] is None and p.capabilities()["power_w_source"] is None
    finally:
        p.close()


def test_a_failing_field_is_an_error_and_asked_again(probe: NvmlProbe, script: ShimScript):
    script.field(POWER_INSTANT, UNKNOWN)
    r = probe.read()
    assert r["power_w"] is None and any("NVML_FI_DEV_POWER_INSTANT" in e for e in r["errors"])
    script.field(POWER_INSTANT, None)
    assert probe.read()["power_w"] == 71.5 and probe.capabilities()["unsupported"] == []


def test_removed_deprecated_wrappers_lose_only_their_value(script: ShimScript, monkeypatch: pytest.MonkeyPatch):
    import pynvml

    monkeypatch.delattr(pynvml, "nvmlDeviceGetTemperature")  # a future nvidia-ml-py without the deprecated wrappers
    monkeypatch.delattr(pynvml, "nvmlDeviceGetCurrentClocksThrottleReasons")
    script.fail("nvmlDeviceGetCurrentClocksEventReasons", NOT_SUPPORTED)
    p = NvmlProbe(0)
    try:
        r = p.read()
        assert r["errors"] == [] and r["temperature_c"] is None and r["clock_event_reasons"] is None
        assert r["energy_mj"] is not None and r["power_w"] == 71.5 and r["memory_used_mb"] == 3072
        assert {"temperature", "clock_events", "throttle_reasons"} <= set(p.capabilities()["unsupported"])
    finally:
        p.close()


def test_clock_events_fall_back_to_the_deprecated_call(script: ShimScript):
    script.fail("nvmlDeviceGetCurrentClocksEventReasons", FUNCTION_NOT_FOUND).set({"clock_events": 0x20})
    p = NvmlProbe(0)
    try:
        assert p.read()["clock_event_reasons"] == 0x20
        assert p.capabilities()["clock_events_source"] == "nvmlDeviceGetCurrentClocksThrottleReasons"
    finally:
        p.close()


@pytest.mark.parametrize("code", [FUNCTION_NOT_FOUND, ARG_VERSION_MISMATCH])
def test_memory_falls_back_to_v1(script: ShimScript, code: int):
    script.fail("nvmlDeviceGetMemoryInfo_v2", code)
    p = NvmlProbe(0)
    try:
        r = p.read()
        assert r["errors"] == [] and r["memory_total_mb"] == 8192 and r["memory_reserved_mb"] is None
        assert (
            r["memory_used_mb"] == 256 + 3072 and r["memory_free_mb"] == 8192 - 256 - 3072
        )  # v1: used includes reserved
        assert p.capabilities()["memory_source"].startswith("nvmlDeviceGetMemoryInfo (v1")
    finally:
        p.close()


def test_gpu_lost_is_recorded_not_raised_and_windows_go_invalid(script: ShimScript):
    with InProcessSampler(NvmlProbe(0), rate_hz=20.0) as s:
        time.sleep(0.3)
        t0 = wall_ns()
        time.sleep(0.2)
        script.set({"gpu_lost": 1})
        time.sleep(0.4)
        lost = s.snapshot()
        t1 = wall_ns()
        w = s.window(t0, t1, wait_s=0.3)
        script.set({"gpu_lost": None})
        time.sleep(0.3)
        t2 = wall_ns()
        time.sleep(0.5)
        after = s.window(t2, wall_ns())
        ident = s.identity()
    assert lost.energy_mj is None and lost.power_w is None and any("GPU is lost" in e for e in lost.errors)
    assert not w.valid and w.energy_j is None and "no_sample_after" in w.reasons
    assert_measured(after, 71.5, "counter")  # transient: nothing was marked unsupported
    assert ident["unsupported"] == [] and ident["uuid"].startswith("GPU-5h1m")


def test_counter_reset_invalidates_the_window(script: ShimScript):
    with InProcessSampler(NvmlProbe(0), rate_hz=20.0) as s:
        time.sleep(0.3)
        t0 = wall_ns()
        time.sleep(0.3)
        script.set({"counter_epoch": 1})
        time.sleep(0.3)
        t1 = wall_ns()
        time.sleep(0.3)
        w = s.window(t0, t1)
        t2 = wall_ns()
        time.sleep(0.5)
        after = s.window(t2, wall_ns())
    assert not w.valid and "counter_reset" in w.reasons and w.energy_j is None
    assert_measured(after, 71.5, "counter")


def test_sampler_identity_follows_what_the_probe_learns(script: ShimScript):
    with InProcessSampler(NvmlProbe(0), rate_hz=20.0) as s:
        first = s.identity()
        script.field(POWER_INSTANT, NOT_SUPPORTED)
        time.sleep(0.3)
        later = s.identity()
    assert first["power_w_source"] == "NVML_FI_DEV_POWER_INSTANT" and first["unsupported"] == []
    assert (
        later["power_w_source"].startswith("nvmlDeviceGetPowerUsage")
        and "NVML_FI_DEV_POWER_INSTANT" in later["unsupported"]
    )


def test_capabilities_are_known_before_the_first_sample(script: ShimScript):
    script.fail("nvmlDeviceGetTotalEnergyConsumption", NOT_SUPPORTED).field(POWER_INSTANT, NOT_SUPPORTED)
    p = NvmlProbe(0)
    try:
        ident = p.identity()
        assert ident["power_w_source"].startswith("nvmlDeviceGetPowerUsage") and {
            "energy",
            "NVML_FI_DEV_POWER_INSTANT",
        } <= set(ident["unsupported"])
    finally:
        p.close()


def test_native_world_reads_name_and_power_limit_from_the_first_sample(script: ShimScript, tmp_path: Path):
    from harness.engine.spec import EngineSpec
    from harness.world.world import open_world

    script.set({"delay_ms": 20})  # a slow driver: ~0.3 s per reading, so no sample exists right after the start
    spec = EngineSpec(kind="sglang", sglang_version="0.5.2")  # no sglang here: the version is given, not detected
    with open_world(engine="sglang", run_dir=tmp_path / "run", spec=spec) as world:  # in-process NVML sampler
        assert world.power_limit_w == 600.0 and world.hardware == "H200_shim"  # from "NVIDIA H200 (shim)"
        assert world.gpu_identity["sampler"]["power_w_source"] == "NVML_FI_DEV_POWER_INSTANT"


def test_in_process_sampler_without_readings_is_a_clear_error(script: ShimScript):
    script.fail("nvmlDeviceGetTotalEnergyConsumption", UNKNOWN).fail("nvmlDeviceGetFieldValues", UNKNOWN)
    with InProcessSampler(NvmlProbe(0), rate_hz=20.0) as s:
        with pytest.raises(ServiceUnavailableError) as ei:
            s.wait_ready(timeout_s=0.3)
    assert "gave no reading within" in ei.value.message and "nvml energy: Unknown Error" in ei.value.message


def test_no_driver_is_a_clear_error(shim_lib, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("NVML_SHIM_SCRIPT", raising=False)  # the shim then answers as a library without a driver
    with pytest.raises(ServiceUnavailableError) as ei:
        NvmlProbe(0)
    assert "NVML is not available (Driver Not Loaded)" in ei.value.message and ei.value.fix


def test_gpu_index_out_of_range_is_a_usage_error(script: ShimScript):
    with pytest.raises(UsageError) as ei:
        NvmlProbe(1)
    assert "out of range: this host has 1 GPU(s)" in ei.value.message and ei.value.fix == "pick 0..0"


def test_gpu_lost_at_start_is_a_clear_error(script: ShimScript):
    script.set({"gpu_lost": 1})
    with pytest.raises(ServiceUnavailableError) as ei:
        NvmlProbe(0)
    assert "GPU is lost" in ei.value.message


def _has_nvml() -> bool:
    """Whether a real NVML answers here, asked in a child process: loading the driver's library into this process
    would stop the shim tests above from loading theirs (one ``libnvidia-ml.so.1`` per process)."""
    env = {k: v for k, v in os.environ.items() if k != "NVML_SHIM_SCRIPT"}
    r = subprocess.run(
        [sys.executable, "-c", "import pynvml; pynvml.nvmlInit(); pynvml.nvmlShutdown()"],
        capture_output=True,
        timeout=60,
        env=env,
    )
    return r.returncode == 0


@pytest.mark.skipif(_has_nvml(), reason="this machine has NVML: the check would run for real")
def test_nvml_check_exits_2_without_a_gpu():
    r = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "nvml_check.py")], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 2
    assert json.loads(r.stdout)["ok"] is False and "needs an NVIDIA GPU" in r.stderr


def test_a_reading_is_stamped_at_its_energy_read_not_the_slow_calls_midpoint(script: ShimScript) -> None:
    """A dozen NVML calls per reading: on a loaded host one of them can stall for 100 ms, and a midpoint stamp then
    misplaces the energy counter at a window edge by half the stall (``test_nvml_check_against_the_shim`` read +9 %
    energy on a 1 s window under the parallel suite). The probe stamps the reading at its counter read."""
    from harness.telemetry.probes import probe_timing

    p = NvmlProbe(0)
    try:
        script.set({"delay_ms": 30})  # every device call takes 30 ms: a read is ~12 calls, ~360 ms
        w0 = wall_ns()
        reading, t_wall, _, latency_ms = probe_timing(p)
        w1 = wall_ns()
    finally:
        script.set({"delay_ms": 0})
        p.close()
    assert latency_ms >= 8 * 30 and reading["energy_mj"] is not None
    # the counter is the second call and the power fields the third: the stamp sits within ~4 calls of the start,
    # far before the midpoint (~6 calls in)
    assert w0 <= t_wall <= w0 + 4 * 30_000_000 < (w0 + w1) // 2, ((t_wall - w0) / 1e6, (w1 - w0) / 1e6)
