"""Fit a twin profile to a run folder's own rows: ``harness twin calibrate --from RUN_DIR``.

The published fit (``calibrate.py``) pins the twin to one laptop's nine published rows. This module fits the same
physics to any GPU/model's sweep: the board's power limit, memory total and idle power come from the run's
manifest, the acceptance parameters from the rows' accept lengths (analytic), the step-time and power parameters by
least squares on the simulated cells of the run's own protocol (prompts, tokens, requests), each cell's mean over
its repeats. A weak prior keeps parameters the rows do not pin at the start profile's values.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from harness.core.errors import DataError
from harness.grid import SpecConfig
from harness.runs.rows import SweepRow
from harness.twin.fit.calibrate import (
    Protocol,
    RowFit,
    Target,
    evaluate_targets,
    fit_accept_targets,
    fit_step_power_targets,
    published_reward,
)
from harness.twin.profile import TwinProfile

ACCEPT_PRIOR = 0.3
"""Acceptance parameters: a move of 0.3 from the start costs as much as one tolerance of accept length (1 %)."""
STEP_POWER_PRIOR = 1.0
"""Step/power parameters: a factor e from the start costs as much as one target tolerance (speed 5 %, ...)."""


def row_utilization(row: SweepRow, fallback_limit_w: float | None) -> float | None:
    """Average power over the cap the row ran under (the reward's utilization)."""
    limit = row.power_limit_w or fallback_limit_w
    if row.avg_power_watts is None or not limit:
        return None
    return float(row.avg_power_watts) / float(limit)


def usable(row: SweepRow) -> bool:
    """A measured row the fit can use: no error, a valid window, speed and power present, and an unlocked SM clock
    (the fit is of the board at its own clocks; a ``--sm-clocks`` pass measures the clock law, docs/smclocks.md)."""
    return (
        not row.is_error
        and row.window_valid is not False
        and bool(row.speed_tok_s)
        and row.avg_power_watts is not None
        and bool(row.joules_per_token)
        and row.sm_clock_locked_mhz is None
    )


@dataclass(frozen=True)
class CellMeans:
    """One cell's usable rows: means over repeats and the per-row plain rewards (empty without a baseline)."""

    batch_size: int
    config: tuple[int, int, int]
    n: int
    accept: float
    speed: float
    jpt: float
    util: float | None
    step_ms: float | None
    plain_rewards: tuple[float, ...]
    """Each row's published reward without the throttle and thermal multipliers: what the model's figures score (the
    flag, a coin flip at the cap, is learned apart in ``harness.sweep.active.throttle_flags``; fitting speed and power to a flagged
    row's x0.3 would bend them)."""


def baseline_speeds(rows: Sequence[SweepRow]) -> dict[int, float]:
    """Per batch size, the mean speed of the usable baseline rows."""
    by: dict[int, list[float]] = defaultdict(list)
    for r in rows:
        if r.is_baseline and usable(r):
            by[r.batch_size].append(float(r.speed_tok_s or 0.0))
    return {bs: statistics.fmean(v) for bs, v in by.items()}


def row_reward(
    row: SweepRow,
    baseline: float | None,
    fallback_limit_w: float | None,
    *,
    throttle: bool = True,
    thermal: bool = True,
) -> float | None:
    """The published reward of a row (an error row scores 0; None without a baseline or a utilization).
    ``throttle``/``thermal``: apply the throttle flag's and the temperature's multipliers (both off: the plain
    reward of speed and utilization alone, what the model's figures score)."""
    if row.is_error:
        return 0.0
    u = row_utilization(row, fallback_limit_w)
    if baseline is None or u is None or not row.speed_tok_s:
        return None
    return published_reward(
        u, float(row.speed_tok_s), baseline, row.gpu_temp_c if thermal else None, throttle and bool(row.gpu_throttling)
    )


def cell_means(rows: Sequence[SweepRow], fallback_limit_w: float | None) -> list[CellMeans]:
    """Usable rows grouped by (batch size, config), in (batch size, config) order."""
    base = baseline_speeds(rows)
    groups: dict[tuple[int, tuple[int, int, int]], list[SweepRow]] = defaultdict(list)
    for r in rows:
        if usable(r):
            groups[(r.batch_size, r.config.as_tuple())].append(r)
    out = []
    for (bs, cfg), rs in sorted(groups.items()):
        utils = [u for u in (row_utilization(r, fallback_limit_w) for r in rs) if u is not None]
        steps = [r.step_time_s for r in rs if r.step_time_s]
        rewards = [
            x
            for x in (row_reward(r, base.get(bs), fallback_limit_w, throttle=False, thermal=False) for r in rs)
            if x is not None
        ]
        out.append(
            CellMeans(
                bs,
                cfg,
                len(rs),
                accept=statistics.fmean(r.accept_length or 1.0 for r in rs) if cfg != (0, 0, 0) else 1.0,
                speed=statistics.fmean(float(r.speed_tok_s or 0.0) for r in rs),
                jpt=statistics.fmean(float(r.joules_per_token or 0.0) for r in rs),
                util=statistics.fmean(utils) if utils else None,
                step_ms=1000 * statistics.fmean(steps) if len(steps) == len(rs) else None,
                plain_rewards=tuple(rewards),
            )
        )
    return out


def targets_of(cells: Sequence[CellMeans]) -> list[Target]:
    """Fit targets: each cell's means, with its mean plain reward where its batch size has a baseline cell."""
    with_base = {c.batch_size for c in cells if c.config == (0, 0, 0)}
    return [
        Target(
            c.batch_size,
            c.config,
            accept=c.accept,
            speed=c.speed,
            jpt=c.jpt,
            util=c.util,
            step_ms=c.step_ms,
            reward=statistics.fmean(c.plain_rewards) if c.plain_rewards and c.batch_size in with_base else None,
        )
        for c in cells
    ]


def with_device(profile: TwinProfile, manifest: dict[str, Any], name: str | None = None) -> TwinProfile:
    """The start profile with the board the run measured: power limit, memory total, idle power (when recorded)."""
    prof = profile.model_copy(deep=True)
    d = prof.device
    limit = manifest.get("power_limit_w")
    if limit:
        d.power_limit_w = d.power_management_limit_w = float(limit)
        d.power_limit_min_w = min(d.power_limit_min_w, float(limit))
        d.power_limit_max_w = max(d.power_limit_max_w, float(limit))
    if manifest.get("memory_total_mb"):
        d.memory_total_mb = int(manifest["memory_total_mb"])
    if manifest.get("idle_power_w"):
        d.idle_power_w = float(manifest["idle_power_w"])
    if name:
        prof.name = name
        d.name = f"{name} (twin fitted)"
    return prof


def fit_cells(start: TwinProfile, targets: list[Target], protocol: Protocol, max_nfev: int = 30) -> TwinProfile:
    """Acceptance first (analytic), then step time and power (simulated), both held near ``start`` by a prior."""
    accept = [(SpecConfig(*t.config), t.batch_size, t.accept, 0.01) for t in targets if t.config != (0, 0, 0)]
    prof = fit_accept_targets(start, accept, protocol, prior=ACCEPT_PRIOR) if accept else start
    if not targets:
        return prof
    return fit_step_power_targets(prof, targets, protocol, max_nfev=max_nfev, prior=STEP_POWER_PRIOR, band_walls=False)


def fit_errors(profile: TwinProfile, targets: list[Target], protocol: Protocol) -> list[RowFit]:
    """The fitted model against every target (mean of 3 seeds): per-cell errors against the twin targets."""
    return evaluate_targets(profile, targets, protocol, seeds=(0, 1, 2))


def split_holdout(cells: Sequence[CellMeans], every: int) -> tuple[list[CellMeans], list[CellMeans]]:
    """(fitted, held out): every ``every``-th spec cell is held out (baselines always fitted: rewards need them)."""
    if every <= 1:
        return list(cells), []
    fitted, held = [], []
    spec_seen = 0
    for c in cells:
        if c.config != (0, 0, 0):
            spec_seen += 1
            if spec_seen % every == 0:
                held.append(c)
                continue
        fitted.append(c)
    return fitted, held


def require_cells(cells: Sequence[CellMeans], where: str) -> None:
    if not cells:
        raise DataError(
            f"{where}: no usable rows to fit (every row is an error or has an invalid window)",
            fix="fit from a run with measured cells (harness sweep ...)",
        )


def load_run(run_dir: Path) -> tuple[list[SweepRow], dict[str, Any], Protocol]:
    """A run folder's latest rows, its manifest and the protocol its cells ran."""
    from harness.runs.manifest import read_manifest, read_options
    from harness.runs.plan import sized_prompts
    from harness.runs.rows import RowStore
    from harness.world.bench import load_prompts

    manifest = read_manifest(run_dir).to_json()
    opts = read_options(run_dir)
    rows = RowStore(run_dir).latest()
    sized = sized_prompts(manifest.get("preflight"))  # the band probe's counts, when it sized the cells
    protocol = Protocol(
        tuple(load_prompts(opts.prompts_file)), opts.output_tokens, opts.num_prompts, tuple(sorted(sized.items()))
    )
    return rows, manifest, protocol


def calibrate_from_run(
    run_dir: Path, out: Path | None, start: TwinProfile, holdout_every: int = 0, max_evals: int = 30
) -> tuple[Path, list[RowFit], list[RowFit]]:
    """``harness twin calibrate --from RUN_DIR``: fit, write the profile (default ``RUN_DIR/twin_profile.json``),
    print the per-cell fit error of the fitted and the held-out cells; returns (path, fitted, held-out)."""
    from harness.core.jsonl import write_json_atomic
    from harness.twin.fit.report import fit_table, print_fit_table

    rows, manifest, protocol = load_run(run_dir)
    cells = cell_means(rows, manifest.get("power_limit_w"))
    require_cells(cells, str(run_dir))
    fit_set, held_set = split_holdout(cells, holdout_every)
    name = "fitted-" + str(manifest.get("hardware") or manifest["run_id"]).replace(":", "-").replace("/", "-")
    prof = fit_cells(with_device(start, manifest, name), targets_of(fit_set), protocol, max_nfev=max_evals)
    fitted, held = fit_errors(prof, targets_of(fit_set), protocol), fit_errors(prof, targets_of(held_set), protocol)
    prof.about = f"fitted by harness twin calibrate --from {run_dir} ({len(fit_set)} cells; start profile {start.name})"
    prof.calibration = {
        "source": str(run_dir),
        "run_id": manifest.get("run_id"),
        "hardware": manifest.get("hardware"),
        "start_profile": start.name,
        "max_evals": max_evals,
        "holdout_every": holdout_every,
        "cells_fitted": len(fitted),
        "cells_held_out": len(held),
        "fitted_within_targets": sum(f.within_targets() for f in fitted),
        "held_out_within_targets": sum(f.within_targets() for f in held),
        "rows": [dict(r, held_out=False) for r in fit_table(fitted)]
        + [dict(r, held_out=True) for r in fit_table(held)],
    }
    target = out or (run_dir / "twin_profile.json")
    write_json_atomic(target, prof.model_dump(mode="json"))
    print_fit_table(fitted, title=f"fitted cells: twin ({prof.name}) vs the run's rows (mean over repeats)", ref="run")
    if held:
        print_fit_table(held, title="held-out cells (not fitted)", ref="run")
    print(
        f"wrote {target}: {prof.calibration['fitted_within_targets']}/{len(fitted)} fitted and "
        f"{prof.calibration['held_out_within_targets']}/{len(held)} held-out cells within the twin targets "
        "(speed 5 %, J/token 10 %, accept 3 %, utilization 0.03)"
    )
    return target, fitted, held
