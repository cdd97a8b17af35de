"""Usage checks of the active strategy's options (before any run folder exists)."""

from __future__ import annotations

from typing import Any

from harness.core.errors import UsageError
from harness.core.extras import require

DEFAULT_BUDGET = 0.2
"""``--strategy active`` without a budget: a fifth of the predicted full grid's GPU-seconds."""


def check_active_options(opts: Any) -> None:
    """``--budget``/``--budget-s`` only with ``--strategy active``, one of them; a plan the strategy can work on."""
    if opts.strategy != "active":
        raise UsageError(
            "--budget and --budget-s only apply to --strategy active", fix="add --strategy active, or drop the budget"
        )
    if opts.budget is not None and opts.budget_s is not None:
        raise UsageError(
            "--budget (a fraction of the full grid) and --budget-s (seconds) are two ways to say the same",
            fix="pass one of them",
        )
    if opts.launch_per != "cell":
        raise UsageError(
            "--strategy active measures single cells, so it launches a server per cell", fix="drop --launch-per config"
        )
    if getattr(opts, "executor", "local") != "local":
        raise UsageError(
            "--strategy active picks a few cells per round from the rows so far; it does not run on --executor ray yet",
            fix="use --executor local (the default) with --strategy active",
        )
    if opts.power_caps or opts.sm_clocks:
        flag = "--power-caps" if opts.power_caps else "--sm-clocks"
        raise UsageError(
            f"--strategy active settles one recipe per GPU setting; it does not sweep {flag}",
            fix="run one active sweep per setting (set it beforehand), or use --strategy grid",
        )
    if (0, 0, 0) not in [tuple(c) for c in opts.configs]:
        raise UsageError(
            "--strategy active needs the baseline (0,0,0) in the grid: rewards are speed-ups over it",
            fix="include 0:0:0 in --configs (the default grid has it)",
        )
    if not any(tuple(c) != (0, 0, 0) for c in opts.configs):
        raise UsageError(
            "--strategy active needs at least one speculative config to choose from",
            fix="add configs to --configs, e.g. 3:4:8,3:2:4",
        )
    require("scipy", "--strategy active (its rounds fit the twin to the rows)")  # before the first cell, not at round 1


HEADROOM_MIN = 0.03
HEADROOM_MAX = 0.15


def budget_of(opts: Any, predicted_full_s: float, cost_error: float = 0.0) -> tuple[float, float | None]:
    """(the GPU-seconds the active sweep may spend, the headroom taken). ``--budget-s`` is taken as given (no
    headroom); ``--budget F`` is F of the predicted full grid shrunk by the cost model's error (``headroom``): the
    full grid is a prediction, and the fraction must hold against the real one."""
    if opts.budget_s is not None:
        return float(opts.budget_s), None
    fraction = opts.budget if opts.budget is not None else DEFAULT_BUDGET
    room = headroom(cost_error)
    return fraction * predicted_full_s / (1.0 + room), room


def headroom(cost_error: float) -> float:
    """The share the predicted full grid may be too high by: the cost model's RMS log error per cell (an estimate of
    how far the summed prediction can be off, not its bias), kept within 3-15 %."""
    return min(HEADROOM_MAX, max(HEADROOM_MIN, cost_error))
