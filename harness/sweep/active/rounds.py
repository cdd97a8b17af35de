"""The active sweep's rounds on a ``SweepRunner``: calibrate, fit, predict, measure what can change the recipe.

Every decision is a function of the run's rows (each fit starts from the same start profile), so a resumed run
(``harness sweep --resume``) recomputes the same state from the rows it finds and continues the plan; the rounds of
every session are kept in the manifest's ``active`` record. Every measured cell is an ordinary row of the planned
grid; a repeat is the cell's next repeat index.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.core.jsonl import write_json_atomic
from harness.runs.folder import PROFILE_FILE, RECIPE_FILE
from harness.runs.rows import SweepRow
from harness.sweep.active.calibset import calibration_cells
from harness.sweep.active.corner import Corner, low_step_corner
from harness.sweep.active.cost import CellCost, spent
from harness.sweep.active.decide import Action, Pick, next_actions, picks
from harness.sweep.active.estimate import CellEstimate, ModelError, estimate_cells
from harness.sweep.active.options import budget_of
from harness.sweep.active.throttle_flags import FlagModel
from harness.twin.fit.calibrate import Protocol
from harness.twin.fit.from_run import cell_means, fit_cells, fit_errors, targets_of, with_device
from harness.twin.fit.report import fit_table
from harness.twin.profile import TwinProfile, load_profile

CELLS_PER_ROUND = 3
"""Cells measured between two refits (a refit costs seconds of CPU, not GPU time)."""
FIT_EVALS = 6
"""Least-squares evaluations per refit (each simulates every measured cell; the fit starts from the start profile)."""
COST_SAFETY = 1.2
"""A cell is started only if the spent GPU-seconds plus 1.2 x its predicted cost stay within the budget."""


@dataclass
class State:
    """One assessment: the fitted profile, every cell's estimate, the model error, GPU-seconds and the budget."""

    rows: list[SweepRow]
    profile: TwinProfile
    cells: list[CellEstimate]
    error: ModelError
    spent: CellCost
    full_grid_s: float
    budget_s: float
    headroom: float | None
    """The share the budget was shrunk by for the cost model's error (None for ``--budget-s``)."""
    cost_error: float
    flags: FlagModel
    corner: Corner
    """The low-step cells worth measuring because the fitted draft head departs from the start profile's."""


class ActiveSweep:
    """Runs ``runner``'s plan actively (``runner.opts.strategy == "active"``)."""

    def __init__(self, runner: Any, start: TwinProfile | None = None) -> None:
        self.runner = runner
        self.opts = runner.opts
        self.protocol = Protocol(
            tuple(runner.settings.prompts),
            self.opts.output_tokens,
            self.opts.num_prompts,
            tuple(sorted(runner.settings.num_prompts_by_bs.items())),
        )
        manifest = runner.manifest
        slug = str(manifest.hardware or "gpu").replace(":", "-").replace("/", "-")
        self.start = with_device(start or load_profile(), manifest.to_json(), name=f"fitted-{slug}")
        self.limit_w = manifest.power_limit_w
        world = runner.world  # the after-run snapshot reads the last sampler period before the window's end
        self.snapshot_period_s = world.clock.scale / float(getattr(world, "sampler_rate_hz", 10.0) or 10.0)
        self.cells_by_key = {(c.repeat, c.batch_size, c.config.as_tuple()): c for c in runner.cells}
        if manifest.active is None:
            manifest.active = {"rounds": []}
        self.record: dict[str, Any] = manifest.active
        self.record.update(
            strategy="active",
            budget_fraction=self.opts.budget,
            budget_s_given=self.opts.budget_s,
            start_profile=(start or load_profile()).name,
            cells_per_round=CELLS_PER_ROUND,
        )

    # --- state ----------------------------------------------------------------------------------------------------
    def assess(self) -> State:
        rows = self.runner.store.latest()
        profile = fit_cells(self.start, targets_of(cell_means(rows, self.limit_w)), self.protocol, max_nfev=FIT_EVALS)
        cells, err, cost_model, flags = estimate_cells(
            profile,
            rows,
            self.opts.spec_configs,
            self.opts.batch_sizes,
            self.protocol,
            self.opts.mem_fractions,
            self.limit_w,
            self.snapshot_period_s,
        )
        full = sum(c.cost.total_s for c in cells) * self.opts.repeats
        # every round: the latest prediction of the full grid, less the cost model's error (a function of the rows,
        # so a resumed run recomputes the same budget)
        budget, room = budget_of(self.opts, full, cost_model.rel_error)
        return State(
            rows,
            profile,
            cells,
            err,
            spent(rows),
            full,
            budget,
            room,
            cost_model.rel_error,
            flags,
            low_step_corner(profile, self.start, cells),
        )

    def _free_repeat(self, bs: int, cfg: tuple[int, int, int], done: set[str]) -> int | None:
        for r in range(self.opts.repeats):
            cell = self.cells_by_key.get((r, bs, cfg))
            if cell is not None and cell.cell_id not in done:
                return r
        return None

    def choose(self, state: State, actions: list[Action]) -> list[tuple[Action, int]]:
        """Up to ``CELLS_PER_ROUND`` actions (with their repeat index) whose predicted cost fits the budget."""
        done = {r.key for r in state.rows}
        costs = {(c.batch_size, c.config): c.cost.total_s for c in state.cells}
        projected = state.spent.total_s
        chosen: list[tuple[Action, int]] = []
        for a in actions:
            repeat = self._free_repeat(a.batch_size, a.config, done)
            cost = costs[(a.batch_size, a.config)]
            if repeat is None or projected + COST_SAFETY * cost > state.budget_s:
                continue
            chosen.append((a, repeat))
            projected += cost
            if len(chosen) == CELLS_PER_ROUND:
                break
        return chosen

    # --- rounds ---------------------------------------------------------------------------------------------------
    def run(self) -> None:
        calib = [
            self.cells_by_key[(0, bs, c.as_tuple())]
            for bs, c in calibration_cells(self.opts.spec_configs, self.opts.batch_sizes)
        ]
        self.runner.run_cells(calib)
        self.record["calibration_cells"] = [c.cell_id for c in calib]
        while True:
            state = self.assess()
            actions = next_actions(state.cells, self.opts.repeats, state.corner.cells, state.corner.reason)
            if not actions:
                stop = "settled"
                break
            chosen = self.choose(state, actions)
            if not chosen:
                stop = "budget"
                break
            self._log_round(state, chosen)
            before = len(state.rows)
            self.runner.run_cells([self.cells_by_key[(r, a.batch_size, a.config)] for a, r in chosen])
            if len(self.runner.store.latest()) == before:
                stop = "no_progress"  # nothing new was written (cannot happen unless the store refuses rows)
                break
        self.finish(state, stop)

    def _log_round(self, state: State, chosen: list[tuple[Action, int]]) -> None:
        rnd = {
            "spent_s": round(state.spent.total_s, 2),
            "full_grid_predicted_s": round(state.full_grid_s, 2),
            **_budget_record(state),
            "cells": [
                {"batch_size": a.batch_size, "config": list(a.config), "repeat": r, "reason": a.reason}
                for a, r in chosen
            ],
        }
        self.record["rounds"].append(rnd)
        self.runner.manifest.save(self.runner.run_dir)
        for a, r in chosen:
            self.runner.console.line(f"active: bs {a.batch_size} {a.config} repeat {r}: {a.reason}")

    # --- results --------------------------------------------------------------------------------------------------
    def finish(self, state: State, stop: str) -> None:
        run_dir: Path = self.runner.run_dir
        chosen = picks(state.cells, measured_only=True)
        write_json_atomic(run_dir / RECIPE_FILE, recipe_json(chosen, state))
        prof = state.profile.model_copy(deep=True)
        targets = targets_of(cell_means(state.rows, self.limit_w))
        prof.about = (
            f"fitted by harness sweep --strategy active to {len(targets)} measured cells of run {self.runner.run_id}"
        )
        prof.calibration = {
            "source": str(run_dir),
            "run_id": self.runner.run_id,
            "start_profile": self.record["start_profile"],
            "rows": fit_table(fit_errors(prof, targets, self.protocol)),
        }
        write_json_atomic(run_dir / PROFILE_FILE, prof.model_dump(mode="json"))
        frac = state.spent.total_s / state.full_grid_s if state.full_grid_s > 0 else None
        # the one yardstick (issue 48 item 5): everything the run spent against the published protocol's full grid on
        # this board and models, in the same accounting (harness.sweep.plan_estimate); the budget is still held to
        # this run's own predicted grid
        published = float((self.runner.manifest.plan or {}).get("published_grid_gpu_s") or 0.0)
        all_spent = self.runner.gpu_time.total
        of_published = all_spent / published if published > 0 else None
        rounds = self.record["rounds"]  # the budget the last measured cells were held to (a later one may be lower)
        held_to = (
            {k: rounds[-1][k] for k in _budget_record(state) if k in rounds[-1]} if rounds else _budget_record(state)
        )
        self.record.update(
            **held_to,
            cost_model_error=round(state.cost_error, 4),
            flag_model={
                "ceiling": state.flags.ceiling,
                "offset": state.flags.offset,
                "width": state.flags.width,
                "rows": state.flags.rows,
            },
            stop_reason=stop,
            recipe=RECIPE_FILE,
            profile=PROFILE_FILE,
            cells_measured=len(state.rows),
            cells_planned=len(self.runner.cells),
            gpu_seconds={
                "launch": round(state.spent.launch_s, 2),
                "measure": round(state.spent.measure_s, 2),
                "total": round(state.spent.total_s, 2),
            },
            full_grid_predicted_s=round(state.full_grid_s, 2),
            fraction_of_full_grid=None if frac is None else round(frac, 4),
            gpu_time_total_s=round(all_spent, 2),
            published_grid_gpu_s=round(published, 2) if published else None,
            fraction_of_published_grid=None if of_published is None else round(of_published, 4),
            model_error={
                "speed_rel": round(state.error.speed_rel, 4),
                "util_abs": round(state.error.util_abs, 4),
                "reward_noise_sd": round(state.error.noise_sd, 4),
            },
        )
        self.runner.manifest.save(run_dir)
        console = self.runner.console
        console.line(
            f"active: stopped ({stop}) after {len(state.rows)} of {len(self.runner.cells)} planned cells; "
            f"GPU-seconds {state.spent.total_s:.1f} (launch {state.spent.launch_s:.1f} + measure "
            f"{state.spent.measure_s:.1f}) of a predicted full grid of {state.full_grid_s:.1f}"
            + (f" ({100 * frac:.1f} %)" if frac is not None else "")
            + f", budget {held_to['budget_s']:.1f}"
            + (
                f"; everything spent ({all_spent:.1f} GPU-s, launches, settles and teardowns too) is "
                f"{100 * of_published:.1f} % of the published protocol's grid ({published:.1f})"
                if of_published is not None
                else ""
            )
        )
        for bs, p in chosen.items():
            console.line(
                f"active: recipe bs {bs}: {p.leader.config} reward {p.leader.reward:.3f} "
                f"({p.leader.measured} rows) confidence {p.confidence:.2f}"
            )


def _budget_record(state: State) -> dict[str, Any]:
    """A round's budget: the GPU-seconds allowed, the full-grid prediction it came from, the headroom taken."""
    return {
        "budget_s": round(state.budget_s, 2),
        "budget_from_full_grid_predicted_s": round(state.full_grid_s, 2),
        "budget_headroom": None if state.headroom is None else round(state.headroom, 4),
    }


def recipe_json(chosen: dict[int, Pick], state: State) -> dict[str, Any]:
    """``{"<bs>": {"config": [s,k,d], "confidence", "predicted": {...}, "measured": {...}, "settled", "open_rivals"}}`` (the leader among measured cells)."""
    out: dict[str, Any] = {}
    for bs, p in chosen.items():
        c, pred = p.leader, p.leader.prediction
        out[str(bs)] = {
            "config": list(c.config),
            "confidence": round(p.confidence, 4),
            "predicted": {
                "reward": round(c.predicted_reward, 4),
                "speed_tok_s": round(pred.speed, 2),
                "utilization": round(pred.util, 4),
                "joules_per_token": round(pred.jpt, 5),
                "accept_length": round(pred.accept, 3),
            },
            "measured": {
                "rows": c.measured,
                "reward_mean": round(c.reward, 4) if c.measured else None,
                "reward_se": round(c.sigma, 4) if c.measured else None,
            },
            "settled": not p.open_rivals,
            "open_rivals": [list(r.config) for r in p.open_rivals],
        }
    return out
