"""The band controller's decision logic, pure: (state, observation, pick table, params) -> decision.

No clock, no I/O: ``step`` is called once per control tick with what the front observed (in-flight requests, the
sampler's utilization or None when telemetry is lost, which instances are alive) and returns the next state and,
when the routed config changes, a ``Switch`` with its reason. Hysteresis: the batch size is smoothed (EMA), and a
new pick must hold for ``dwell_ticks`` consecutive ticks and ``min_hold_s`` after the last switch before it is
applied. Safety: lost telemetry or a dead active instance switch at once (no dwell) to ``fallback`` (no_spec) when it
is alive, else to any live instance.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Literal, Mapping

from harness.grid import BASELINE, SpecConfig
from harness.serve.band_feedback import LoopParams, LoopState, closed_loop_step
from harness.serve.utilization_model import UtilModel

Reason = Literal["start", "load_change", "telemetry_lost", "telemetry_restored", "instance_lost", "accept_length"]


@dataclass(frozen=True)
class ControllerParams:
    """Tuning of the loop (defaults suit a 0.1 s tick on the twin at time scale 20 and a GPU at scale 1 alike)."""

    band: tuple[float, float] = (0.95, 0.98)
    bs_alpha: float = 0.3
    """EMA weight of the newest in-flight count."""
    dwell_ticks: int = 5
    """Consecutive ticks a new pick must hold before it is applied."""
    min_hold_s: float = 0.5
    """Seconds (of the caller's clock) after a switch before the next load-driven switch."""
    restore_ticks: int = 5
    """Consecutive ticks with telemetry before leaving the fallback."""
    fallback: SpecConfig = BASELINE
    model: UtilModel | None = None
    """Optional closed loop (``closed_loop.py``): per batch size, each config's (utilization, tokens/s) measured
    closed-loop; with it the pick is the fastest config whose predicted utilization (the model at the batch size
    that config would run at, plus the integrated model error) is inside the band, else the closest."""
    loop: LoopParams = field(default_factory=LoopParams)
    power_telemetry: bool = True
    """False where the host has no power reading at all (a CPU engine without RAPL): the band cannot be measured,
    so picks follow the table by batch size (open loop) instead of falling back as if telemetry were lost."""


@dataclass(frozen=True)
class Observation:
    """One tick: ``t_s`` (monotonic seconds), ``in_flight`` requests, ``utilization`` (avg power / enforced cap;
    None = telemetry lost or stale), the configs whose instances are alive, and the mean accept length of the
    requests that finished since the last tick (None when none did or the engine does not report it)."""

    t_s: float
    in_flight: int
    utilization: float | None
    alive: frozenset[SpecConfig]
    accept_length: float | None = None
    clean_s: float | None = None
    """Seconds (caller's clock) the GPU has been busy with requests of the routed instance only: the utilization
    sample speaks for the routed config once this covers its averaging window. None: unknown (the closed loop then
    trusts a sample while requests are in flight)."""
    arrivals: int = 0
    """Requests that arrived since the last tick."""
    tokens: float | None = None
    """Mean completion tokens of the requests that finished since the last tick (None when none did)."""
    clock_locked: bool = False
    """The SM clock trim holds a lock: the measured utilization is below the routed config's own (unlocked) level."""
    clock_active: bool = False
    """The SM clock trim is on and working (off, refused or absent: the config alone must reach the band)."""


@dataclass(frozen=True)
class ControllerState:
    """What the controller remembers between ticks."""

    active: SpecConfig | None = None
    bs_ema: float = 1.0
    candidate: SpecConfig | None = None
    candidate_ticks: int = 0
    last_switch_s: float = -math.inf
    fallback: bool = False
    telemetry_ticks: int = 0
    ticks: int = 0
    loop: LoopState = field(default_factory=LoopState)


@dataclass(frozen=True)
class Switch:
    """A change of the routed config and why (``detail`` carries the figures behind the reason)."""

    old: SpecConfig | None
    new: SpecConfig
    reason: Reason
    detail: dict[str, float | int | str | None] = field(default_factory=dict)


@dataclass(frozen=True)
class Decision:
    state: ControllerState
    switch: Switch | None = None


def pick_for(table: Mapping[int, SpecConfig], batch_size: float) -> tuple[int, SpecConfig]:
    """The table's entry nearest to ``batch_size`` on a log scale (ties go to the smaller batch size)."""
    if not table:
        raise ValueError("empty pick table")
    x = math.log(max(batch_size, 1.0))
    bs = min(sorted(table), key=lambda b: abs(math.log(b) - x))
    return bs, table[bs]


def _route_target(wanted: SpecConfig, alive: frozenset[SpecConfig], fallback: SpecConfig) -> SpecConfig | None:
    if wanted in alive:
        return wanted
    if fallback in alive:
        return fallback
    return min(alive) if alive else None


def step(
    state: ControllerState, obs: Observation, table: Mapping[int, SpecConfig], params: ControllerParams
) -> Decision:
    """One control tick (see the module doc)."""
    ema = obs.in_flight if state.ticks == 0 else params.bs_alpha * obs.in_flight + (1 - params.bs_alpha) * state.bs_ema
    table_bs, pick = pick_for(table, ema)
    detail: dict[str, float | int | str | None] = {
        "bs_ema": round(ema, 3),
        "in_flight": obs.in_flight,
        "utilization": None if obs.utilization is None else round(obs.utilization, 4),
        "table_bs": table_bs,
    }
    lost = obs.utilization is None and params.power_telemetry
    tel_ticks = 0 if lost else state.telemetry_ticks + 1
    fallback = state.fallback
    reason: Reason | None = None
    if lost and not fallback:
        fallback, reason = True, "telemetry_lost"
    elif fallback and not lost and tel_ticks >= params.restore_ticks:
        fallback, reason = False, "telemetry_restored"
    loop = state.loop
    if params.model is not None:
        routed = state.active if not (state.fallback or fallback) and state.active in obs.alive else None
        got, loop = closed_loop_step(loop, obs, params.model, params.loop, params.band, routed)
        pick = got or pick
        detail.update(loop.detail())
    base = replace(state, bs_ema=ema, fallback=fallback, telemetry_ticks=tel_ticks, ticks=state.ticks + 1, loop=loop)
    wanted = params.fallback if fallback else pick
    target = _route_target(wanted, obs.alive, params.fallback)
    if target is None:
        return Decision(replace(base, active=None, candidate=None, candidate_ticks=0))
    if state.active is None or state.active not in obs.alive:
        why: Reason = reason or ("start" if state.active is None else "instance_lost")
        return _switched(base, state.active, target, why, obs.t_s, detail)
    if reason is not None:  # entering or leaving the fallback: no dwell
        if target == state.active:
            return Decision(replace(base, candidate=None, candidate_ticks=0))
        return _switched(base, state.active, target, reason, obs.t_s, detail)
    if target == state.active:
        return Decision(replace(base, candidate=None, candidate_ticks=0))
    ticks = base.candidate_ticks + 1 if base.candidate == target else 1
    held = obs.t_s - state.last_switch_s >= params.min_hold_s
    if ticks >= params.dwell_ticks and held:
        return _switched(base, state.active, target, "load_change", obs.t_s, detail)
    return Decision(replace(base, candidate=target, candidate_ticks=ticks))


def _switched(
    base: ControllerState,
    old: SpecConfig | None,
    new: SpecConfig,
    reason: Reason,
    t_s: float,
    detail: dict[str, float | int | str | None],
) -> Decision:
    return Decision(
        replace(base, active=new, candidate=None, candidate_ticks=0, last_switch_s=t_s),
        Switch(old, new, reason, detail),
    )
