"""The s.e. a rerun would see (``harness/sweep/active/spread.py``): the throttle flag's variance is each config's own, not
pooled over a batch size, and a gap between two cells is judged by both cells' noise."""

from __future__ import annotations

import math

import pytest
from _dataset_helpers import grid_rows

from harness.grid import SpecConfig
from harness.sweep.active.spread import CellSpread, cell_spreads, gap_in_se

CONFIGS = [
    SpecConfig(0, 0, 0),
    SpecConfig(3, 4, 8),
    SpecConfig(3, 2, 4),
    SpecConfig(1, 4, 2),
    SpecConfig(3, 1, 4),
    SpecConfig(5, 4, 8),
    SpecConfig(1, 1, 2),
]


def test_a_config_at_the_cap_carries_its_flag_variance_even_when_both_repeats_read_the_same_flag():
    """A 80 W board: four configs run at the cap and are flagged about half the time, two run far below it. A
    capped config whose two repeats both read the flag (its rows agree to the last digit apart from the noise) is
    as uncertain as any capped one; a config far below the cap keeps the repeat noise alone."""
    rows = grid_rows(repeats=2, batch_sizes=[1], configs=CONFIGS, failing=(), seed=3)
    capped = {(3, 2, 4): (True, True), (1, 4, 2): (True, False), (3, 1, 4): (False, True), (5, 4, 8): (False, False)}
    for r in rows:
        cfg = r.config.as_tuple()
        if cfg in capped:
            r.avg_power_watts = 81.0 + 0.1 * r.repeat  # utilization 1.01: at the cap
            r.gpu_throttling = capped[cfg][r.repeat]
        elif cfg != (0, 0, 0):
            r.avg_power_watts = 60.0 + 0.2 * r.repeat  # utilization 0.75: far below it
    spreads = cell_spreads(rows, 80.0)
    both_flagged, far_below = spreads[(1, (3, 2, 4))], spreads[(1, (1, 1, 2))]
    assert both_flagged.rows == 2 and both_flagged.flag_chance > 0.3
    assert far_below.flag_chance < 0.05
    assert both_flagged.se > 5 * far_below.se
    assert far_below.se < 0.02
    # one repeat noise for every cell far below the cap (pooled over the batch size's cells)
    assert spreads[(1, (3, 4, 8))].se == pytest.approx(far_below.se, rel=0.3)


def test_a_gap_is_judged_by_the_s_e_of_the_difference():
    best, other = CellSpread(0.30, 0.01, 2, 0.0), CellSpread(0.29, 0.01, 2, 0.0)
    assert gap_in_se(best, other) == pytest.approx(0.01 / math.sqrt(2 * 0.01**2))
    assert gap_in_se(other, best) == 0.0
    assert gap_in_se(best, CellSpread(0.25, 0.0, 2, 0.0)) == pytest.approx(5.0)
