"""The one mapping from what the sampler saw to a row's measurement fields.

Input: the sampler's window over the measured interval, a sample taken before it and one taken after it (the
``TelemetrySource`` models, never dicts). Output: a ``Measurement``, the GPU, window and pre-state fields of a
``harness.runs.rows.SweepRow``. The sweep (``harness.sweep.runner.SweepRunner._row``) and both agentic pilots
(``pilots.trial.trial_row``) build their rows' measurement fields here, so a field means the same thing in both.

Where the GPU columns come from (``gpu_from``):

- ``after`` (grid cells, SWE-bench): temperature, power, utilization, memory and the clock-event mask of the sample
  after the window; ``gpu_temp_c_before`` from the sample before it;
- ``window`` (Terminal-Bench, whose trials Harbor times): averages over the window (temperature, utilization, the
  caller's average power) and the OR of its clock-event masks; no before-temperature and no memory column.

``gpu_throttling`` keeps the published meaning (any clock-event bit, idle included) and
``gpu_throttling_power_thermal`` the corrected one (``harness.runs.rows.throttling_flags``).
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, Field

from harness.runs.rows import throttling_flags
from harness.telemetry.windows import GpuSample, WindowStats

GpuFrom = Literal["after", "window"]


class Measurement(BaseModel):
    """The measurement fields of a row (names as in ``SweepRow``)."""

    gpu_temp_c_before: float | None = None
    gpu_temp_c: float | None = None
    gpu_power_w: float | None = None
    gpu_util_pct: float | None = None
    gpu_mem_used_mb: float | None = None
    gpu_throttling: bool | None = None
    gpu_throttling_power_thermal: bool | None = None
    clock_event_reasons: int | None = None
    window_duration_s: float | None = None
    window_wall_duration_s: float | None = None
    window_valid: bool | None = None
    window_reasons: list[str] = Field(default_factory=list)
    window_sample_count: int | None = None
    window_coverage: float | None = None
    window_avg_util_pct: float | None = None
    window_max_temp_c: float | None = None
    window_max_power_w: float | None = None
    window_clock_event_reasons_or: int | None = None
    energy_source: str | None = None
    pre_gpu_temp_c: float | None = None
    pre_gpu_mem_used_mb: float | None = None
    pre_gpu_util_pct: float | None = None
    pre_gpu_power_w: float | None = None
    gpu_name: str | None = None
    gpu_uuid: str | None = None


def finite(x: float | int | None) -> float | None:
    """``x`` as a float, or None when it is missing, NaN or infinite (never a measurement)."""
    if x is None:
        return None
    f = float(x)
    return f if math.isfinite(f) else None


def measurement(
    window: WindowStats | None,
    before: GpuSample | None,
    after: GpuSample | None,
    *,
    gpu_from: GpuFrom = "after",
    window_power_w: float | None = None,
) -> Measurement:
    """The row fields of one measured interval (see the module doc); ``window_power_w`` is the average power the
    caller derived from the window (its energy over its device-clock duration), used when ``gpu_from="window"``."""
    w = window
    if gpu_from == "after":
        mask = after.clock_event_reasons if after is not None else None
        gpu = dict(
            gpu_temp_c_before=finite(before.temperature_c) if before is not None else None,
            gpu_temp_c=finite(after.temperature_c) if after is not None else None,
            gpu_power_w=finite(after.power_w) if after is not None else None,
            gpu_util_pct=finite(after.utilization_pct) if after is not None else None,
            gpu_mem_used_mb=finite(after.memory_used_mb) if after is not None else None,
        )
    else:
        mask = w.clock_event_reasons_or if w is not None else None
        gpu = dict(
            gpu_temp_c=finite(w.avg_temp_c) if w is not None else None,
            gpu_power_w=finite(window_power_w),
            gpu_util_pct=finite(w.avg_util_pct) if w is not None else None,
        )
    published_throttle, power_thermal = throttling_flags(mask)
    return Measurement(
        **gpu,
        gpu_throttling=published_throttle,
        gpu_throttling_power_thermal=power_thermal,
        clock_event_reasons=mask,
        **(_window_fields(w) if w is not None else {}),
        pre_gpu_temp_c=finite(before.temperature_c) if before is not None else None,
        pre_gpu_mem_used_mb=finite(before.memory_used_mb) if before is not None else None,
        pre_gpu_util_pct=finite(before.utilization_pct) if before is not None else None,
        pre_gpu_power_w=finite(before.power_w) if before is not None else None,
        gpu_name=(w.gpu_name if w is not None else None) or (after.name if after is not None else None),
        gpu_uuid=(w.gpu_uuid if w is not None else None) or (after.uuid if after is not None else None),
    )


def _window_fields(w: WindowStats) -> dict[str, object]:
    return dict(
        window_duration_s=finite(w.duration_s),
        window_wall_duration_s=finite(w.wall_duration_s),
        window_valid=w.valid,
        window_reasons=[str(r) for r in w.reasons],
        window_sample_count=w.sample_count,
        window_coverage=finite(w.coverage),
        window_avg_util_pct=finite(w.avg_util_pct),
        window_max_temp_c=finite(w.max_temp_c),
        window_max_power_w=finite(w.max_power_w),
        window_clock_event_reasons_or=w.clock_event_reasons_or,
        energy_source=w.energy_method,
    )
