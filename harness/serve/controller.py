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
    model: Mapping[int, Mapping[SpecConfig, tuple[float, float]]] | None = None
    """Optional closed loop: per batch size, each config's (utilization, speed) as measured or predicted. With it the
    pick at a batch size is the fastest config whose utilization plus the learnt bias is inside the band (else the
    closest), the bias being an EMA of observed minus modelled utilization of the active config (traffic with
    gaps draws less than the closed-loop measurement)."""
    bias_alpha: float = 0.1


def model_pick(model: Mapping[SpecConfig, tuple[float, float]], bias: float, band: tuple[float, float],
               alive: frozenset[SpecConfig]) -> SpecConfig | None:
    """The fastest live config whose modelled utilization + ``bias`` is in ``band``, else the one closest to it."""
    rows = [(c, u + bias, v) for c, (u, v) in model.items() if c in alive]
    if not rows:
        return None
    inside = [r for r in rows if band[0] <= r[1] <= band[1]]
    if inside:
        return max(inside, key=lambda r: (r[2], r[0]))[0]
    return min(rows, key=lambda r: (max(band[0] - r[1], r[1] - band[1]), r[0]))[0]


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
    bias: float = 0.0


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


def step(state: ControllerState, obs: Observation, table: Mapping[int, SpecConfig], params: ControllerParams) -> Decision:
    """One control tick (see the module doc)."""
    ema = obs.in_flight if state.ticks == 0 else params.bs_alpha * obs.in_flight + (1 - params.bs_alpha) * state.bs_ema
    table_bs, pick = pick_for(table, ema)
    detail: dict[str, float | int | str | None] = {"bs_ema": round(ema, 3), "in_flight": obs.in_flight,
                                                   "utilization": None if obs.utilization is None else round(obs.utilization, 4),
                                                   "table_bs": table_bs}
    lost = obs.utilization is None
    tel_ticks = 0 if lost else state.telemetry_ticks + 1
    fallback = state.fallback
    reason: Reason | None = None
    if lost and not fallback:
        fallback, reason = True, "telemetry_lost"
    elif fallback and not lost and tel_ticks >= params.restore_ticks:
        fallback, reason = False, "telemetry_restored"
    bias = state.bias
    if params.model is not None:
        pick, bias = _closed_loop(state, obs, params, table_bs, pick)
        detail["bias"] = round(bias, 4)
    base = replace(state, bs_ema=ema, fallback=fallback, telemetry_ticks=tel_ticks, ticks=state.ticks + 1, bias=bias)
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


def _closed_loop(state: ControllerState, obs: Observation, params: ControllerParams, table_bs: int,
                 pick: SpecConfig) -> tuple[SpecConfig, float]:
    """The bias update from this tick's utilization and the model's pick at ``table_bs`` (the table's pick when
    the model has no entry there)."""
    assert params.model is not None
    row = params.model.get(table_bs, {})
    bias = state.bias
    if obs.utilization is not None and state.active is not None and state.active in row and not state.fallback:
        bias += params.bias_alpha * (obs.utilization - row[state.active][0] - bias)
    return model_pick(row, bias, params.band, obs.alive) or pick, bias


def _switched(base: ControllerState, old: SpecConfig | None, new: SpecConfig, reason: Reason, t_s: float,
              detail: dict[str, float | int | str | None]) -> Decision:
    return Decision(replace(base, active=new, candidate=None, candidate_ticks=0, last_switch_s=t_s),
                    Switch(old, new, reason, detail))
