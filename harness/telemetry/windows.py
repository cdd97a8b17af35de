"""Samples, window statistics and the one aggregation function shared by the sidecar and the in-process sampler.

Window algorithm (all edges are wall ns):

- *Bracketing*: the usable sample at or just before ``start_ns`` and the one at or just after ``end_ns`` must exist.
- *Energy*: the energy counter is read at each edge from the two usable samples around it (linear interpolation,
  refined by a one-step power model when the instant powers at those samples differ, see ``_counter_at``), and the
  window energy is the difference; samples inside the window only matter for validity. Power is integrated
  (trapezoid on the device clock, clipped at the edges by interpolation) only when the counter is absent.
- *Duration*: ``device_ns`` interpolated at the edges the same way (the twin's scaled clock; wall for NVML).
- *Validity*: every problem adds a machine-readable code to ``reasons``; a window is valid when there is none.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from typing import Any, Iterable, Literal, Sequence

from pydantic import BaseModel, ConfigDict, Field

from harness.gpu import clock_events
from harness.telemetry.fields import (
    STATE_FIELDS as STATE_FIELDS,  # re-exported (the fields live in a pydantic-free module)
)

SCHEMA_VERSION = 1

# Validity reason codes (stable, machine-readable).
NO_SAMPLE_BEFORE = "no_sample_before"
NO_SAMPLE_AFTER = "no_sample_after"
GAP_OVER_3_PERIODS = "gap_over_3_periods"
SAMPLER_RESTART = "sampler_restart"
COUNTER_RESET = "counter_reset"
UUID_CHANGE = "uuid_change"
COVERAGE_BELOW_95PCT = "coverage_below_95pct"
CLOCK_DISAGREEMENT = "clock_disagreement"
SAMPLER_UNREACHABLE = "sampler_unreachable"
PROBE_ERRORS = "probe_errors"
SLOW_PROBE = "slow_probe"
NO_ENERGY = "no_energy"
BAD_WINDOW = "bad_window"
OUTSIDE_RETENTION = "outside_retention"

REASON_CODES = (
    NO_SAMPLE_BEFORE,
    NO_SAMPLE_AFTER,
    GAP_OVER_3_PERIODS,
    SAMPLER_RESTART,
    COUNTER_RESET,
    UUID_CHANGE,
    COVERAGE_BELOW_95PCT,
    CLOCK_DISAGREEMENT,
    SAMPLER_UNREACHABLE,
    PROBE_ERRORS,
    SLOW_PROBE,
    NO_ENERGY,
    BAD_WINDOW,
    OUTSIDE_RETENTION,
)

MAX_GAP_PERIODS = 3.0
MIN_COVERAGE = 0.95
CLOCK_TOLERANCE_NS = 20_000_000  # |d wall - d mono| above max(20 ms, 0.1 %) between two samples = a clock step
CLOCK_TOLERANCE_REL = 1e-3


class GpuSample(BaseModel):
    """One record of the sample log: a probe reading (``kind="sample"``) or a ``start``/``gap`` marker."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    kind: Literal["sample", "gap", "start"] = "sample"
    schema_version: int = Field(SCHEMA_VERSION, alias="schema")
    run_id: str
    seq: int
    t_wall_ns: int
    t_mono_ns: int
    device_ns: int | None = None
    name: str | None = None
    uuid: str | None = None
    driver_version: str | None = None
    energy_mj: float | None = None
    power_w: float | None = None
    power_avg_w: float | None = None
    temperature_c: float | None = None
    sm_clock_mhz: float | None = None
    mem_clock_mhz: float | None = None
    utilization_pct: float | None = None
    memory_total_mb: float | None = None
    memory_reserved_mb: float | None = None
    memory_used_mb: float | None = None
    memory_free_mb: float | None = None
    power_limit_w: float | None = None
    power_management_limit_w: float | None = None
    clock_event_reasons: int | None = None
    probe_latency_ms: float | None = None
    stamp: Literal["call", "device"] = "call"
    """Who dated the reading: ``call`` (the probe call's midpoint, as for NVML: a slow call blurs the instant) or
    ``device`` (the device says which instant the reading is of, exactly: the twin GPU's history)."""
    errors: list[str] = Field(default_factory=list)
    detail: dict[str, Any] | None = None
    """Only on ``start`` (probe, rate, pid) and ``gap`` (previous run id and seq, gap edges) records."""

    def to_record(self) -> dict[str, Any]:
        """The JSON object written to the log and served over HTTP (``schema`` key, nulls kept)."""
        return self.model_dump(by_alias=True)

    @property
    def usable(self) -> bool:
        """A sample that carries a reading (an energy counter or a power value)."""
        return self.kind == "sample" and (self.energy_mj is not None or self.power_w is not None)


class WindowStats(BaseModel):
    """What the device did between two wall-clock instants, with a validity verdict."""

    start_ns: int
    end_ns: int
    duration_s: float | None = None
    wall_duration_s: float
    energy_j: float | None = None
    energy_method: Literal["counter", "power_integration"] | None = None
    avg_power_w: float | None = None
    max_power_w: float | None = None
    avg_temp_c: float | None = None
    max_temp_c: float | None = None
    avg_util_pct: float | None = None
    max_mem_used_mb: float | None = None
    power_capped: bool | None = None
    thermal: bool | None = None
    clock_event_reasons_or: int | None = None
    sample_count: int = 0
    coverage: float = 0.0
    valid: bool = False
    reasons: list[str] = Field(default_factory=list)
    gpu_uuid: str | None = None
    gpu_name: str | None = None
    max_gap_s: float | None = None
    edge_model: str | None = None

    @classmethod
    def invalid(cls, start_ns: int, end_ns: int, reason: str) -> "WindowStats":
        """A window that could not be measured at all: energy None (never 0 J)."""
        return cls(start_ns=start_ns, end_ns=end_ns, wall_duration_s=(end_ns - start_ns) / 1e9, reasons=[reason])


SAMPLE_AT_LOOKBACK = 64
"""How many of the sampler's most recent records ``TelemetrySource.sample_at`` looks through."""


def sample_near(records: Sequence[GpuSample], t_ns: int) -> GpuSample | None:
    """The newest usable record taken at or before ``t_ns`` (the nearest one when none is that old); None when no
    record is usable. What ``TelemetrySource.sample_at`` answers from the sampler's recent records."""
    usable = [r for r in records if r.usable]
    if not usable:
        return None
    before = [r for r in usable if r.t_wall_ns <= t_ns]
    if before:
        return max(before, key=lambda r: r.t_wall_ns)
    return min(usable, key=lambda r: abs(r.t_wall_ns - t_ns))


def _interp(x0: float, y0: float, x1: float, y1: float, x: float) -> float:
    if x1 == x0:
        return y1 if x >= x1 else y0
    return y0 + (y1 - y0) * (x - x0) / (x1 - x0)


def _edge_value(pts: Sequence[tuple[int, float]], t: int) -> float | None:
    """Linear interpolation at ``t`` from the point at or just before and the point at or just after it."""
    if not pts:
        return None
    xs = [p[0] for p in pts]
    i = bisect_right(xs, t) - 1  # last point <= t
    if i < 0:
        return None
    if xs[i] == t:
        return pts[i][1]
    if i + 1 >= len(pts):
        return None
    (x0, y0), (x1, y1) = pts[i], pts[i + 1]
    return _interp(x0, y0, x1, y1, t)


EDGE_MODELS = ("step", "linear")
STEP_MIN_DIFF_W = 0.5
STEP_MIN_DIFF_REL = 0.05


def _counter_at(pts: Sequence[tuple[int, float, float | None, float]], t: int, model: str) -> float | None:
    """Energy counter (J) at wall ``t`` from the counter samples around it: (wall ns, energy J, power W, device ns).

    ``linear``: straight line between the two counter readings. ``step``: when the instant powers at both ends
    differ, assume the power stepped once between them (from P_a to P_b) at the instant that makes the model match
    the counter delta exactly, and read the counter from that piecewise-linear curve; this is exact for a load that
    starts or stops between two samples (the usual case at a window edge) and falls back to linear when the powers
    agree or the counter delta is not between the two powers' extremes.
    """
    xs = [p[0] for p in pts]
    i = bisect_right(xs, t) - 1
    if i < 0:
        return None
    if xs[i] == t:
        return pts[i][1]
    if i + 1 >= len(pts):
        return None
    (wa, ea, pa, da), (wb, eb, pb, db) = pts[i], pts[i + 1]
    linear = _interp(wa, ea, wb, eb, t)
    if model != "step" or pa is None or pb is None:
        return linear
    if abs(pa - pb) < max(STEP_MIN_DIFF_W, STEP_MIN_DIFF_REL * max(abs(pa), abs(pb))):
        return linear
    span = (db - da) / 1e9
    if span <= 0:
        return linear
    x = (eb - ea - pb * span) / (pa - pb)  # seconds after a at which the power stepped
    if not 0.0 <= x <= span:
        return linear
    u = (_interp(wa, da, wb, db, t) - da) / 1e9
    return ea + pa * u if u <= x else eb - pb * (span - u)


def _integrate_power(samples: Sequence[GpuSample], start_ns: int, end_ns: int) -> float | None:
    """Trapezoid of instant power over device time, clipped at the window edges (J)."""
    pts = [
        (s.t_wall_ns, s.power_w, s.device_ns if s.device_ns is not None else s.t_wall_ns)
        for s in samples
        if s.power_w is not None
    ]
    if len(pts) < 2 or pts[0][0] > start_ns or pts[-1][0] < end_ns:
        return None
    total = 0.0
    for (w0, p0, d0), (w1, p1, d1) in zip(pts, pts[1:]):
        lo, hi = max(w0, start_ns), min(w1, end_ns)
        if hi <= lo:
            continue
        pl, ph = _interp(w0, p0, w1, p1, lo), _interp(w0, p0, w1, p1, hi)
        dl, dh = _interp(w0, d0, w1, d1, lo), _interp(w0, d0, w1, d1, hi)
        total += 0.5 * (pl + ph) * (dh - dl) / 1e9
    return total


def _mean(xs: Iterable[float | None]) -> float | None:
    vals = [x for x in xs if x is not None]
    return sum(vals) / len(vals) if vals else None


def _max(xs: Iterable[float | None]) -> float | None:
    vals = [x for x in xs if x is not None]
    return max(vals) if vals else None


def compute_window(
    samples: Sequence[GpuSample],
    start_ns: int,
    end_ns: int,
    period_s: float,
    *,
    restarts_ns: Sequence[int] = (),
    edge_model: str = "step",
) -> WindowStats:
    """Aggregate ``samples`` (sorted by ``t_wall_ns``; sample records only) over ``[start_ns, end_ns]``.

    ``period_s`` is the sampler's period (for coverage and the gap rule); ``restarts_ns`` are the wall times of
    the log's ``gap`` records (a sampler restart inside the bracket invalidates the window). ``edge_model`` is how
    the counter is read between the two samples around an edge (``step`` or ``linear``, see ``_counter_at``).
    """
    if end_ns <= start_ns:
        return WindowStats.invalid(start_ns, end_ns, BAD_WINDOW)
    wall_s = (end_ns - start_ns) / 1e9
    usable = [s for s in samples if s.usable]
    walls = [s.t_wall_ns for s in usable]
    i_before = bisect_right(walls, start_ns) - 1
    i_after = bisect_left(walls, end_ns)
    reasons: list[str] = []
    if i_before < 0:
        reasons.append(NO_SAMPLE_BEFORE)
    if i_after >= len(usable):
        reasons.append(NO_SAMPLE_AFTER)
    lo = max(i_before, 0)
    hi = min(i_after, len(usable) - 1)
    bracket = usable[lo : hi + 1]
    inside = [s for s in bracket if start_ns < s.t_wall_ns < end_ns]
    stats_src = inside or bracket

    # Validity checks over the bracket (the samples that decide the numbers).
    max_gap_ns = 0
    clock_bad = False
    for a, b in zip(bracket, bracket[1:]):
        dw, dm = b.t_wall_ns - a.t_wall_ns, b.t_mono_ns - a.t_mono_ns
        max_gap_ns = max(max_gap_ns, dw, dm)
        if abs(dw - dm) > max(CLOCK_TOLERANCE_NS, CLOCK_TOLERANCE_REL * abs(dm)):
            clock_bad = True
    period_ns = period_s * 1e9
    if bracket and max_gap_ns > MAX_GAP_PERIODS * period_ns:
        reasons.append(GAP_OVER_3_PERIODS)
    if bracket and any(bracket[0].t_wall_ns < r <= bracket[-1].t_wall_ns for r in restarts_ns):
        reasons.append(SAMPLER_RESTART)
    uuids = {s.uuid for s in bracket if s.uuid is not None}
    if len(uuids) > 1:
        reasons.append(UUID_CHANGE)
    # Counter points: normally the bracket's; when an edge sample lost its counter read (power only), the nearest
    # counter reading beyond it is used instead (the failed read is flagged as probe_errors anyway).
    all_counter = [(s.t_wall_ns, s.energy_mj / 1e3, s.power_w, float(s.device_ns if s.device_ns is not None else s.t_wall_ns))
                   for s in samples if s.kind == "sample" and s.energy_mj is not None]  # fmt: skip
    cw = [c[0] for c in all_counter]
    j0, j1 = bisect_right(cw, start_ns) - 1, bisect_left(cw, end_ns)
    if bracket and j0 >= 0 and j1 < len(all_counter):
        counter = all_counter[
            min(j0, bisect_left(cw, bracket[0].t_wall_ns)) : max(j1, bisect_right(cw, bracket[-1].t_wall_ns) - 1) + 1
        ]
    else:
        counter = [c for c in all_counter if bracket and bracket[0].t_wall_ns <= c[0] <= bracket[-1].t_wall_ns]
    if any(b[1] < a[1] for a, b in zip(counter, counter[1:])):
        reasons.append(COUNTER_RESET)
    if clock_bad:
        reasons.append(CLOCK_DISAGREEMENT)
    # Errors and slow calls on any record between the bracketing samples (failed reads are not "usable").
    t0 = min(start_ns, bracket[0].t_wall_ns) if bracket else start_ns
    t1 = max(end_ns, bracket[-1].t_wall_ns) if bracket else end_ns
    span = [s for s in samples if t0 <= s.t_wall_ns <= t1 and s.kind == "sample"]
    if any(s.errors for s in span):
        reasons.append(PROBE_ERRORS)
    if any(s.stamp == "call" and s.probe_latency_ms is not None and s.probe_latency_ms > period_s * 1e3 for s in span):
        reasons.append(SLOW_PROBE)
    coverage = (
        min(1.0, (len(inside) + 1) * period_s / wall_s)
        if NO_SAMPLE_BEFORE not in reasons and NO_SAMPLE_AFTER not in reasons
        else 0.0
    )
    if coverage < MIN_COVERAGE and NO_SAMPLE_BEFORE not in reasons and NO_SAMPLE_AFTER not in reasons:
        reasons.append(COVERAGE_BELOW_95PCT)

    # Device-clock duration and energy.
    bracketed = NO_SAMPLE_BEFORE not in reasons and NO_SAMPLE_AFTER not in reasons
    duration_s: float | None = None
    energy_j: float | None = None
    method: str | None = None
    if bracketed:
        dev = [(s.t_wall_ns, float(s.device_ns if s.device_ns is not None else s.t_wall_ns)) for s in bracket]
        d0, d1 = _edge_value(dev, start_ns), _edge_value(dev, end_ns)
        if d0 is not None and d1 is not None:
            duration_s = (d1 - d0) / 1e9
        comparable = UUID_CHANGE not in reasons and COUNTER_RESET not in reasons
        has_counter = counter and counter[0][0] <= start_ns and counter[-1][0] >= end_ns
        if comparable and has_counter:
            e0, e1 = _counter_at(counter, start_ns, edge_model), _counter_at(counter, end_ns, edge_model)
            if e0 is not None and e1 is not None:
                energy_j, method = e1 - e0, "counter"
        elif comparable and not counter:
            integ = _integrate_power(bracket, start_ns, end_ns)
            if integ is not None:
                energy_j, method = integ, "power_integration"
        if energy_j is None:
            reasons.append(NO_ENERGY)

    masks = [s.clock_event_reasons for s in stats_src if s.clock_event_reasons is not None]
    mask_or: int | None = None
    if masks:
        mask_or = 0
        for m in masks:
            mask_or |= int(m)
    avg_power = energy_j / duration_s if energy_j is not None and duration_s else None
    if avg_power is None:
        avg_power = _mean(s.power_w for s in stats_src)
    last = bracket[-1] if bracket else (usable[-1] if usable else None)
    return WindowStats(
        start_ns=start_ns,
        end_ns=end_ns,
        duration_s=duration_s,
        wall_duration_s=wall_s,
        energy_j=energy_j,
        energy_method=method,
        avg_power_w=avg_power,
        max_power_w=_max(s.power_w for s in stats_src),
        avg_temp_c=_mean(s.temperature_c for s in stats_src),
        max_temp_c=_max(s.temperature_c for s in stats_src),
        avg_util_pct=_mean(s.utilization_pct for s in stats_src),
        max_mem_used_mb=_max(s.memory_used_mb for s in stats_src),
        power_capped=bool(mask_or & clock_events.POWER_MASK) if mask_or is not None else None,
        thermal=bool(mask_or & clock_events.THERMAL_MASK) if mask_or is not None else None,
        clock_event_reasons_or=mask_or,
        sample_count=len(inside),
        coverage=round(coverage, 6),
        valid=not reasons,
        reasons=reasons,
        gpu_uuid=last.uuid if last else None,
        gpu_name=last.name if last else None,
        max_gap_s=max_gap_ns / 1e9 if bracket else None,
        edge_model=edge_model if method == "counter" else None,
    )
