"""The chance that a cell's row carries the published throttle flag, learned from the rows' own flags.

The published reward multiplies a row by 0.3 when its after-run snapshot reads any clock-event bit. A config that
runs at the power cap reads the cap bit when that snapshot falls in a capped stretch, so near the cap the flag is a
coin flip that moves the reward by 70 %. The fitted twin says which configs demand more than the cap (the cap
margin: full-batch demand at full clocks minus the cap, over the limit), but on a GPU run right at its cap (every
config within a few percent of it) the flag depends on power noise and the snapshot's instant far more than on the
model's margin: the model's own binary answer (capped or not) is confidently wrong there.

So the chance is a smooth function of the model's margin whose shape is fitted to the flags the run has seen:

    P(flag) = ceiling x share x Phi((margin - offset) / width)

``share``: the model's capped share of the last sampler period of decoding (the snapshot is one instant of it: a
config that spends its draft steps below the cap and its verify steps above it is flagged only sometimes; for a
cell the model does not cap, the mean share of the capped cells of its batch size); ``ceiling``: how far that
share holds; ``offset``: how far the model's margin is off; ``width``: how gradual the change is. The three are the
maximum a posteriori on a small grid, with priors that leave the model's answer in place until flags contradict it.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from itertools import product
from typing import Sequence

CEILINGS = (0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95, 1.0)
OFFSETS = (-0.06, -0.04, -0.03, -0.02, -0.015, -0.01, -0.005, 0.0, 0.005, 0.01, 0.02, 0.03, 0.04)
WIDTHS = (0.003, 0.005, 0.01, 0.02, 0.03, 0.05, 0.08, 0.12)
OFFSET_PRIOR_SD = 0.02
"""The model's margin is trusted to about two percent of the limit (the utilization target of the twin is 3 %)."""
CEILING_PRIOR = 0.95
CEILING_PRIOR_ROWS = 4.0
"""The prior ceiling counts as this many pseudo-rows."""
WIDTH_PRIOR_PER_DOUBLING = 0.5
"""Log-prior cost of each halving or doubling of the width away from the model's utilization error."""
Q_CLIP = 0.02
"""A row's likelihood never treats a flag as impossible or certain (one odd snapshot must not dominate the fit)."""


@dataclass(frozen=True)
class FlagModel:
    ceiling: float
    offset: float
    width: float
    rows: int
    """Rows the fit saw."""

    def chance(self, margin: float, share: float, fits: bool = True) -> float:
        """P(the after-run snapshot reads a clock-event bit) of a cell with the model's cap ``margin`` and capped
        ``share`` of the last sampler period (``capped_share``)."""
        if not fits:
            return 0.0
        return self.ceiling * share * 0.5 * math.erfc(-(margin - self.offset) / (self.width * math.sqrt(2)))

    @classmethod
    def fit(cls, observed: Sequence[tuple[float, float, bool]], util_err: float) -> "FlagModel":
        """MAP fit to (cap margin, capped share, flagged) per measured row (the margin and share of its cell);
        ``util_err``: the model's utilization error (the prior width)."""
        a, b = CEILING_PRIOR_ROWS * CEILING_PRIOR, CEILING_PRIOR_ROWS * (1 - CEILING_PRIOR)
        prior_width = max(util_err, WIDTHS[0])
        best: tuple[float, FlagModel] | None = None
        for ceiling, offset, width in product(CEILINGS, OFFSETS, WIDTHS):
            model = cls(ceiling, offset, width, len(observed))
            log_post = (
                a * math.log(ceiling)
                + b * math.log(max(1e-9, 1 - ceiling))
                - 0.5 * (offset / OFFSET_PRIOR_SD) ** 2
                - WIDTH_PRIOR_PER_DOUBLING * abs(math.log2(width / prior_width))
            )
            for margin, share, flagged in observed:
                q = min(1 - Q_CLIP, max(Q_CLIP, model.chance(margin, share)))
                log_post += math.log(q if flagged else 1 - q)
            if best is None or log_post > best[0]:
                best = (log_post, model)
        assert best is not None
        return best[1]


def capped_share(tail_capped: float, cap_margin: float, below_cap: float) -> float:
    """The capped share of the last sampler period: the model's own for a cell it caps; ``below_cap`` for a cell it
    keeps below the cap (see ``share_below_cap``)."""
    return tail_capped if cap_margin > 0 else below_cap


def share_below_cap(capped_tails: Sequence[float]) -> float:
    """The share for the cells of a batch size the model keeps below the cap: if one is capped on the GPU it only
    just is, like the capped cells of that batch size, so the mean of their shares (1 when the model caps none);
    the chance then does not jump at a margin of 0."""
    return statistics.fmean(capped_tails) if capped_tails else 1.0
