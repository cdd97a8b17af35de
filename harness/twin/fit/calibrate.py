"""Fit the twin's model parameters to the published live measurements (``calibration.json``).

Everything runs in-process on the pure model (``model.simulate_cell``: the published protocol, no servers):
speed = accept length / p20(step time), J/token = energy / tokens, utilization = average power / 80 W.

Fitting is staged, physics first:
1. acceptance (``accept_first``, ``accept_decay``, ``rank_share``): the tree model's harmonic mean over the four
   published prompts against every published accept length (analytic, no sampling);
2. step time and power (14 parameters: target floor/per-token costs, draft step costs, overheads, phase powers):
   least squares on the simulated cells (speed, J/token, utilization, published step times);
2b. a Nelder-Mead polish of the power levels (the power cap makes the objective kinked);
3. ``prompt_quality_spread`` (content predictability spread, which drives stragglers at large batch sizes): the
   outer loop over a small grid, keeping the best total error.

Nothing is a per-row table: batch sizes 4 and 8 are predictions of the same physics.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from harness.core.errors import MissingFileError
from harness.core.extras import needs
from harness.grid import ACTIONS, BASELINE, SpecConfig
from harness.runs.plan import measured_requests
from harness.twin.fit.report import print_fit_table
from harness.twin.model import expected_accept_length, prompt_quality, simulate_cell
from harness.twin.profile import DEFAULT_PROFILE, PROFILES_DIR, PerfParams, TwinProfile, load_profile

DATA_DIR = Path(__file__).resolve().parents[2] / "data"  # harness/data
CALIBRATION_PATH = DATA_DIR / "calibration.json"
PROMPTS_PATH = DATA_DIR / "sweep_prompts.json"

# Derived from the published rewards and J/token (see docs/twin.md): utilization = avg power / 80 W.
DERIVED_UTILIZATION: dict[tuple[int, tuple[int, int, int]], float] = {
    (1, (3, 4, 8)): 0.888,
    (1, (5, 4, 16)): 0.921,
    (1, (5, 4, 8)): 0.888,
    (16, (3, 4, 8)): 1.01,
    (16, (3, 2, 4)): 0.952,
    (16, (1, 4, 2)): 0.909,
    (16, (5, 2, 8)): 0.972,
}
# Published live p20 step times (ms).
PUBLISHED_STEP_MS: dict[tuple[int, tuple[int, int, int]], float] = {
    (1, (0, 0, 0)): 10.28,
    (1, (3, 4, 8)): 15.35,
    (1, (5, 4, 16)): 18.0,
    (16, (0, 0, 0)): 11.0,
    (16, (3, 4, 8)): 21.1,
    (16, (3, 2, 4)): 18.2,
    (16, (1, 4, 2)): 14.8,
    (16, (5, 2, 8)): 23.5,
}
TARGETS = {"speed": 0.05, "accept": 0.03, "jpt": 0.10, "util": 0.03}
REWARD_TOLERANCE = 0.01
"""Residual scale of a published reward (fitting only): the recipe's margins are 0.015 (bs 1) and 0.09 (bs 16)."""

STEP_POWER_PARAMS: tuple[tuple[str, str], ...] = (
    ("perf", "target_mem_ms"),
    ("perf", "target_ms_per_token"),
    ("perf", "target_ms_per_token_above_knee"),
    ("perf", "baseline_overhead_ms"),
    ("perf", "spec_overhead_ms"),
    ("perf", "spec_overhead_ms_per_req"),
    ("perf", "draft_step_ms"),
    ("perf", "draft_ms_per_token"),
    ("perf", "tree_ms_per_candidate"),
    ("power", "target_w"),
    ("power", "target_w_per_token"),
    ("power", "target_w_token_sat"),
    ("power", "draft_w"),
    ("power", "overhead_w"),
)
# Physical floors (a tiny draft head still costs something per token; CPU-bound phases still draw some power).
LOWER_BOUNDS: dict[str, float] = {
    "target_ms_per_token_above_knee": 1e-4,
    "draft_ms_per_token": 0.004,
    "tree_ms_per_candidate": 2e-4,
    "overhead_w": 4.0,
    "spec_overhead_ms_per_req": 1e-3,
    "target_w_per_token": 1e-3,
    "target_w_token_sat": 8.0,
}
ACCEPT_PARAMS: tuple[str, ...] = (
    "accept_first",
    "accept_decay",
    "accept_decay_power",
    "rank_share",
    "chain_depth_factor",
)


def load_calibration(path: str | Path | None = None) -> dict:
    p = Path(path) if path else CALIBRATION_PATH
    if not p.exists():
        raise MissingFileError(
            f"calibration file not found: {p}", fix="pass --calibration PATH (shared/reference/calibration.json)"
        )
    return json.loads(p.read_text())


def load_prompts() -> list[str]:
    return json.loads(PROMPTS_PATH.read_text())["prompts"]


def published_rows(cal: dict) -> list[dict]:
    return [r for r in cal["rows"]]


# ---- evaluation -----------------------------------------------------------------------------------------------
@dataclass
class RowFit:
    batch_size: int
    config: tuple[int, int, int]
    accept: float
    speed: float
    jpt: float
    util: float
    step_ms: float | None
    pub_accept: float
    pub_speed: float
    pub_jpt: float
    pub_util: float | None
    pub_step_ms: float | None
    pub_reward: float | None = None
    reward: float | None = None

    @property
    def errors(self) -> dict[str, float | None]:
        return {
            "speed": self.speed / self.pub_speed - 1.0,
            "accept": self.accept / self.pub_accept - 1.0,
            "jpt": self.jpt / self.pub_jpt - 1.0,
            "util": None if self.pub_util is None else self.util - self.pub_util,
        }

    def within_targets(self) -> bool:
        return all(v is None or abs(v) <= TARGETS[k] for k, v in self.errors.items())


@dataclass(frozen=True)
class Protocol:
    """What one cell's bench ran: the prompts cycled, tokens per request, measured requests (None: max(16, bs))."""

    prompts: tuple[str, ...]
    output_tokens: int = 512
    num_prompts: int | None = None
    num_prompts_by_bs: tuple[tuple[int, int], ...] = ()
    """The band probe's sized counts per batch size (``harness.sweep.probe``), over ``num_prompts``."""

    @classmethod
    def published(cls) -> "Protocol":
        return cls(tuple(load_prompts()))

    def measured(self, batch_size: int) -> int:
        """Measured requests of a cell: the sized count, else ``num_prompts``, else the published max(16, bs)."""
        return measured_requests(batch_size, self.num_prompts, dict(self.num_prompts_by_bs))

    def requests(self, batch_size: int) -> int:
        """Requests a cell's server sees: the warm-up wave of ``batch_size`` plus the measured ones."""
        return batch_size + self.measured(batch_size)


@dataclass(frozen=True)
class Target:
    """Measured figures of one cell (published or a run's mean over repeats); None where not measured."""

    batch_size: int
    config: tuple[int, int, int]
    accept: float
    speed: float
    jpt: float
    util: float | None = None
    step_ms: float | None = None
    reward: float | None = None


def published_targets(cal: dict) -> list[Target]:
    """The published rows as fit targets (utilizations derived from the rewards, published p20 step times)."""
    out = []
    for row in published_rows(cal):
        key = (int(row["batch_size"]), tuple(row["config"]))
        out.append(
            Target(
                key[0],
                key[1],
                accept=row["accept_length"],
                speed=row["speed_tok_s"],
                jpt=row["joules_per_token"],
                util=row.get("utilization", DERIVED_UTILIZATION.get(key)),
                step_ms=PUBLISHED_STEP_MS.get(key),
                reward=row.get("reward"),
            )
        )
    return out


def evaluate(profile: TwinProfile, cal: dict | None = None, seeds: tuple[int, ...] = (0, 1, 2)) -> list[RowFit]:
    """Simulate every published row (mean over ``seeds``) and pair it with the published figures."""
    return evaluate_targets(profile, published_targets(cal or load_calibration()), Protocol.published(), seeds)


def evaluate_targets(
    profile: TwinProfile, targets: list[Target], protocol: Protocol, seeds: tuple[int, ...] = (0, 1, 2)
) -> list[RowFit]:
    """Simulate every target's cell under ``protocol`` (mean over ``seeds``, nominal launches) and pair them."""
    prompts = list(protocol.prompts)
    out = []
    for t in targets:
        cfg, bs = SpecConfig(*t.config), t.batch_size
        sims = [
            simulate_cell(
                profile,
                cfg,
                bs,
                prompts,
                max_new_tokens=protocol.output_tokens,
                num_requests=protocol.measured(bs),
                seed=s,
                nominal_launch=True,
            )
            for s in seeds
        ]
        out.append(
            RowFit(
                bs,
                t.config,
                accept=statistics.fmean(c.accept_length for c in sims),
                speed=statistics.fmean(c.speed_tok_s for c in sims),
                jpt=statistics.fmean(c.joules_per_token for c in sims),
                util=statistics.fmean(c.utilization for c in sims),
                step_ms=statistics.fmean(c.step_time_p20_s or 0.0 for c in sims) * 1000
                if all(c.step_time_p20_s for c in sims)
                else None,
                pub_accept=t.accept,
                pub_speed=t.speed,
                pub_jpt=t.jpt,
                pub_util=t.util,
                pub_step_ms=t.step_ms,
                pub_reward=t.reward,
            )
        )
    baseline = {f.batch_size: f.speed for f in out if f.config == (0, 0, 0)}
    for f in out:
        if f.pub_reward is not None and f.batch_size in baseline:
            f.reward = published_reward(f.util, f.speed, baseline[f.batch_size])
    return out


# ---- reward (the published definition) -------------------------------------------------------------------------
def published_reward(
    util: float, speed: float, baseline_speed: float, temp_c: float | None = None, throttled: bool = False
) -> float:
    band = 1.0 if 0.95 <= util <= 0.98 else (util / 0.95 if util < 0.95 else max(0.0, 1.0 - 10.0 * (util - 0.98)))
    thr = min(1.0, max(0.0, (speed / baseline_speed - 1.0) / 2.0))
    combined = band**0.5 * thr**0.5
    mult = 1.0
    if temp_c is not None:
        mult = 0.5 if temp_c > 80 else (0.8 if temp_c > 75 else 1.0)
    if throttled:
        mult *= 0.3
    return min(1.0, max(0.0, combined * mult))


def predict_rewards(
    profile: TwinProfile,
    batch_sizes: tuple[int, ...] = (1, 4, 8, 16),
    repeats: int = 3,
    configs: tuple[SpecConfig, ...] = ACTIONS,
    mem_fraction: float = 0.65,
) -> dict[int, list[tuple[SpecConfig, float, float]]]:
    """Per batch size: (config, mean reward, std over repeats), best first, from the pure model.

    The baseline speed of a repeat is that repeat's baseline cell; configs that do not fit in memory at 0.65 or
    0.55 score 0 (an error row). Thermal multipliers are left out: the twin keeps temperatures below 75 C.
    """
    from harness.twin.model import memory_footprint_mb

    prompts = load_prompts()
    out: dict[int, list[tuple[SpecConfig, float, float]]] = {}
    for bs in batch_sizes:
        base = [simulate_cell(profile, BASELINE, bs, prompts, seed=1000 * r + bs).speed_tok_s for r in range(repeats)]
        scores = []
        for cfg in configs:
            fits = any(memory_footprint_mb(profile, cfg, mf, bs)["fits"] for mf in (mem_fraction, 0.55))
            rs = []
            for r in range(repeats):
                if not fits:
                    rs.append(0.0)
                    continue
                c = simulate_cell(profile, cfg, bs, prompts, seed=1000 * r + bs + 17 * ACTIONS.index(cfg))
                rs.append(published_reward(c.utilization, c.speed_tok_s, base[r]))
            scores.append((cfg, statistics.fmean(rs), statistics.pstdev(rs)))
        out[bs] = sorted(scores, key=lambda t: -t[1])
    return out


# ---- fitting ---------------------------------------------------------------------------------------------------
def _set(profile: TwinProfile, section: str, name: str, value: float) -> None:
    setattr(getattr(profile, section), name, float(value))


def fit_acceptance(profile: TwinProfile, cal: dict) -> TwinProfile:
    """Stage 1: accept_first, accept_decay, rank_share from every published accept length (analytic)."""
    targets: list[tuple[SpecConfig, int, float, float]] = []  # config, bs, accept, tolerance
    for row in published_rows(cal):
        if row["config"] != [0, 0, 0]:
            targets.append((SpecConfig(*row["config"]), int(row["batch_size"]), row["accept_length"], 0.01))
    for key, val in cal.get("other_accept_lengths", {}).items():
        if key.startswith("("):
            targets.append((SpecConfig(*map(int, key.strip("()").split(","))), 8, float(val), 0.015))
    return fit_accept_targets(profile, targets, Protocol.published())


ACCEPT_BOUNDS = ([0.2, 0.5, 0.3, 0.05, 0.6], [0.95, 1.0, 3.0, 0.95, 1.0])


def protocol_accept(perf: PerfParams, cfg: SpecConfig, bs: int, protocol: Protocol) -> float:
    """Tokens per verify over a cell's requests (warm-up of bs, then the measured ones, prompts cycled)."""
    qs = [prompt_quality(perf, protocol.prompts[i % len(protocol.prompts)]) for i in range(protocol.requests(bs))]
    return len(qs) / sum(1.0 / expected_accept_length(perf, cfg, q) for q in qs)


FITTING = "fitting the twin"


def fit_accept_targets(
    profile: TwinProfile,
    targets: list[tuple[SpecConfig, int, float, float]],
    protocol: Protocol,
    prior: float | None = None,
) -> TwinProfile:
    """The acceptance parameters (``ACCEPT_PARAMS``) by least squares on (config, bs, accept length, tolerance)
    targets (analytic, no sampling). ``prior``: each parameter's distance from the start, in its own units, counts
    as one tolerance per ``prior`` (keeps parameters the targets do not pin where they started)."""
    with needs(FITTING):
        from scipy.optimize import least_squares

    prof = profile.model_copy(deep=True)
    x0 = [min(max(getattr(prof.perf, n), lo + 1e-6), hi - 1e-6) for n, lo, hi in zip(ACCEPT_PARAMS, *ACCEPT_BOUNDS)]

    def resid(x: Sequence[float]) -> list[float]:
        for name, v in zip(ACCEPT_PARAMS, x):
            setattr(prof.perf, name, float(v))
        r = [math.log(protocol_accept(prof.perf, cfg, bs, protocol) / val) / tol for cfg, bs, val, tol in targets]
        return r + ([(v - v0) / prior for v, v0 in zip(x, x0)] if prior else [])

    res = least_squares(resid, x0, bounds=ACCEPT_BOUNDS, diff_step=1e-3)
    for name, v in zip(ACCEPT_PARAMS, res.x):
        setattr(prof.perf, name, float(v))
    return prof


AGENTIC_CONTEXT_TOKENS = 8000
"""Typical context of the published agentic traffic (Terminal-Bench tool-use histories), well past the draft's 2048."""


def fit_long_context(profile: TwinProfile, cal: dict) -> TwinProfile:
    """Stage 1b: ``long_context_floor`` from the agentic accept lengths at AGENTIC_CONTEXT_TOKENS of context."""
    with needs(FITTING):
        from scipy.optimize import minimize_scalar

    from harness.twin.model import context_quality

    targets = [
        (SpecConfig(*map(int, k.strip("()").split(","))), float(v))
        for k, v in cal.get("agentic_accept_length", {}).items()
        if k.startswith("(")
    ]
    if not targets:
        return profile
    prof = profile.model_copy(deep=True)

    def err(floor: float) -> float:
        prof.perf.long_context_floor = float(floor)
        ctx = context_quality(prof.perf, AGENTIC_CONTEXT_TOKENS)
        return sum(math.log(expected_accept_length(prof.perf, cfg, 1.0, ctx) / v) ** 2 for cfg, v in targets)

    res = minimize_scalar(err, bounds=(0.01, 0.9), method="bounded")
    prof.perf.long_context_floor = float(res.x)
    return prof


def _residuals(fits: list[RowFit], band_walls: bool = True) -> list[float]:
    """Normalised misfits of simulated cells against their targets. ``band_walls``: the published rows' band
    constraints (in band stays in band, an overshooting row stays at or above the limit)."""
    r: list[float] = []
    for f in fits:
        r.append(math.log(f.speed / f.pub_speed) / TARGETS["speed"])
        r.append(math.log(f.jpt / f.pub_jpt) / TARGETS["jpt"])
        if f.pub_util is not None:
            r.append((f.util - f.pub_util) / TARGETS["util"])
            if band_walls and 0.95 <= f.pub_util <= 0.98:  # the published row sits in the band: so must the twin's
                r.append(max(0.0, 0.953 - f.util, f.util - 0.977) / 0.003)
            elif band_walls and f.pub_util > 0.98:  # the published row overshoots the band (power-capped)
                r.append(max(0.0, 1.0 - f.util) / 0.003)
        if f.pub_reward is not None and f.reward is not None:  # speed and power as the reward combines them
            r.append((f.reward - f.pub_reward) / REWARD_TOLERANCE)
        for name, err in f.errors.items():  # a steep wall just inside each target: trade fit for staying within all
            if err is not None:
                r.append(10.0 * max(0.0, abs(err) / TARGETS[name] - 0.9))
        if f.pub_step_ms is not None and f.step_ms is not None:
            r.append(math.log(f.step_ms / f.pub_step_ms) / 0.05)
    return r


def fit_step_power(profile: TwinProfile, cal: dict, max_nfev: int = 60) -> TwinProfile:
    """Stage 2: step-time and power parameters by least squares on the simulated published protocol."""
    return fit_step_power_targets(profile, published_targets(cal), Protocol.published(), max_nfev=max_nfev)


def fit_step_power_targets(
    profile: TwinProfile,
    targets: list[Target],
    protocol: Protocol,
    max_nfev: int = 60,
    prior: float | None = None,
    band_walls: bool = True,
) -> TwinProfile:
    """``STEP_POWER_PARAMS`` (log scale) by least squares on the simulated cells of ``targets`` (one seed, nominal
    launches). ``prior``: a log-distance of ``prior`` from the start counts as one target tolerance."""
    with needs(FITTING):
        from scipy.optimize import least_squares

    prof = profile.model_copy(deep=True)
    lo = [math.log(LOWER_BOUNDS.get(n, 1e-3)) for _, n in STEP_POWER_PARAMS]
    hi = [math.log(1e3) for _ in STEP_POWER_PARAMS]
    x0 = [
        min(max(math.log(max(getattr(getattr(prof, s), n), 1e-6)), a + 1e-3), b - 1e-3)
        for (s, n), a, b in zip(STEP_POWER_PARAMS, lo, hi)
    ]

    def apply(x: Sequence[float]) -> None:
        for (s, n), v in zip(STEP_POWER_PARAMS, x):
            _set(prof, s, n, math.exp(v))

    def resid(x: Sequence[float]) -> list[float]:
        apply(x)
        r = _residuals(evaluate_targets(prof, targets, protocol, seeds=(0,)), band_walls=band_walls)
        return r + ([(v - v0) / prior for v, v0 in zip(x, x0)] if prior else [])

    res = least_squares(resid, x0, bounds=(lo, hi), diff_step=0.02, max_nfev=max_nfev, x_scale=1.0)
    apply(res.x)
    return prof


POLISH_PARAMS: tuple[tuple[str, str], ...] = (
    ("power", "target_w"),
    ("power", "target_w_per_token"),
    ("power", "target_w_token_sat"),
    ("power", "draft_w"),
    ("power", "overhead_w"),
    ("perf", "target_mem_ms"),
    ("perf", "spec_overhead_ms"),
)


def polish_power(profile: TwinProfile, cal: dict, max_evals: int = 250) -> TwinProfile:
    """Stage 2b: Nelder-Mead over the power levels and the two largest step terms. The power cap and the band
    constraints make the objective kinked, where finite-difference least squares stalls."""
    with needs(FITTING):
        from scipy.optimize import minimize

    prof = profile.model_copy(deep=True)
    x0 = [math.log(getattr(getattr(prof, s), n)) for s, n in POLISH_PARAMS]

    def apply(x: Sequence[float]) -> None:  # Nelder-Mead is unbounded: hold the physical floors
        for (s, n), v in zip(POLISH_PARAMS, x):
            _set(prof, s, n, max(math.exp(v), LOWER_BOUNDS.get(n, 0.0)))

    def err(x: Sequence[float]) -> float:
        apply(x)
        return sum(v * v for v in _residuals(evaluate(prof, cal, seeds=(0, 1, 2))))

    res = minimize(err, x0, method="Nelder-Mead", options={"maxfev": max_evals, "xatol": 1e-3, "fatol": 1e-3})
    apply(res.x)
    return prof


def fit_profile(
    profile: TwinProfile | None = None,
    cal: dict | None = None,
    spreads: tuple[float, ...] = (0.15, 0.2, 0.25, 0.3),
    max_nfev: int = 60,
    log: Callable[..., None] = print,
) -> tuple[TwinProfile, float]:
    """All stages; returns the best profile and its total squared (normalised) error."""
    cal = cal or load_calibration()
    start = profile or load_profile()
    best: tuple[TwinProfile, float] | None = None
    for spread in spreads:
        p = start.model_copy(deep=True)
        p.perf.prompt_quality_spread = spread
        p = fit_acceptance(p, cal)
        p = fit_long_context(p, cal)
        p = fit_step_power(p, cal, max_nfev=max_nfev)
        p = polish_power(p, cal, max_evals=3 * max_nfev)
        err = sum(v * v for v in _residuals(evaluate(p, cal)))
        log(f"spread {spread:.2f}: error {err:.2f}")
        if best is None or err < best[1]:
            best = (p, err)
    assert best is not None
    return best


def run_calibration(
    out: Path | None = None,
    calibration_path: Path | None = None,
    spreads: tuple[float, ...] = (0.25, 0.3, 0.35),
    max_evals: int = 50,
    start: TwinProfile | None = None,
) -> Path:
    """``harness twin calibrate``: fit, write the profile (default: the committed one), print the fit table."""
    from harness.core.jsonl import write_json_atomic

    cal = load_calibration(calibration_path)
    prof, err = fit_profile(profile=start, cal=cal, spreads=spreads, max_nfev=max_evals)
    fits = evaluate(prof, cal)
    prof.calibration = {
        "source": str(calibration_path or "harness/data/calibration.json"),
        "total_sq_error": round(err, 3),
        "rows_within_targets": sum(f.within_targets() for f in fits),
        "rows": len(fits),
        "spreads_tried": list(spreads),
        "max_evals": max_evals,
    }
    target = out or (PROFILES_DIR / f"{DEFAULT_PROFILE}.json")
    write_json_atomic(target, prof.model_dump(mode="json"))
    print_fit_table(fits)
    print(f"wrote {target}")
    return target
