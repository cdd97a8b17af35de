"""The pilots' side of telemetry: measure a call inside a sampler window, read a window timed by someone else
(Harbor), turn a sample into the published ``gpu_metrics_*`` fields. Typed against ``TelemetrySource``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from harness.core.clocks import ScaledClock, mono_ns, to_iso, wall_ns
from harness.runs.measurement import finite
from harness.runs.rows import throttling_flags
from harness.telemetry.client import TelemetrySource
from harness.telemetry.windows import GpuSample, WindowStats

WINDOW_WAIT_S = 2.0
"""How long a pilot waits for the sampler's first sample after a window's end."""


def throttling(mask: int | None) -> bool | None:
    """True when a power or thermal clock-event bit is set (the idle bit is ignored); None when unknown."""
    return throttling_flags(mask)[1]


def gpu_metrics(sample: GpuSample | None) -> dict[str, Any] | None:
    """A sample in the published ``gpu_metrics_before/after`` field names (plus the raw mask)."""
    if sample is None:
        return None
    mask = sample.clock_event_reasons
    return {
        "gpu_temperature_celsius": sample.temperature_c,
        "gpu_power_watts": sample.power_w,
        "gpu_utilization_percent": sample.utilization_pct,
        "gpu_memory_used_mb": sample.memory_used_mb,
        "gpu_memory_total_mb": sample.memory_total_mb,
        "gpu_throttling_active": throttling(mask),
        "gpu_throttling_reference": None if mask is None else int(mask) != 0,
        "clock_event_reasons": mask,
        "gpu_sm_clock_mhz": sample.sm_clock_mhz,
        "gpu_memory_clock_mhz": sample.mem_clock_mhz,
        "timestamp": to_iso(int(sample.t_wall_ns)) if sample.t_wall_ns else None,
    }


@dataclass
class Measured:
    """One measured call: wall-ns window edges, scaled-clock elapsed seconds, the samples around it, the window."""

    value: Any
    start_ns: int
    end_ns: int
    elapsed_s: float
    before: GpuSample | None
    after: GpuSample | None
    window: WindowStats
    error: BaseException | None = None


def measure(telemetry: TelemetrySource, clock: ScaledClock, fn: Callable[[], Any]) -> Measured:
    """Snapshot, run ``fn`` strictly inside a [start, end] window, snapshot, then ask the sampler for the window.

    Exceptions of ``fn`` are caught and returned in ``Measured.error`` so the window is still recorded.
    """
    before = telemetry.snapshot()
    start_wall, start_mono = wall_ns(), mono_ns()
    value, err = None, None
    try:
        value = fn()
    except Exception as exc:  # noqa: BLE001 - recorded, not swallowed: the caller writes it into the trial
        err = exc
    end_mono, end_wall = mono_ns(), wall_ns()
    after = telemetry.snapshot()
    window = window_for(telemetry, start_wall, end_wall)
    return Measured(value, start_wall, end_wall, clock.elapsed_s(start_mono, end_mono), before, after, window, err)


def window_for(telemetry: TelemetrySource, start_ns: int, end_ns: int) -> WindowStats:
    """The sampler's window over a wall-ns interval (also for trials timed by someone else, e.g. Harbor), after
    waiting up to ``WINDOW_WAIT_S`` for a sample past its end."""
    return telemetry.window(int(start_ns), int(end_ns), wait_s=WINDOW_WAIT_S)


def energy_from_window(window: WindowStats | None) -> tuple[float | None, float | None]:
    """(energy J, average W) from a sampler window: W = J / device-clock duration; an invalid window gives None."""
    if window is None or not window.valid:
        return None, None
    energy = finite(window.energy_j)
    if energy is None:
        return None, None
    dur = finite(window.duration_s)
    return energy, energy / dur if dur else finite(window.avg_power_w)
