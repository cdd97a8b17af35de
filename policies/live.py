"""Live A/B: re-measure the baseline, the reference and every distinct pick on a live engine, with repeated trials.

Per batch size the arms are the baseline (0,0,0), the reference (3,4,8) and every config some algorithm picked
(deduplicated across algorithms). Every (trial, batch size, config) cell gets a fresh server and the harness's own
bench (``harness.world.bench.run_cell``); all cells run in one seeded random order. A cell's reward uses the published
definition with the baseline measured in the same trial at that batch size (paired design); a failed cell scores 0.
Reported per algorithm: mean reward per batch size and averaged over batch sizes, each with a t-based 95% CI over
trials, and the paired delta to the reference with its CI.
"""

from __future__ import annotations

import shlex
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
from pydantic import BaseModel

from harness.core.errors import HarnessError, UsageError
from harness.core.extras import needs
from harness.core.jsonl import write_json_atomic
from harness.grid import BASELINE, REFERENCE, SpecConfig, parse_batch_sizes
from harness.runs.rows import SweepRow, throttling_flags
from policies.base import load_picks, read_train_meta, reward_options_of
from policies.contract import RewardOptions, row_reward

LIVE_FILE = "live.json"


class LiveCell(BaseModel):
    order: int
    trial: int
    batch_size: int
    config: list[int]
    speed_tok_s: float | None = None
    avg_power_watts: float | None = None
    utilization: float | None = None
    gpu_temp_c: float | None = None
    throttled: bool | None = None
    baseline_speed: float | None = None
    reward: float | None = None
    error: str | None = None


class LiveArm(BaseModel):
    algo: str
    batch_size: int
    config: list[int]
    rewards: list[float]
    mean_reward: float
    ci: tuple[float, float]
    delta_reference: float
    delta_ci: tuple[float, float]


class LiveAlgo(BaseModel):
    algo: str
    avg_reward: float
    avg_ci: tuple[float, float]
    delta_reference: float
    delta_ci: tuple[float, float]


class LiveResult(BaseModel):
    engine: str
    hardware: str
    power_limit_w: float
    trials: int
    seed: int
    batch_sizes: list[int]
    cells: list[LiveCell]
    per_bs: list[LiveArm]
    per_algo: dict[str, LiveAlgo]
    seconds: float


def t_ci(values: list[float], level: float = 0.95) -> tuple[float, float]:
    """Student-t confidence interval of the mean (degenerate for fewer than 2 values)."""
    v = np.asarray(values, dtype=np.float64)
    if len(v) < 2:
        return (float(v.mean()), float(v.mean())) if len(v) else (float("nan"), float("nan"))
    with needs("the live trial's confidence intervals"):
        from scipy.stats import t

    half = float(t.ppf(0.5 + level / 2, len(v) - 1) * v.std(ddof=1) / np.sqrt(len(v)))
    return float(v.mean() - half), float(v.mean() + half)


def arms(picks: dict[str, dict[int, SpecConfig]], batch_sizes: list[int]) -> dict[int, list[SpecConfig]]:
    """Per batch size: baseline, reference, then every distinct pick (first-seen order)."""
    out: dict[int, list[SpecConfig]] = {}
    for bs in batch_sizes:
        configs = [BASELINE, REFERENCE, *(p[bs] for p in picks.values() if bs in p)]
        out[bs] = list(dict.fromkeys(configs))
    return out


def schedule(per_bs: dict[int, list[SpecConfig]], trials: int, seed: int) -> list[tuple[int, int, SpecConfig]]:
    """Every (trial, batch size, config) once, in one seeded random order."""
    cells = [(t, bs, c) for t in range(trials) for bs, configs in per_bs.items() for c in configs]
    order = np.random.default_rng(seed).permutation(len(cells))
    return [cells[i] for i in order]


def score_cells(cells: list[LiveCell], options: RewardOptions) -> None:
    """Fill each cell's reward with the baseline of the same trial and batch size."""
    base = {
        (c.trial, c.batch_size): c.speed_tok_s
        for c in cells
        if c.config == BASELINE.as_list() and c.error is None and c.speed_tok_s
    }
    for c in cells:
        c.baseline_speed = base.get((c.trial, c.batch_size))
        if c.error is not None or c.baseline_speed is None or c.speed_tok_s is None or c.avg_power_watts is None:
            c.reward = 0.0
            continue
        row = SweepRow(hardware="live", index=0, batch_size=c.batch_size, steps=c.config[0], topk=c.config[1], num_draft_tokens=c.config[2],
                       is_baseline=c.config == BASELINE.as_list(), speed_tok_s=c.speed_tok_s, avg_power_watts=c.avg_power_watts,
                       gpu_temp_c=c.gpu_temp_c, gpu_throttling=c.throttled)  # fmt: skip
        c.reward = row_reward(row, c.baseline_speed, options)


def summarise(
    cells: list[LiveCell], picks: dict[str, dict[int, SpecConfig]], batch_sizes: list[int], trials: int
) -> tuple[list[LiveArm], dict[str, LiveAlgo]]:
    reward = {(c.trial, c.batch_size, tuple(c.config)): float(c.reward or 0.0) for c in cells}
    named = {
        "baseline": {bs: BASELINE for bs in batch_sizes},
        "reference": {bs: REFERENCE for bs in batch_sizes},
        **picks,
    }
    per_bs: list[LiveArm] = []
    per_algo: dict[str, LiveAlgo] = {}
    for algo, p in named.items():
        by_trial = np.full((trials, len(batch_sizes)), np.nan)
        ref_trial = np.full((trials, len(batch_sizes)), np.nan)
        for j, bs in enumerate(batch_sizes):
            if bs not in p:
                continue
            r = [reward[(t, bs, p[bs].as_tuple())] for t in range(trials)]
            ref = [reward[(t, bs, REFERENCE.as_tuple())] for t in range(trials)]
            by_trial[:, j], ref_trial[:, j] = r, ref
            d = list(np.subtract(r, ref))
            per_bs.append(LiveArm(algo=algo, batch_size=bs, config=p[bs].as_list(), rewards=r, mean_reward=float(np.mean(r)), ci=t_ci(r),
                                  delta_reference=float(np.mean(d)), delta_ci=t_ci(d)))  # fmt: skip
        avg = list(np.nanmean(by_trial, axis=1))
        delta = list(np.nanmean(by_trial - ref_trial, axis=1))
        per_algo[algo] = LiveAlgo(
            algo=algo,
            avg_reward=float(np.mean(avg)),
            avg_ci=t_ci(avg),
            delta_reference=float(np.mean(delta)),
            delta_ci=t_ci(delta),
        )
    return per_bs, per_algo


def _measure(world: Any, bs: int, cfg: SpecConfig, settings: Any, log_stem: Path) -> dict[str, Any]:
    from harness.world.bench import CellError, run_cell

    try:
        server, _attempts = world.launcher.launch_with_ladder(cfg, bs, log_stem=log_stem)
    except HarnessError as exc:
        return {"error": f"launch failed: {exc.message}"}
    try:
        with server:
            r = run_cell(server, bs, settings, world.telemetry, world.clock)
    except CellError as exc:
        return {"error": f"{exc.kind}: {exc.message}"}
    after = r.after
    any_bit, power_thermal = throttling_flags(after.clock_event_reasons if after is not None else None)
    return {"speed_tok_s": r.speed_tok_s, "avg_power_watts": r.avg_power_watts,
            "gpu_temp_c": after.temperature_c if after is not None else None,
            "throttled_any": any_bit, "throttled_pt": power_thermal}  # fmt: skip


def run_live(
    models: str | Path,
    *,
    engine: str = "twin",
    trials: int = 3,
    seed: int = 0,
    batch_sizes: str | None = None,
    time_scale: float = 20.0,
    sampler_url: str | None = None,
    output_tokens: int | None = None,
    progress: Callable[[str], None] | None = None,
) -> LiveResult:
    """Run the live A/B for the picks in ``models/picks.json``; write ``models/live.json``."""
    from harness.world.bench import BenchSettings
    from harness.world.world import open_world

    if trials < 1:
        raise UsageError(f"--trials must be >= 1, got {trials}", fix="use --trials 3 for a confidence interval")
    models = Path(models)
    picks = load_picks(models)
    known = sorted({bs for p in picks.values() for bs in p})
    wanted = parse_batch_sizes(batch_sizes) if batch_sizes else known
    missing = [b for b in wanted if b not in known]
    if missing:
        raise UsageError(f"no picks at batch sizes {missing}", fix=f"picks exist for {known}")
    train_meta = read_train_meta(models)
    options = reward_options_of(models, train_meta)
    plan = schedule(arms(picks, wanted), trials, seed)
    settings = BenchSettings() if output_tokens is None else BenchSettings(output_tokens=output_tokens)
    t0 = time.perf_counter()
    cells: list[LiveCell] = []
    run_dir = models / "live"
    with open_world(
        engine, sampler_url=sampler_url, time_scale=time_scale if engine == "twin" else 1.0, seed=seed, run_dir=run_dir
    ) as world:
        if (
            world.power_limit_w and options.limit_source == "row"
        ):  # "fixed": the --power-limit the policies trained with
            options = options.model_copy(update={"power_limit_w": float(world.power_limit_w)})
        for order, (trial, bs, cfg) in enumerate(plan):
            m = _measure(world, bs, cfg, settings, run_dir / "logs" / f"t{trial}-bs{bs}-{cfg.label.replace(':', '-')}")
            throttled = m.get("throttled_pt") if options.throttle == "power_thermal" else m.get("throttled_any")
            cells.append(LiveCell(order=order, trial=trial, batch_size=bs, config=cfg.as_list(), speed_tok_s=m.get("speed_tok_s"),
                                  avg_power_watts=m.get("avg_power_watts"), gpu_temp_c=m.get("gpu_temp_c"), throttled=throttled,
                                  error=m.get("error"),
                                  utilization=None if m.get("avg_power_watts") is None else m["avg_power_watts"] / options.power_limit_w))  # fmt: skip
            if progress is not None:
                c = cells[-1]
                what = c.error or f"speed {c.speed_tok_s or 0:.1f} tok/s, util {c.utilization or 0:.3f}"
                progress(f"[{order + 1}/{len(plan)}] trial {trial} bs {bs} {cfg}: {what}")
        hardware = world.hardware
    score_cells(cells, options)
    per_bs, per_algo = summarise(cells, picks, wanted, trials)
    result = LiveResult(engine=engine, hardware=hardware, power_limit_w=options.power_limit_w, trials=trials, seed=seed, batch_sizes=wanted,
                        cells=cells, per_bs=per_bs, per_algo=per_algo, seconds=round(time.perf_counter() - t0, 2))  # fmt: skip
    write_json_atomic(models / LIVE_FILE, result.model_dump())
    return result


def launch_command(
    models: str | Path,
    algo: str,
    batch_size: int,
    port: int = 30000,
    sglang_version: str = "auto",
    trust_artifacts: bool = False,
) -> str:
    """The sglang launch command (env + argv) for ``algo``'s pick at ``batch_size``, in the flags of
    ``sglang_version`` (``auto``: the sglang installed for this interpreter, else the published 0.5.2)."""
    import sys

    from harness.engine.sglang_argv import ENGINE_ENV, build_argv
    from harness.engine.spec import EngineSpec
    from harness.engine.version import check_supported, detect_installed

    if sglang_version == "auto":
        try:
            version, whence = detect_installed(sys.executable), "installed here"
        except HarnessError:
            version, whence = "0.5.2", "the published version; none installed here: --sglang-version V for another"
    else:
        version, whence = check_supported(sglang_version, engine="sglang"), "--sglang-version"

    picks = load_picks(models)
    if algo not in picks:
        raise UsageError(f"no picks for algorithm {algo!r} in {models}", fix="trained: " + ", ".join(picks))
    if batch_size not in picks[algo]:
        raise UsageError(
            f"{algo} has no pick at batch size {batch_size}", fix=f"picks exist for batch sizes {sorted(picks[algo])}"
        )
    cfg = picks[algo][batch_size]
    from policies.base import load_policy

    load_policy(models, algo, trust=trust_artifacts)  # a missing, corrupt or changed artifact is not recommended
    spec = EngineSpec.build("sglang", sglang_version=version)  # the one builder checks the range
    argv = ["python", *build_argv(spec, cfg, batch_size, 0.65, port)[1:]]
    env = " ".join(f"{k}={v}" for k, v in ENGINE_ENV.items())
    return f"# {algo} at batch size {batch_size}: {cfg} (sglang {version}, {whence})\n{env} {shlex.join(argv)}"
