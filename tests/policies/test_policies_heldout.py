"""Honest held-out evaluation on the committed twin grid (``tests/fixtures/twin_grid_3rep.jsonl``): each
leave-one-repeat-out fold rebuilds its rewards from its own rows, so the held-out repeat never sets the training
rewards (under the published ``last`` baseline rule the full file's baseline is repeat 2's)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from _engine_helpers import run_harness as harness

from policies.contract import dataset_from_rows, load_dataset

GRID = Path(__file__).parents[1] / "fixtures" / "twin_grid_3rep.jsonl"


def test_fold_rewards_are_rebuilt_from_the_fold_rows_only():
    from policies.evaluate import fold_datasets

    data = load_dataset(GRID)
    train, held = fold_datasets(data, 2)
    assert set(train.repeat_list) == {0, 1} and held.repeat_list == [2]
    train_rows = [r for r in data.rows if r.repeat in (0, 1)]
    assert np.array_equal(train.rewards, dataset_from_rows(train_rows).rewards)
    leaked = data.subset(data.repeats != 2).rewards  # what the old code trained on: repeat 2's baselines
    assert np.abs(leaked - train.rewards).max() > 0.1  # the leak is real on this grid (0.133)
    assert np.array_equal(held.rewards, dataset_from_rows([r for r in data.rows if r.repeat == 2]).rewards)
    own0 = fold_datasets(data, 0)[
        1
    ]  # a held-out repeat is scored against its own baseline, as validate_holdout.py does
    assert np.array_equal(own0.rewards, dataset_from_rows([r for r in data.rows if r.repeat == 0]).rewards)


@pytest.mark.slow
def test_evaluate_holds_out_repeat_2_without_the_leak(tmp_path):
    """The real CLI: train mlp_bandit, evaluate with folds; on the repeat-2 fold the leak-free training rewards make
    mlp_bandit pick (5,4,16) at bs 1, as the published validate_holdout.py does (the leaky folds gave (3,4,8))."""
    r = harness("train", "--dataset", str(GRID), "--out", str(tmp_path), "--algos", "mlp_bandit")
    assert r.returncode == 0, r.stderr + r.stdout
    r = harness("evaluate", "--dataset", str(GRID), "--models", str(tmp_path), "--json")
    assert r.returncode == 0, r.stderr + r.stdout
    ev = json.loads((tmp_path / "evaluation.json").read_text())
    picks = {(f["fold"], f["batch_size"]): tuple(f["config"]) for f in ev["fold_scores"] if f["algo"] == "mlp_bandit"}
    assert picks[(2, 1)] == (5, 4, 16)
    assert picks[(2, 16)] == (3, 2, 4) and picks[(0, 1)] == (3, 4, 8)
