"""Every cell's reward, measured or predicted, with an uncertainty.

- A measured cell's estimate is the mean published reward of its rows (an error row scores 0); its uncertainty is
  the repeat noise over the square root of its rows (the noise pooled from cells measured more than once, else
  ``DEFAULT_NOISE_SD``).
- An unmeasured cell's estimate is the published reward of the fitted twin's prediction (pure model, the run's
  protocol, nominal launch) against the measured baseline speed of its batch size; a config the model says cannot
  launch at any mem fraction of the ladder scores 0, and the throttle flag counts by its chance (``flags.py``, learned
  from the rows' flags). Its uncertainty propagates the model's own error on the measured cells (RMS relative speed
  error, RMS utilization error; floors below) and the flag chance's through the reward.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Sequence

from harness.grid import SpecConfig
from harness.runs.rows import SweepRow
from harness.sweep.active.cost import CellCost, CostModel
from harness.sweep.active.throttle_flags import FlagModel, capped_share, share_below_cap
from harness.twin.fit.calibrate import Protocol, published_reward
from harness.twin.fit.from_run import CellMeans, baseline_speeds, cell_means
from harness.twin.model import base_power_w, launch_seconds, memory_footprint_mb, simulate_cell, step_cost
from harness.twin.profile import TwinProfile

SPEED_SIGMA_FLOOR = 0.02
"""Relative speed error assumed for an unmeasured cell however well the measured ones fit (the twin target is 5 %)."""
UTIL_SIGMA_FLOOR = 0.01
"""Utilization error floor (the twin target is 0.03)."""
DEFAULT_NOISE_SD = 0.01
"""Repeat-to-repeat sd of one row's reward before any cell has been measured twice (twin grids: 0.004-0.015)."""
MIN_NOISE_DOF = 4
"""Repeat degrees of freedom before the measured noise may undercut ``DEFAULT_NOISE_SD``."""
THROTTLE_FACTOR = 0.3
"""The published reward's multiplier for a throttled row: with the published rule (any clock-event bit) a config
running at the power cap is flagged whenever the after-run snapshot falls in a capped stretch (``flags.py``)."""
FLAG_P_SIGMA = 0.25
"""Uncertainty of the learned chance of that flag at a coin flip (few rows pin the flag model)."""
NOISE_SD_FLOOR = 0.003
"""A row's reward is never trusted to repeat more closely than this (seeded twins repeat almost exactly)."""


@dataclass(frozen=True)
class Prediction:
    """The fitted model's figures for one cell (pure model, nominal launch)."""

    speed: float
    util: float
    jpt: float
    accept: float
    tail_capped: float
    """Share of the last snapshot period of decoding the model spends at the power cap."""
    cap_margin: float
    """Full-batch power demand at full clocks minus the cap, over the limit (> 0: the model runs it at the cap)."""
    fits: bool
    model_launch_s: float
    model_measure_s: float


def predict_cell(
    profile: TwinProfile,
    cfg: SpecConfig,
    bs: int,
    protocol: Protocol,
    mem_fractions: Sequence[float],
    snapshot_period_s: float = 0.1,
) -> Prediction:
    """The model's figures for one cell; ``snapshot_period_s``: the sampler's period in device seconds (the
    after-run snapshot is the last sample before the window's end, so it reads the state of that last period)."""
    launches = sum(launch_seconds(profile, cfg, bs).values())
    if not any(memory_footprint_mb(profile, cfg, mf, bs)["fits"] for mf in mem_fractions):
        return Prediction(0.0, 0.0, 0.0, 0.0, 0.0, -1.0, False, launches * len(mem_fractions), 0.0)
    sim = simulate_cell(
        profile,
        cfg,
        bs,
        list(protocol.prompts),
        max_new_tokens=protocol.output_tokens,
        num_requests=protocol.measured(bs),
        seed=0,
        nominal_launch=True,
        tail_s=snapshot_period_s,
    )
    measured = protocol.measured(bs)
    d = profile.device
    demand = (base_power_w(profile) + step_cost(profile, cfg, bs).dyn_w) / d.power_limit_w
    return Prediction(
        sim.speed_tok_s,
        sim.utilization,
        sim.joules_per_token,
        sim.accept_length,
        sim.capped_tail_frac or 0.0,
        demand - (1 + d.cap_overshoot_frac),
        True,
        launches,
        sim.wall_s * protocol.requests(bs) / measured,
    )


@dataclass(frozen=True)
class ModelError:
    """How far the fitted model is from the measured cells, plus the repeat noise of a row's reward (the throttle
    flag's share of that noise left out: ``flag_sd`` adds it per cell)."""

    speed_rel: float
    util_abs: float
    noise_sd: float

    @classmethod
    def of(
        cls,
        cells: Sequence[CellMeans],
        preds: dict[tuple[int, tuple[int, int, int]], Prediction],
        repeats: Sequence[Sequence[float]],
    ) -> "ModelError":
        """``repeats``: per measured cell, its rows' rewards without the throttle multiplier."""
        speed, util = [], []
        for c in cells:
            p = preds.get((c.batch_size, c.config))
            if p is None or not p.fits or p.speed <= 0:
                continue
            speed.append(math.log(c.speed / p.speed) ** 2)
            if c.util is not None:
                util.append((c.util - p.util) ** 2)
        return cls(
            max(SPEED_SIGMA_FLOOR, math.sqrt(statistics.fmean(speed))) if speed else 0.05,
            max(UTIL_SIGMA_FLOOR, math.sqrt(statistics.fmean(util))) if util else 0.03,
            pooled_noise_sd(repeats),
        )


def pooled_noise_sd(groups: Sequence[Sequence[float]]) -> float:
    """The pooled within-cell sd of a row's reward (``groups``: each cell's rewards); below ``MIN_NOISE_DOF``
    degrees of freedom it is not trusted to be smaller than ``DEFAULT_NOISE_SD``; never below ``NOISE_SD_FLOOR``."""
    dof = sum(len(g) - 1 for g in groups if len(g) > 1)
    if dof == 0:
        return DEFAULT_NOISE_SD
    pooled = math.sqrt(sum(statistics.variance(g) * (len(g) - 1) for g in groups if len(g) > 1) / dof)
    return max(NOISE_SD_FLOOR, pooled if dof >= MIN_NOISE_DOF else max(pooled, DEFAULT_NOISE_SD))


def _reward(speed: float, util: float, baseline: float, flag_p: float) -> float:
    """The published reward's expectation over the throttle flag (x0.3 when set)."""
    return published_reward(util, speed, baseline) * (1.0 - (1.0 - THROTTLE_FACTOR) * flag_p)


def predicted_reward(p: Prediction, baseline: float, q: float) -> float:
    """The expected published reward of the model's figures, ``q`` the chance of the throttle flag."""
    if not p.fits or baseline <= 0:
        return 0.0
    return _reward(p.speed, p.util, baseline, q)


def reward_sigma(p: Prediction, baseline: float, err: ModelError, q: float) -> float:
    """Half the reward's swing over speed, utilization and flag chance ``q`` moved by one model error each, in
    quadrature (the flag chance by ``FLAG_P_SIGMA`` at a coin flip, less towards 0 or 1)."""
    if not p.fits or baseline <= 0:
        return 0.0

    def r(speed: float, util: float, flag_p: float = q) -> float:
        return _reward(speed, util, baseline, min(1.0, max(0.0, flag_p)))

    ds = r(p.speed * (1 + err.speed_rel), p.util) - r(p.speed * (1 - err.speed_rel), p.util)
    du = r(p.speed, p.util + err.util_abs) - r(p.speed, p.util - err.util_abs)
    dq = FLAG_P_SIGMA * 2 * math.sqrt(q * (1 - q))  # largest at a coin flip, none when the model is sure
    df = r(p.speed, p.util, q - dq) - r(p.speed, p.util, q + dq)
    return math.sqrt((ds / 2) ** 2 + (du / 2) ** 2 + (df / 2) ** 2)


@dataclass(frozen=True)
class CellEstimate:
    """What the planner knows about one (batch size, config)."""

    batch_size: int
    config: tuple[int, int, int]
    prediction: Prediction
    predicted_reward: float
    rewards: tuple[float, ...]
    reward: float
    sigma: float
    cost: CellCost

    @property
    def measured(self) -> int:
        return len(self.rewards)


@dataclass(frozen=True)
class RowReward:
    reward: float
    unflagged: float
    """The same row's reward without the throttle multiplier (the thermal one kept: it is part of the row's worth)."""
    flagged: bool
    error: bool = False
    """An error row (reward 0): it has no after-run snapshot, so it says nothing about the flag or the noise."""
    util: float | None = None
    """The row's utilization (average power over the cap; None for an error row)."""


def measured_row_rewards(
    rows: Sequence[SweepRow], fallback_limit_w: float | None
) -> dict[tuple[int, tuple[int, int, int]], list[RowReward]]:
    """Per cell, each row's published reward (error rows score 0; rows without a baseline are left out)."""
    from harness.twin.fit.from_run import row_reward, row_utilization, usable

    base = baseline_speeds(rows)
    out: dict[tuple[int, tuple[int, int, int]], list[RowReward]] = {}
    for r in rows:
        if not r.is_error and not usable(r):
            continue  # an invalid window says nothing about the config
        x = row_reward(r, base.get(r.batch_size), fallback_limit_w)
        if x is None:
            continue
        plain = row_reward(r, base.get(r.batch_size), fallback_limit_w, throttle=False)
        assert plain is not None  # the same row, baseline and utilization as x
        out.setdefault((r.batch_size, r.config.as_tuple()), []).append(
            RowReward(
                x,
                plain,
                bool(r.gpu_throttling),
                r.is_error,
                None if r.is_error else row_utilization(r, fallback_limit_w),
            )
        )
    return out


def measured_rewards(
    rows: Sequence[SweepRow], fallback_limit_w: float | None
) -> dict[tuple[int, tuple[int, int, int]], list[float]]:
    """Per cell, the published reward of each row."""
    return {k: [x.reward for x in v] for k, v in measured_row_rewards(rows, fallback_limit_w).items()}


def flag_sd(rs: Sequence[RowReward], model_q: float) -> float:
    """Per-row sd of a measured cell's reward from the throttle flag: the flag's chance blended from the rows' own
    flags and the model's (as two pseudo-rows), times the reward the flag takes away."""
    q = (sum(x.flagged for x in rs) + 2 * model_q) / (len(rs) + 2)
    return (1.0 - THROTTLE_FACTOR) * statistics.fmean(x.unflagged for x in rs) * math.sqrt(q * (1 - q))


def fit_cost_model(rows: Sequence[SweepRow], preds: dict[tuple[int, tuple[int, int, int]], Prediction]) -> CostModel:
    """The cost model fitted to every row's GPU-seconds against its cell's model launch and protocol time."""
    from harness.sweep.active.cost import row_cost

    samples = []
    for r in rows:
        p = preds.get((r.batch_size, r.config.as_tuple()))
        if p is not None:
            samples.append((p.model_launch_s, p.model_measure_s, row_cost(r)))
    return CostModel.fit(samples)


def estimate_cells(
    profile: TwinProfile,
    rows: Sequence[SweepRow],
    configs: Sequence[SpecConfig],
    batch_sizes: Sequence[int],
    protocol: Protocol,
    mem_fractions: Sequence[float],
    fallback_limit_w: float | None,
    snapshot_period_s: float = 0.1,
) -> tuple[list[CellEstimate], ModelError, CostModel, FlagModel]:
    """Every (batch size, config) of the plan: estimate, uncertainty, predicted cost; the model error; the cost model;
    the flag model."""
    preds = {
        (bs, cfg.as_tuple()): predict_cell(profile, cfg, bs, protocol, mem_fractions, snapshot_period_s)
        for bs in batch_sizes
        for cfg in configs
    }
    cost_model = fit_cost_model(rows, preds)
    cells = cell_means(list(rows), fallback_limit_w)
    measured = measured_row_rewards(rows, fallback_limit_w)
    err = ModelError.of(cells, preds, [[x.unflagged for x in xs if not x.error] for xs in measured.values()])
    below = {
        bs: share_below_cap([p.tail_capped for (b, _), p in preds.items() if b == bs and p.fits and p.cap_margin > 0])
        for bs in batch_sizes
    }
    shares = {key: capped_share(p.tail_capped, p.cap_margin, below[key[0]]) for key, p in preds.items()}
    flags = fit_flag_model(measured, preds, shares, err)
    base = baseline_speeds(rows)
    out = []
    for (bs, cfg), p in preds.items():
        model_base = preds[(bs, (0, 0, 0))].speed if (bs, (0, 0, 0)) in preds else 0.0
        baseline = base.get(bs) or model_base
        q = flags.chance(p.cap_margin, shares[(bs, cfg)], p.fits)
        pr = predicted_reward(p, baseline, q)
        detail = measured.get((bs, cfg), [])
        rs = tuple(x.reward for x in detail)
        if rs:  # repeat noise plus the throttle flag's coin flip (a cell near the cap is flagged some runs only)
            row_sd = math.hypot(err.noise_sd, flag_sd(detail, q))
            reward, sigma = statistics.fmean(rs), row_sd / math.sqrt(len(rs))
        else:
            reward, sigma = pr, reward_sigma(p, baseline, err, q)
        out.append(
            CellEstimate(bs, cfg, p, pr, rs, reward, sigma, cost_model.predict(p.model_launch_s, p.model_measure_s))
        )
    return out, err, cost_model, flags


def fit_flag_model(
    measured: dict[tuple[int, tuple[int, int, int]], list[RowReward]],
    preds: dict[tuple[int, tuple[int, int, int]], Prediction],
    shares: dict[tuple[int, tuple[int, int, int]], float],
    err: ModelError,
) -> FlagModel:
    """The flag model fitted to every measured row's flag against its cell's cap margin and capped share (baselines
    included; error rows left out: they have no after-run snapshot)."""
    observed = [
        (p.cap_margin, shares[key], x.flagged)
        for key, xs in measured.items()
        if (p := preds.get(key)) is not None and p.fits
        for x in xs
        if not x.error
    ]
    return FlagModel.fit(observed, err.util_abs)
