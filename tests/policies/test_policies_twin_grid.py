"""Must-show check on a real 3-repeat twin grid (``tests/fixtures/twin_grid_3rep.jsonl``: the native rows of
``harness sweep --engine twin --repeats 3 --time-scale 20 --launch-per cell --engine-arg=--twin-launch-scale=0.1``,
process identity stripped): lookup_table, doubly_robust and mlp_bandit pick the published recipe at every batch size.
``.ci/grid_check.sh`` regenerates such a grid from scratch and checks the same picks."""

from __future__ import annotations

from pathlib import Path

import pytest

from policies.base import pick
from policies.contract import load_dataset

GRID = Path(__file__).parents[1] / "fixtures" / "twin_grid_3rep.jsonl"
RECIPE = {1: (3, 4, 8), 4: (3, 4, 8), 8: (3, 4, 8), 16: (3, 2, 4)}


@pytest.mark.parametrize("algo", ["lookup_table", "doubly_robust", "mlp_bandit"])
def test_twin_grid_recipe(algo):
    from policies.base import fit_policy

    data = load_dataset(GRID)
    assert len(data) + data.skipped_errors == 228 and data.repeat_list == [0, 1, 2]
    picks = pick(fit_policy(algo, data, seed=0), data)
    assert {bs: c.as_tuple() for bs, c in picks.items()} == RECIPE
