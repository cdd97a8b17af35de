"""All eight trained by the real CLI on the synthetic grid; every artifact loads exactly as the model card says."""

from __future__ import annotations

import json

import joblib
import numpy as np
import pytest
import torch
from _synthetic_grid import RECIPE
from sklearn.ensemble import GradientBoostingRegressor
from sklearn.linear_model import LinearRegression

from harness.grid import ACTIONS
from policies import BehaviorNetwork, QNetwork
from policies.base import ALGORITHMS, fit_policy, load_policy, pick
from policies.contract import load_dataset

ACTIONS_ARRAY = np.array([a.as_list() for a in ACTIONS])


def test_picks_json_and_published_recipe(trained_models):
    picks = json.loads((trained_models / "picks.json").read_text())
    assert list(picks) == list(ALGORITHMS)
    for algo in ALGORITHMS:
        assert set(picks[algo]) == {"1", "4", "8", "16"}
        assert all(tuple(c) in {a.as_tuple() for a in ACTIONS} for c in picks[algo].values())
    for algo in ("lookup_table", "doubly_robust", "mlp_bandit"):  # the synthetic grid's optimum is the published recipe
        assert picks[algo] == {str(bs): cfg.as_list() for bs, cfg in RECIPE.items()}, algo
    assert picks["bcq"]["16"] != [5, 4, 16]  # never logged at bs 16 (an error row): illegal


def test_qnetwork_artifacts_load_as_the_model_card_says(trained_models):
    for algo in ("mlp_bandit", "cql"):
        net = QNetwork(4, 19)
        state = torch.load(trained_models / algo / "policy.pth")
        assert sorted(state) == [
            "net.0.bias",
            "net.0.weight",
            "net.2.bias",
            "net.2.weight",
            "net.4.bias",
            "net.4.weight",
        ]
        net.load_state_dict(state)
        assert net(torch.zeros(1, 4)).shape == (1, 19)
    blob = torch.load(trained_models / "bcq" / "policy.pth")
    assert set(blob) == {"behavior_state_dict", "q_state_dict", "actions"}
    QNetwork(4, 19).load_state_dict(blob["q_state_dict"])
    BehaviorNetwork(4, 19).load_state_dict(blob["behavior_state_dict"])
    assert blob["actions"] == ACTIONS_ARRAY.tolist()


def test_table_npz_and_joblib_artifacts(trained_models):
    table = json.loads((trained_models / "lookup_table" / "model.json").read_text())
    assert set(table) == {"1", "4", "8", "16"}
    assert table["16"]["config"] == [3, 2, 4] and 0 < table["16"]["mean_reward"] <= 1
    with np.load(trained_models / "linucb" / "model.npz") as z:
        assert z["theta"].shape == (19, 4) and z["A"].shape == (19, 4, 4) and (z["actions"] == ACTIONS_ARRAY).all()
    with np.load(trained_models / "thompson_sampling" / "model.npz") as z:
        assert z["mean"].shape == (19, 4) and z["cov"].shape == (19, 4, 4) and (z["actions"] == ACTIONS_ARRAY).all()
        assert np.allclose(z["cov"], np.transpose(z["cov"], (0, 2, 1)))
    gbt = joblib.load(trained_models / "gbt" / "model.joblib")
    assert (
        isinstance(gbt, GradientBoostingRegressor)
        and gbt.n_features_in_ == 5
        and gbt.n_estimators == 100
        and gbt.max_depth == 3
    )
    dr = joblib.load(trained_models / "doubly_robust" / "model.joblib")
    assert isinstance(dr, LinearRegression) and dr.n_features_in_ == 5


@pytest.mark.parametrize("algo", ALGORITHMS)
def test_loaded_policy_picks_what_training_picked(trained_models, synthetic_files, algo):
    data = load_dataset(synthetic_files["dataset"])
    picks = json.loads((trained_models / "picks.json").read_text())[algo]
    loaded = pick(load_policy(trained_models, algo, data), data)
    assert {str(bs): c.as_list() for bs, c in loaded.items()} == picks


def test_training_is_deterministic_with_a_seed(synthetic_files):
    data = load_dataset(synthetic_files["rows"])
    a = fit_policy("mlp_bandit", data, seed=3, epochs=3)
    b = fit_policy("mlp_bandit", data, seed=3, epochs=3)
    c = fit_policy("mlp_bandit", data, seed=4, epochs=3)
    assert np.array_equal(a.scores(data.states), b.scores(data.states))
    assert not np.array_equal(a.scores(data.states), c.scores(data.states))
    t1, t2 = fit_policy("thompson_sampling", data, seed=5), fit_policy("thompson_sampling", data, seed=5)
    assert np.array_equal(t1.scores(data.states), t2.scores(data.states))
    g1, g2 = fit_policy("gbt", data, seed=1), fit_policy("gbt", data, seed=1)
    assert np.array_equal(g1.scores(data.states[:5]), g2.scores(data.states[:5]))


def test_pre_decision_state_trains_from_native_rows(synthetic_files, tmp_path):
    from policies.base import train

    data = load_dataset(synthetic_files["rows"], state="pre")
    assert np.allclose(data.states[:, 2], 310.0 / 8192) and np.allclose(data.states[:, 3], 0.0)
    summary = train(data, tmp_path, ["lookup_table", "linucb"], seed=0)
    assert summary.state == "pre" and summary.picks["lookup_table"]["16"] == [3, 2, 4]


def test_batched_fold_training_equals_training_each_fold_alone(synthetic_files):
    from policies.losses import MSE
    from policies.nets import QNetwork, predict, seeded, train, train_batched

    data = load_dataset(synthetic_files["rows"])
    folds = [data.subset(data.repeats != r) for r in (0, 1, 2)]
    loss = MSE()
    alone, together = [], []
    for i, f in enumerate(folds):
        with seeded(i):
            net = QNetwork()
            train(net, f, loss, epochs=4, seed=i)
            alone.append(net)
        with seeded(i):
            together.append(QNetwork())
    train_batched(together, folds, loss, epochs=4, seeds=[0, 1, 2])
    for a, b, f in zip(alone, together, folds):
        assert np.allclose(predict(a, f.states), predict(b, f.states), atol=1e-5)
    fitted = fit_policy("mlp_bandit", data, seed=0, epochs=2).__class__.fit_many(folds, seed=0, epochs=2)
    assert all(
        np.allclose(p.scores(f.states), fit_policy("mlp_bandit", f, seed=0, epochs=2).scores(f.states), atol=1e-5)
        for p, f in zip(fitted, folds)
    )


@pytest.mark.parametrize("mode", ["func", "autograd"])
def test_gradient_modes_train_the_same_nets(synthetic_files, monkeypatch, mode):
    """The benchmark's alternatives to the hand-derived backprop (torch.func vmap + grad, plain autograd) train the
    same folds to the same nets, so benchmarks/train_all.py --gradients compares like with like."""
    from policies import losses, nets
    from policies.nets import QNetwork, predict, seeded, train_batched

    data = load_dataset(synthetic_files["rows"])
    folds = [data.subset(data.repeats != r) for r in (0, 1)]
    trained = {}
    for m in ("hand", mode):
        monkeypatch.setattr(nets, "GRADIENTS", m)
        with seeded(0):
            trained[m] = [QNetwork(), QNetwork()]
        train_batched(trained[m], folds, losses.CQL(0.7, "huber"), epochs=3, seeds=[0, 1])
    for a, b, f in zip(trained["hand"], trained[mode], folds):
        assert np.allclose(predict(a, f.states), predict(b, f.states), atol=1e-5)
    assert not np.allclose(
        predict(trained["hand"][0], data.states), predict(trained["hand"][1], data.states), atol=1e-3
    )


@pytest.mark.parametrize("loss_name", ["MSE", "Huber", "CrossEntropy", "CQL", "CQL_huber"])
def test_hand_written_gradients_equal_autograd(loss_name):
    """The trainer's hand-derived backprop equals autograd on the published network, for every training loss."""
    from torch.nn import functional as F

    from policies import losses
    from policies.nets import _linear_layers, forward_backward

    loss = (
        losses.CQL(0.7, "huber")
        if loss_name == "CQL_huber"
        else losses.CQL(0.7)
        if loss_name == "CQL"
        else getattr(losses, loss_name)()
    )
    torch.manual_seed(0)
    net = QNetwork(4, 19)
    x, a, r = (
        torch.rand(8, 4),
        torch.randint(0, 19, (8,)),
        torch.rand(8) * 1.5 - 0.2,
    )  # some |Q - r| > 1: both Huber branches
    onehot = F.one_hot(a, 19).float()
    loss.value(net(x), onehot, r).backward()
    lins = [m for _, m in _linear_layers(net)]
    weights = [m.weight.detach().T[None].clone() for m in lins]
    biases = [m.bias.detach()[None, None].clone() for m in lins]
    forward_backward(weights, biases, x[None], onehot[None], r[None], loss)
    for lin, w, b in zip(lins, weights, biases):
        assert torch.allclose(w.grad[0].T, lin.weight.grad, atol=1e-6) and torch.allclose(
            b.grad[0, 0], lin.bias.grad, atol=1e-6
        )
