"""The band controller's closed loop, pure: a utilization model read at the batch size each config would run at,
corrected by an integrator on the measured utilization, with hysteresis. ``controller.step`` calls it per tick.

- Load: two time-based EMAs of the in-flight count: a slow one (``pick_tau_s``) that the pick reads, and one that
  matches the sampler's averaging window (``window_s``) that the error is computed at.
- Open-loop traffic (arrivals do not wait for answers): a faster config serves the same tokens/s at a smaller batch
  (Little's law), so each config is read at the batch size where its modelled tokens/s equals the offered load:
  the arrival rate (EMA, ``rate_tau_s``) x the mean completion tokens of finished requests, both independent of the
  config (the in-flight count is not: it drops after a switch to a faster config and doubles during a drain).
  Before a request has finished, the offered load is what the routed config serves at the in-flight count. A
  closed-loop client (``open_loop=False``) keeps the batch size whatever the config.
- Integrator: ``bias += dt / bias_tau_s * (measured - modelled(routed config) - bias)``, only on a clean sample: the
  GPU busy with the routed instance's requests alone for a whole averaging window. Idle gaps (the GPU at idle power)
  and the drain after a switch (the old instance's requests still draw power, both engines at once) say nothing
  about the routed config, and integrating them drove the old loop toward the cap config after every gap.
- With the clock trim (``clock_trim``): anything at or above the band's low edge can be trimmed into it, so the
  share is that of windows at or above it (the cap included) and the fastest such config wins; the integrator
  pauses while a lock holds the power below the config's own level.
- Pick: the config with the largest expected share of windows in the band (``umodel.band_share``: prediction +
  bias, a spread of ``sigma``, nothing at the cap); the routed config is kept unless the pick's share is larger by
  ``hysteresis``: each switch costs a drain with both instances drawing power (at the cap on the twin), so a
  marginal gain is not worth one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

from harness.grid import SpecConfig
from harness.serve.utilization_model import UtilModel, band_share, predict, share_pick


class Observed(Protocol):
    """What a tick saw (``controller.Observation``)."""

    @property
    def t_s(self) -> float: ...
    @property
    def in_flight(self) -> int: ...
    @property
    def utilization(self) -> float | None: ...
    @property
    def alive(self) -> frozenset[SpecConfig]: ...
    @property
    def clean_s(self) -> float | None: ...
    @property
    def arrivals(self) -> int: ...
    @property
    def tokens(self) -> float | None: ...
    @property
    def clock_locked(self) -> bool: ...
    @property
    def clock_active(self) -> bool: ...


@dataclass(frozen=True)
class LoopParams:
    pick_tau_s: float = 3.0
    """Time constant (caller's seconds) of the in-flight estimate the pick reads."""
    rate_tau_s: float = 3.0
    """Time constant of the arrival-rate estimate (open loop)."""
    window_s: float = 1.0
    """The utilization sample's averaging window (the twin's and NVML's power average: 1 s)."""
    bias_tau_s: float = 2.0
    """Integrator time constant (caller's seconds of clean samples)."""
    bias_limit: float = 0.15
    sigma: float = 0.02
    """Spread of one-second utilization around its prediction (Poisson traffic at batch sizes 4-16 on the twin)."""
    cap_u: float = 0.995
    """A prediction at or above this is at the power cap (the twin's and a GPU's limiter overshoot by ~2 %)."""
    hysteresis: float = 0.1
    trim_hysteresis: float = 0.3
    """The same with the clock trim: every config at or above the band's low edge reaches it, so a switch buys
    little share, and it costs a drain and leaves the lock set for the old config (measured on the bursty trace:
    with 0.1 the loop flipped between no_spec and (5,2,8) and lost the band after each flip)."""
    """Gain in expected in-band share a switch must bring."""
    open_loop: bool = True


@dataclass(frozen=True)
class LoopState:
    last_t: float | None = None
    bs_slow: float = 1.0
    bs_win: float = 1.0
    bias: float = 0.0
    clean: bool = False
    rate: float = 0.0
    """Arrivals per second (EMA)."""
    tokens: float | None = None
    """Completion tokens per request (EMA)."""

    def offered(self) -> float | None:
        """Offered tokens/s (None until a request has finished)."""
        return self.rate * self.tokens if self.tokens is not None else None

    def detail(self) -> dict[str, float | int | str | None]:
        off = self.offered()
        return {
            "bias": round(self.bias, 4),
            "bs_slow": round(self.bs_slow, 3),
            "clean": int(self.clean),
            "offered_tok_s": None if off is None else round(off, 1),
        }


def _ema(old: float, new: float, dt: float, tau_s: float) -> float:
    return old + (1.0 - math.exp(-dt / max(tau_s, 1e-9))) * (new - old)


def bs_for_rate(model: UtilModel, cfg: SpecConfig, rate: float) -> float:
    """The batch size (1 .. the largest measured) at which ``cfg``'s modelled tokens/s reaches ``rate``."""
    hi_bs = max(bs for bs, row in model.items() if cfg in row)
    lo, hi = 0.0, math.log(hi_bs)
    speed = lambda x: (predict(model, cfg, math.exp(x)) or (0.0, 0.0))[1]  # noqa: E731
    if speed(lo) >= rate:
        return 1.0
    if speed(hi) <= rate:
        return float(hi_bs)
    for _ in range(30):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if speed(mid) < rate else (lo, mid)
    return math.exp(hi)


def predictions(
    model: UtilModel, routed: SpecConfig | None, batch_size: float, open_loop: bool, offered: float | None = None
) -> dict[SpecConfig, tuple[float, float]]:
    """{config: (utilization, tokens/s per request)} if the traffic went to that config: open loop, at the batch
    size where it serves ``offered`` tokens/s (default: what ``routed`` serves at ``batch_size``); else at
    ``batch_size``."""
    cfgs = sorted({c for row in model.values() for c in row})
    if open_loop and offered is None and routed is not None:
        offered = (predict(model, routed, batch_size) or (0.0, None))[1]
    out: dict[SpecConfig, tuple[float, float]] = {}
    for c in cfgs:
        bs = bs_for_rate(model, c, offered) if open_loop and offered is not None else max(batch_size, 1.0)
        p = predict(model, c, bs)
        if p is not None:
            out[c] = (p[0], p[1] / bs)
    return out


def closed_loop_step(
    state: LoopState,
    obs: Observed,
    model: UtilModel,
    params: LoopParams,
    band: tuple[float, float],
    routed: SpecConfig | None,
) -> tuple[SpecConfig | None, LoopState]:
    """One tick: update the load estimates and the integrator (``routed`` None: do not integrate, e.g. in the
    fallback), return the pick (None when no modelled config is alive) and the new state."""
    n = float(obs.in_flight)
    if state.last_t is None:
        slow, win, dt, rate = n, n, 0.0, 0.0
    else:
        dt = max(0.0, obs.t_s - state.last_t)
        slow, win = _ema(state.bs_slow, n, dt, params.pick_tau_s), _ema(state.bs_win, n, dt, params.window_s / 2)
        rate = _ema(state.rate, obs.arrivals / dt, dt, params.rate_tau_s) if dt > 0 else state.rate
    tokens = (
        state.tokens
        if obs.tokens is None
        else obs.tokens
        if state.tokens is None
        else 0.8 * state.tokens + 0.2 * obs.tokens
    )
    clean = obs.clean_s >= params.window_s if obs.clean_s is not None else obs.in_flight > 0
    bias = state.bias
    if routed is not None and clean and obs.utilization is not None and not obs.clock_locked:
        p = predict(model, routed, win)
        if p is not None:
            bias += min(1.0, dt / params.bias_tau_s) * (obs.utilization - p[0] - bias)
            bias = max(-params.bias_limit, min(params.bias_limit, bias))
    new = LoopState(obs.t_s, slow, win, bias, clean, rate, tokens)
    row = predictions(model, routed, slow, params.open_loop, new.offered())
    # The locked SM clock trims power down into the band (``clock_trim.py``, ``--clock-control``) while the observation
    # says it works (an actuator whose lock the GPU took): a config's share is then that of windows at or above the
    # band's low edge (the cap included), not inside it. A refused lock leaves speculation alone.
    trim = obs.clock_active
    pick = share_pick(row, bias, band, obs.alive, params.sigma, params.cap_u, trim)
    if pick is not None and routed is not None and routed in row and routed in obs.alive and pick != routed:
        share = lambda c: band_share(row[c][0] + bias, band, params.sigma, params.cap_u, trim)  # noqa: E731
        if share(pick) - share(routed) <= (params.trim_hysteresis if trim else params.hysteresis):
            pick = routed
    return pick, new
