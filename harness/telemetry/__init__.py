"""Telemetry: GPU probes, the sampler sidecar and in-process sampler, window aggregation and the HTTP client.

Public names are imported lazily so ``harness`` CLI start-up stays fast.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_EXPORTS = {
    "GpuSample": "harness.telemetry.windows",
    "WindowStats": "harness.telemetry.windows",
    "compute_window": "harness.telemetry.windows",
    "REASON_CODES": "harness.telemetry.windows",
    "NvmlProbe": "harness.telemetry.probes",
    "TwinProbe": "harness.telemetry.probes",
    "make_probe": "harness.telemetry.probes",
    "SamplerCore": "harness.telemetry.sampler",
    "InProcessSampler": "harness.telemetry.sampler",
    "TelemetrySource": "harness.telemetry.client",
    "TelemetryClient": "harness.telemetry.client",
    "ClockOffset": "harness.telemetry.client",
    "measure_clock_offset": "harness.telemetry.client",
    "start_server": "harness.telemetry.server",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'harness.telemetry' has no attribute {name!r}")
