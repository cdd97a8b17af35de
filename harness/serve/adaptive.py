"""An emulation of sglang's ``--speculative-adaptive`` (>= 0.5.12, EAGLE/EAGLE3 with topk 1), pure like the band
controller: it picks ``num_steps`` from the candidate tiers of the batch-size bucket with an EMA of the accept
length and hysteresis, and knows nothing of power. sglang does this inside one server; here each tier is an
instance (``(s, 1, s + 1)``, steps 0 = no_spec) and the front routes to the tier's instance.

The tiers are sglang's defaults (``srt/speculative/adaptive_spec_params.py``: bs 1 [1,3,5,7], bs 8 [0,1,3], bs 32
[0,1], bs 64 [0]; the bucket is the largest key <= the batch size). The move rule is this emulation's own (sglang's
code is not copied): up a tier when the drafts are mostly accepted, ``accept - 1 >= up_frac * steps``; down when
they mostly are not, ``accept - 1 <= down_frac * steps``; a move must hold ``dwell_ticks`` observations.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Mapping

from harness.grid import BASELINE, SpecConfig
from harness.serve.controller import Observation, Switch

DEFAULT_TIERS: Mapping[int, tuple[int, ...]] = {1: (1, 3, 5, 7), 8: (0, 1, 3), 32: (0, 1), 64: (0,)}


def tier_config(steps: int) -> SpecConfig:
    """The instance config of a tier: no_spec at 0 steps, else EAGLE with topk 1 (sglang's rewrite: d = s + 1)."""
    return BASELINE if steps == 0 else SpecConfig(steps, 1, steps + 1)


@dataclass(frozen=True)
class AdaptiveParams:
    tiers: Mapping[int, tuple[int, ...]] = field(default_factory=lambda: dict(DEFAULT_TIERS))
    alpha: float = 0.2
    up_frac: float = 0.6
    down_frac: float = 0.3
    dwell_ticks: int = 5
    bs_alpha: float = 0.3


@dataclass(frozen=True)
class AdaptiveState:
    active: SpecConfig | None = None
    accept_ema: float | None = None
    bs_ema: float = 1.0
    candidate: SpecConfig | None = None
    candidate_ticks: int = 0
    ticks: int = 0


@dataclass(frozen=True)
class Decision:
    state: AdaptiveState
    switch: Switch | None = None


def bucket_tiers(tiers: Mapping[int, tuple[int, ...]], batch_size: float) -> tuple[int, ...]:
    keys = sorted(tiers)
    return tiers[max([k for k in keys if k <= max(batch_size, 1.0)], default=keys[0])]


def _wanted(state: AdaptiveState, tiers: tuple[int, ...], p: AdaptiveParams) -> int:
    steps = state.active.steps if state.active is not None else tiers[0]
    if steps not in tiers:  # a new bucket: the nearest of its tiers
        return min(tiers, key=lambda s: (abs(s - steps), s))
    i = tiers.index(steps)
    if state.accept_ema is None or steps == 0:
        return steps
    gain = state.accept_ema - 1.0
    if gain >= p.up_frac * steps and i + 1 < len(tiers):
        return tiers[i + 1]
    if gain <= p.down_frac * steps and i > 0:
        return tiers[i - 1]
    return steps


def step(state: AdaptiveState, obs: Observation, p: AdaptiveParams) -> Decision:
    """One tick of the emulation (``obs.utilization`` is ignored: sglang's adaptive mode does not see power)."""
    bs = obs.in_flight if state.ticks == 0 else p.bs_alpha * obs.in_flight + (1 - p.bs_alpha) * state.bs_ema
    acc = state.accept_ema
    if obs.accept_length is not None:
        acc = obs.accept_length if acc is None else p.alpha * obs.accept_length + (1 - p.alpha) * acc
    base = replace(state, accept_ema=acc, bs_ema=bs, ticks=state.ticks + 1)
    tiers = tuple(s for s in bucket_tiers(p.tiers, bs) if tier_config(s) in obs.alive) or tuple(
        sorted({c.steps for c in obs.alive if c.topk <= 1})
    )
    if not tiers:
        return Decision(replace(base, active=None))
    target = tier_config(_wanted(base, tiers, p))
    detail: dict[str, float | int | str | None] = {
        "bs_ema": round(bs, 3),
        "accept_ema": None if acc is None else round(acc, 3),
    }
    if state.active is None or state.active not in obs.alive:
        why = "start" if state.active is None else "instance_lost"
        return Decision(
            replace(base, active=target, candidate=None, candidate_ticks=0, accept_ema=None),
            Switch(state.active, target, why, detail),  # type: ignore[arg-type]
        )
    if target == state.active:
        return Decision(replace(base, candidate=None, candidate_ticks=0))
    ticks = base.candidate_ticks + 1 if base.candidate == target else 1
    if ticks >= p.dwell_ticks:  # the new tier's acceptance is learnt afresh
        return Decision(
            replace(base, active=target, candidate=None, candidate_ticks=0, accept_ema=None),
            Switch(state.active, target, "load_change" if state.active.steps not in tiers else "accept_length", detail),
        )
    return Decision(replace(base, candidate=target, candidate_ticks=ticks))
