"""The band controller's second actuator, pure: the locked SM clock trims power into the band.

The config (speculation) sets the coarse power level and the speed; the clock trims below it. Only a lock below the
clock the GPU runs at lowers power (a lock cannot raise power above what the config draws unlocked), so the trim
acts above the band and gives clock back below it, up to unlocking. Power follows the clock as u ~ f**exponent
(dynamic power ~ f x V^2, ``exponent`` = the DVFS exponent x the dynamic share of power: 2.2 x ~0.75 on the twin's
laptop profile), so one correction is ``f * (target / u) ** (gain / exponent)``.

No oscillation: the band itself is the dead band (inside it nothing moves), a change waits ``settle_s`` (the
sampler's 1-s power average must see the new clock before it is judged), and one change moves the clock by at most
``max_step`` of it. The enforced power cap is never touched. Lost telemetry unlocks at once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Literal

ClockReason = Literal["above_band", "below_band", "unlock", "telemetry_lost", "restore"]


@dataclass(frozen=True)
class ClockParams:
    """Tuning of the trim (seconds are the caller's device clock)."""

    gain: float = 0.8
    """Share of the modelled correction applied per change (below 1: no overshoot from a model error)."""
    exponent: float = 1.6
    """d ln(utilization) / d ln(clock) under the lock."""
    settle_s: float = 1.1
    """Device seconds after a change before the next: the sampler's 1-s power average, plus a tick."""
    max_step: float = 0.25
    """Largest relative change of the clock in one actuation (a rate limit)."""
    target: float | None = None
    """Utilization a correction aims at (default: the band's middle)."""


@dataclass(frozen=True)
class ClockState:
    """The lock this loop set (None: unlocked) and when it last changed."""

    locked_mhz: int | None = None
    last_change_s: float = -math.inf


@dataclass(frozen=True)
class ClockChange:
    """One actuation: the lock before and after (None: unlocked) and why, with the figures behind it."""

    old_mhz: int | None
    new_mhz: int | None
    reason: ClockReason
    detail: dict[str, float | int | str | None] = field(default_factory=dict)


def nearest_clock(mhz: float, supported: list[int]) -> int:
    """The supported clock nearest to ``mhz`` (``supported``: any order, not empty)."""
    return min(supported, key=lambda s: (abs(s - mhz), s))


def clock_step(
    state: ClockState,
    *,
    t_s: float,
    utilization: float | None,
    running_mhz: float | None,
    clean: bool,
    supported: list[int],
    band: tuple[float, float],
    params: ClockParams = ClockParams(),
    sample_age_s: float = 0.0,
) -> tuple[ClockState, ClockChange | None]:
    """One tick at device time ``t_s``. ``utilization``: the sampler's avg power / enforced cap (None: telemetry lost); ``running_mhz``: the
    SM clock the sample saw (the cap may hold it below the lock); ``clean``: the sample covers a window in which the
    GPU was busy with the routed config alone (idle gaps and drains say nothing about the clock); ``sample_age_s``:
    device seconds since the sample's instant (its window must end ``settle_s`` after the last change)."""
    if not supported:
        raise ValueError("no supported SM clocks to lock")
    detail: dict[str, float | int | str | None] = {
        "utilization": None if utilization is None else round(utilization, 4),
        "running_mhz": running_mhz,
    }
    if utilization is None:
        if state.locked_mhz is None:
            return state, None
        return _changed(state, None, "telemetry_lost", t_s, detail)
    lo, hi = band
    settled = t_s - sample_age_s - state.last_change_s >= params.settle_s
    if not clean or not settled or lo <= utilization <= hi:
        return state, None
    top = max(supported)
    base = float(state.locked_mhz if state.locked_mhz is not None else top)
    if running_mhz is not None and 0 < running_mhz < base:
        base = float(running_mhz)  # the cap (or thermal) holds the clock lower than the lock: trim from there
    if utilization < lo and state.locked_mhz is None:
        return state, None  # unlocked and below the band: a lock cannot add power (the config must)
    target = params.target if params.target is not None else (lo + hi) / 2
    ratio = (target / max(utilization, 1e-6)) ** (params.gain / params.exponent)
    ratio = min(1 + params.max_step, max(1 - params.max_step, ratio))
    want = base * ratio
    detail.update(target=round(target, 4), want_mhz=round(want, 1))
    if utilization < lo and want >= top:
        return _changed(state, None, "unlock", t_s, detail)
    new = nearest_clock(want, supported)
    if new == state.locked_mhz:
        return state, None
    return _changed(state, new, "above_band" if utilization > hi else "below_band", t_s, detail)


def _changed(
    state: ClockState,
    new: int | None,
    reason: ClockReason,
    t_s: float,
    detail: dict[str, float | int | str | None],
) -> tuple[ClockState, ClockChange]:
    return replace(state, locked_mhz=new, last_change_s=t_s), ClockChange(state.locked_mhz, new, reason, detail)
