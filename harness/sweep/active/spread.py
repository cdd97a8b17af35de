"""A measured cell's mean reward and the standard error a rerun would see, from the rows alone (no fitted model).

What judges a recipe against a full grid (``benchmarks/active_sweep.py``, ``benchmarks/active_replay.py``). A row's
published reward moves from one run to the next by

1. the repeat noise: every repeat is its own engine launch (its own seed, launch speed and power factors), so the
   within-cell spread of the rows' *plain* rewards (no throttle multiplier), pooled over the batch size's cells
   (``pooled_noise_sd``), is the launch-to-launch spread a rerun sees;
2. the throttle flag (x0.3 when the after-run snapshot reads a clock-event bit), whose chance is a property of the
   config, not of the batch size: a config at a coin flip swings by 70 % of its reward from row to row, one far
   from the cap not at all. Pooling the rows' published rewards over cells (as this module's predecessor did)
   averaged that over configs most of which read the same flag on both repeats, so it was far too small for the
   few configs near a coin flip, which are exactly the ones a noisy grid crowns (a second grid of the 65 W
   profile moved one such cell by 8.6 of those s.e.). Here each cell gets its own flag variance: a flag model
   (``FlagModel``, the active sweep's, with the row's *measured* utilization over the cap as the margin) fitted to
   every row's flag of the batch size, evaluated at the cell's mean utilization (its width widened by the
   launch-to-launch spread of a cell's utilization: a rerun is a new launch) and blended with the cell's own flags
   (``flag_sd``, as the active sweep does).

A gap between two cells' means is judged by the s.e. of the difference: both cells' s.e. in quadrature.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Sequence

from harness.runs.rows import SweepRow
from harness.sweep.active.estimate import RowReward, flag_sd, measured_row_rewards, pooled_noise_sd
from harness.sweep.active.throttle_flags import FlagModel

Key = tuple[int, tuple[int, int, int]]


@dataclass(frozen=True)
class CellSpread:
    mean: float
    se: float
    """The s.e. of ``mean`` a rerun would see: repeat noise and the cell's throttle flag, over sqrt(rows)."""
    rows: int
    flag_chance: float
    """The flag model's chance for this cell (before blending with the cell's own flags)."""


def _util_sd(groups: Sequence[Sequence[RowReward]]) -> float:
    """Pooled within-cell sd of the rows' utilization (repeats are separate launches): the flag model's prior width."""
    us = [[x.util for x in g if x.util is not None] for g in groups]
    us = [u for u in us if len(u) > 1]
    dof = sum(len(u) - 1 for u in us)
    return math.sqrt(sum(statistics.variance(u) * (len(u) - 1) for u in us) / dof) if dof else 0.01


def cell_spreads(rows: Sequence[SweepRow], fallback_limit_w: float | None) -> dict[Key, CellSpread]:
    """Every measured cell's mean published reward (error rows score 0) and the s.e. a rerun would see."""
    measured = measured_row_rewards(rows, fallback_limit_w)
    out: dict[Key, CellSpread] = {}
    for bs in sorted({k[0] for k in measured}):
        cells = {k: v for k, v in measured.items() if k[0] == bs}
        noise = pooled_noise_sd([[x.unflagged for x in v if not x.error] for v in cells.values()])
        seen = [(x.util - 1.0, 1.0, x.flagged) for v in cells.values() for x in v if not x.error and x.util is not None]
        launch_sd = _util_sd(list(cells.values()))
        fit = FlagModel.fit(seen, launch_sd)  # a rerun's launch lands within launch_sd of the cell's mean utilization
        flags = FlagModel(fit.ceiling, fit.offset, math.hypot(fit.width, launch_sd), fit.rows)
        for key, v in cells.items():
            utils = [x.util for x in v if x.util is not None]
            q = flags.chance(statistics.fmean(utils) - 1.0, 1.0) if utils else 0.0
            row_sd = math.hypot(noise, flag_sd(v, q))
            out[key] = CellSpread(statistics.fmean(x.reward for x in v), row_sd / math.sqrt(len(v)), len(v), q)
    return out


def gap_in_se(best: CellSpread, other: CellSpread) -> float:
    """How far ``other``'s mean is below ``best``'s, in s.e. of the difference (0 for no gap)."""
    gap = best.mean - other.mean
    se = math.hypot(best.se, other.se)
    if gap <= 0:
        return 0.0
    return gap / se if se > 0 else float("inf")
