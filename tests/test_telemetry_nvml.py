"""NvmlProbe's handling of NVML answers, with a scripted stand-in for the driver library (no GPU here), and the
GPU check's behaviour on a machine without NVML."""

from __future__ import annotations

import json
import subprocess
import sys
import types
from collections import Counter
from pathlib import Path

import pytest

from harness.errors import ServiceUnavailableError
from harness.telemetry.probes import NvmlProbe

REPO = Path(__file__).resolve().parents[1]


class NVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(f"nvml error {value}")
        self.value = value


def fake_nvml(*, init_fails: bool = False, energy: str = "ok", instant_field: bool = True, has_events_call: bool = True) -> types.ModuleType:
    """A pynvml-shaped module: values a small GPU would report, with switchable failures."""
    nv = types.ModuleType("pynvml")
    calls: Counter = Counter()
    nv.calls = calls  # type: ignore[attr-defined]
    nv.NVMLError = NVMLError
    nv.NVML_SUCCESS, nv.NVML_ERROR_NOT_SUPPORTED, nv.NVML_ERROR_GPU_IS_LOST, nv.NVML_ERROR_FUNCTION_NOT_FOUND = 0, 3, 15, 13
    nv.NVML_FI_DEV_POWER_INSTANT, nv.NVML_FI_DEV_POWER_AVERAGE, nv.NVML_POWER_SCOPE_GPU = 186, 185, 0
    nv.NVML_TEMPERATURE_GPU, nv.NVML_CLOCK_SM, nv.NVML_CLOCK_MEM = 0, 1, 2
    nv.nvmlMemory_v2 = 0x02000028

    def init() -> None:
        if init_fails:
            raise NVMLError(12)

    def energy_fn(h):
        calls["energy"] += 1
        if energy == "unsupported":
            raise NVMLError(3)
        if energy == "lost":
            raise NVMLError(15)
        return 123456

    def fields(h, ids):
        out = []
        for fid, _scope in ids:
            ok = fid != 186 or instant_field
            val = types.SimpleNamespace(uiVal=71500 if fid == 186 else 70250, dVal=0.0, ulVal=0, ullVal=0, sllVal=0, siVal=0)
            out.append(types.SimpleNamespace(nvmlReturn=0 if ok else 3, valueType=1, value=val))
        return out

    nv.nvmlInit, nv.nvmlShutdown = init, lambda: None
    nv.nvmlDeviceGetCount = lambda: 1
    nv.nvmlDeviceGetHandleByIndex = lambda i: object()
    nv.nvmlDeviceGetName = lambda h: b"Fake H200"
    nv.nvmlSystemGetDriverVersion = lambda: "575.00"
    nv.nvmlSystemGetNVMLVersion = lambda: "12.575"
    nv.nvmlDeviceGetUUID = lambda h: "GPU-fake-1"
    nv.nvmlDeviceGetTotalEnergyConsumption = energy_fn
    nv.nvmlDeviceGetFieldValues = fields
    nv.nvmlDeviceGetPowerUsage = lambda h: 69000
    nv.nvmlDeviceGetTemperature = lambda h, s: 61
    nv.nvmlDeviceGetClockInfo = lambda h, c: 1980 if c == 1 else 3201
    nv.nvmlDeviceGetUtilizationRates = lambda h: types.SimpleNamespace(gpu=97, memory=40)
    nv.nvmlDeviceGetMemoryInfo = lambda h, v: types.SimpleNamespace(total=8 << 30, reserved=1 << 28, used=3 << 30, free=(8 << 30) - (1 << 28) - (3 << 30))
    nv.nvmlDeviceGetEnforcedPowerLimit = lambda h: 700000
    nv.nvmlDeviceGetPowerManagementLimit = lambda h: 700000
    nv.nvmlDeviceGetPowerManagementDefaultLimit = lambda h: 700000
    if has_events_call:
        nv.nvmlDeviceGetCurrentClocksEventReasons = lambda h: 0x4
    nv.nvmlDeviceGetCurrentClocksThrottleReasons = lambda h: 0x20
    return nv


def test_reading_units_and_fields(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml())
    r = NvmlProbe(0).read()
    assert r["errors"] == [] and r["device_ns"] is None
    assert r["energy_mj"] == 123456 and r["power_w"] == 71.5 and r["power_avg_w"] == 70.25
    assert r["name"] == "Fake H200" and r["uuid"] == "GPU-fake-1" and r["driver_version"] == "575.00"
    assert r["memory_total_mb"] == 8192 and r["memory_reserved_mb"] == 256 and r["memory_used_mb"] == 3072
    assert r["power_limit_w"] == 700.0 and r["clock_event_reasons"] == 0x4 and r["utilization_pct"] == 97.0
    assert r["sm_clock_mhz"] == 1980 and r["mem_clock_mhz"] == 3201 and r["temperature_c"] == 61


def test_unsupported_is_absent_never_zero_and_not_asked_again(monkeypatch):
    nv = fake_nvml(energy="unsupported", instant_field=False, has_events_call=False)
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    p = NvmlProbe(0)
    r1, r2 = p.read(), p.read()
    assert r1["energy_mj"] is None and r1["errors"] == [] and nv.calls["energy"] == 1
    assert r1["power_w"] == 69.0 and p.identity()["power_w_source"] == "nvmlDeviceGetPowerUsage"
    assert r1["clock_event_reasons"] == 0x20  # deprecated call only when the new one is missing
    assert r2["energy_mj"] is None


def test_errors_are_recorded_not_raised(monkeypatch):
    nv = fake_nvml(energy="lost")
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    p = NvmlProbe(0)
    r1, r2 = p.read(), p.read()
    assert r1["energy_mj"] is None and any("energy" in e for e in r1["errors"])
    assert nv.calls["energy"] == 2  # a transient error is retried next sample
    assert r2["power_w"] == 71.5


def test_no_driver_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml(init_fails=True))
    with pytest.raises(ServiceUnavailableError) as ei:
        NvmlProbe(0)
    assert "NVML is not available" in ei.value.message and ei.value.fix


def _has_nvml() -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
        return True
    except Exception:  # noqa: BLE001 - any failure means no usable NVML
        return False


@pytest.mark.skipif(_has_nvml(), reason="this machine has NVML: the check would run for real")
def test_nvml_check_exits_2_without_a_gpu():
    r = subprocess.run([sys.executable, str(REPO / "benchmarks" / "nvml_check.py")], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert json.loads(r.stdout)["ok"] is False and "needs an NVIDIA GPU" in r.stderr
