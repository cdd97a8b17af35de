"""Policy semantics stated against the published training scripts (``RL/algos/0*_*.py``, ``train_offline.py``).

Each test writes the published procedure out by hand (the oracle: loops and plain autograd, as those scripts do) and
checks that the default options reproduce it, and that the project's alternative is reachable as a named option:
linucb's greedy pick vs ``alpha``; Thompson sampling's draw stream (independent across batch sizes) vs ``per_state``;
CQL's MSE fit term vs ``td_loss=huber``; BCQ's single shuffle generator and MSE Q loss vs ``q_shuffle`` / ``q_loss``.
Also: ``policy.pth`` loads both as a bare state dict and as the scripts' ``{"state_dict", "actions"}``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

import numpy as np
import pytest
import torch
from _engine_helpers import run_harness as harness
from _synthetic_grid import synthetic_rows
from torch.nn import functional as F

from harness.core.errors import DataError
from policies import BehaviorNetwork, QNetwork
from policies.base import fit_policy, load_policy, pick
from policies.contract import ACTIONS, dataset_from_rows, load_dataset
from policies.nets import predict

GRID = Path(__file__).parents[1] / "fixtures" / "twin_grid_3rep.jsonl"


@pytest.fixture(scope="module")
def data():
    return dataset_from_rows(synthetic_rows(seed=0))


@pytest.fixture(scope="module")
def grid():
    return load_dataset(GRID)


def _published_posteriors(d) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """02_linucb.py / 03_thompson_sampling.py: A_k = I + sum x x', b_k = sum r x, row by row; theta = A^-1 b."""
    A = [np.eye(4) for _ in ACTIONS]
    b = [np.zeros(4) for _ in ACTIONS]
    for x, a, r in zip(d.states, d.actions, d.rewards):
        A[a] += np.outer(x, x)
        b[a] += r * x
    theta = np.stack([np.linalg.solve(A[a], b[a]) for a in range(len(ACTIONS))])
    return theta, np.stack(A), np.stack([np.linalg.inv(m) for m in A])


def _valid(d, bs: int) -> list[int]:
    return [int(a) for a in np.flatnonzero(d.legal_mask(bs))]


def test_linucb_default_is_the_published_greedy_pick_and_alpha_adds_the_bonus(data, grid):
    for d in (data, grid):
        theta, A, _ = _published_posteriors(d)
        expected = {
            bs: ACTIONS[max(_valid(d, bs), key=lambda a: theta[a] @ d.first_state(bs))] for bs in d.batch_size_list
        }
        assert pick(fit_policy("linucb", d), d) == expected
    ucb = fit_policy("linucb", grid, alpha=1.0)
    x = grid.first_state(8)
    bonus = np.sqrt(np.einsum("i,kij,j->k", x, np.linalg.inv(A), x))
    assert np.allclose(ucb.scores(x[None])[0], theta @ x + bonus, atol=1e-9)
    assert pick(ucb, grid)[8] != expected[8]  # the bonus moves the bs-8 pick on the twin grid (to (5,4,16))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_thompson_default_replays_the_published_draw_stream(grid, seed):
    """03_thompson_sampling.py: one default_rng(seed); per batch size (ascending), per valid action (index order), one
    ``rng.multivariate_normal(mean_k, cov_k)``; argmax of theta~ . x."""
    theta, _, cov = _published_posteriors(grid)
    rng = np.random.default_rng(seed)
    expected, draws = {}, {}
    for bs in grid.batch_size_list:
        x = grid.first_state(bs)
        sampled = {a: rng.multivariate_normal(theta[a], cov[a]) for a in _valid(grid, bs)}
        expected[bs] = ACTIONS[max(sampled, key=lambda a: sampled[a] @ x)]
        draws[bs] = sampled
    policy = fit_policy("thompson_sampling", grid, seed=seed)
    ours = {}
    for bs in grid.batch_size_list:  # what pick() does, one batch size at a time, keeping the draws to compare
        drawn = policy.draw(grid.first_state(bs)[None], grid.legal_mask(bs))[0]
        assert all(np.allclose(drawn[a], draws[bs][a], atol=1e-9) for a in draws[bs])
        ours[bs] = ACTIONS[int(np.nanargmax(np.where(grid.legal_mask(bs), drawn @ grid.first_state(bs), np.nan)))]
    assert ours == expected
    assert pick(fit_policy("thompson_sampling", grid, seed=seed), grid) == expected


@pytest.mark.parametrize("draws", ["sequential", "per_state"])
def test_thompson_draws_are_independent_across_batch_sizes(grid, draws):
    policy = fit_policy("thompson_sampling", grid, seed=0, draws=draws)
    thetas = [policy.draw(grid.first_state(bs)[None])[0] for bs in grid.batch_size_list]
    z = [
        np.linalg.solve(np.linalg.cholesky(policy.cov), (t - policy.theta)[..., None])[..., 0] for t in thetas
    ]  # the normals
    for i in range(len(z)):
        for j in range(i + 1, len(z)):
            assert not np.allclose(z[i], z[j]), (draws, i, j)  # a re-seeded draw per call made these all equal
    assert abs(np.corrcoef(z[0].ravel(), z[1].ravel())[0, 1]) < 0.5  # 76 normals each: unrelated draws
    again = policy.draw(grid.first_state(1)[None])[0]
    assert np.array_equal(again, thetas[0]) == (draws == "per_state")  # per_state: a pure function of seed and state


def _published_fit(net: torch.nn.Module, d, epochs: int, g: torch.Generator, loss: Callable) -> None:
    """The published training loop: AdamW(lr 1e-3), per epoch a randperm from ``g``, minibatches of 8, autograd."""
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3)
    x, a, r = (
        torch.tensor(d.states, dtype=torch.float),
        torch.tensor(d.actions),
        torch.tensor(d.rewards, dtype=torch.float),
    )
    for _ in range(epochs):
        perm = torch.randperm(len(x), generator=g)
        for i in range(0, len(x), 8):
            b = perm[i : i + 8]
            value = loss(net(x[b]), a[b], r[b])
            opt.zero_grad()
            value.backward()
            opt.step()


def _mse(q: torch.Tensor, a: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    return F.mse_loss(q.gather(1, a[:, None]).squeeze(1), r)


def _published_cql(alpha: float) -> Callable:
    def loss(q: torch.Tensor, a: torch.Tensor, r: torch.Tensor) -> torch.Tensor:  # 06_cql.py's cql_loss
        pred = q.gather(1, a[:, None]).squeeze(1)
        return F.mse_loss(pred, r) + alpha * (torch.logsumexp(q, dim=1) - pred).mean()

    return loss


def test_cql_default_is_the_published_mse_objective_and_huber_is_an_option(data):
    from policies.cql import cql_loss

    torch.manual_seed(0)
    q, a, r = torch.rand(16, 19), torch.randint(0, 19, (16,)), torch.rand(16)
    assert float(cql_loss(q, a, r, 1.0)) == pytest.approx(float(_published_cql(1.0)(q, a, r)), abs=1e-6)
    fit_term = float(cql_loss(q, a, r, 0.0, td_loss="huber"))
    assert fit_term == pytest.approx(float(_mse(q, a, r)) / 2, abs=1e-6)  # Huber = MSE/2 here: alpha counts double

    torch.manual_seed(3)
    ref = QNetwork()
    _published_fit(ref, data, 2, torch.Generator().manual_seed(3), _published_cql(1.0))
    ours = fit_policy("cql", data, seed=3, epochs=2)
    assert np.allclose(ours.scores(data.states), predict(ref, data.states), atol=1e-5)
    huber = fit_policy("cql", data, seed=3, epochs=2, td_loss="huber").scores(data.states)
    doubled = fit_policy("cql", data, seed=3, epochs=2, alpha=2.0).scores(
        data.states
    )  # Huber = (MSE + 2 alpha pen) / 2
    gap = np.abs(huber - ours.scores(data.states)).max()  # and AdamW all but ignores the overall 1/2 (up to its eps)
    assert gap > 0.05 and np.abs(huber - doubled).max() < 0.1 * gap


def test_bcq_default_trains_as_the_published_script_and_the_old_choices_are_options(data):
    """07_bcq.py: manual_seed; BehaviorNet then QNetwork; ONE generator for both phases; cross-entropy, then MSE."""
    torch.manual_seed(2)
    behavior, q = BehaviorNetwork(), QNetwork()
    g = torch.Generator().manual_seed(2)
    _published_fit(behavior, data, 2, g, lambda out, a, r: F.cross_entropy(out, a))
    _published_fit(q, data, 2, g, _mse)
    ours = fit_policy("bcq", data, seed=2, behavior_epochs=2, q_epochs=2)
    assert np.allclose(predict(ours.behavior, data.states), predict(behavior, data.states), atol=1e-5)
    assert np.allclose(predict(ours.q, data.states), predict(q, data.states), atol=1e-5)
    reseed = fit_policy("bcq", data, seed=2, behavior_epochs=2, q_epochs=2, q_shuffle="reseed")
    assert np.allclose(predict(reseed.behavior, data.states), predict(behavior, data.states), atol=1e-5)
    assert not np.allclose(predict(reseed.q, data.states), predict(q, data.states), atol=1e-3)
    # Huber is MSE / 2 on rewards in [0, 1] and AdamW ignores a constant gradient scale: the Q net barely moves
    huber = fit_policy("bcq", data, seed=2, behavior_epochs=2, q_epochs=2, q_loss="huber")
    assert np.allclose(predict(huber.q, data.states), predict(q, data.states), atol=1e-4)
    strict = fit_policy("bcq", data, seed=2, behavior_epochs=2, q_epochs=2, threshold=1.0)  # nothing passes the filter
    x, legal = data.first_state(16)[None], data.legal_mask(16)
    assert strict.act(x, legal)[0] == int(np.argmax(np.where(legal, predict(q, x)[0], -np.inf)))  # published fallback


def test_policy_pth_loads_bare_and_as_the_scripts_save_it(data, tmp_path):
    """Files the published scripts wrote (no train.json, so no recorded sha256): loaded as trusted."""
    from policies.cql import CQL

    trained = fit_policy("mlp_bandit", data, seed=0, epochs=1)
    trained.save(tmp_path / "mlp_bandit")
    bare = load_policy(tmp_path, "mlp_bandit", trust=True).scores(data.states)
    assert np.array_equal(bare, trained.scores(data.states))
    pth = tmp_path / "mlp_bandit" / "policy.pth"
    torch.save(
        {"state_dict": trained.net.state_dict(), "actions": [a.as_tuple() for a in ACTIONS]}, pth
    )  # train_offline.py
    assert np.array_equal(load_policy(tmp_path, "mlp_bandit", trust=True).scores(data.states), bare)
    (tmp_path / "cql").mkdir()
    torch.save(
        {"state_dict": trained.net.state_dict(), "actions": [a.as_tuple() for a in ACTIONS]},
        tmp_path / "cql" / "policy.pth",
    )
    assert np.array_equal(CQL.load(tmp_path / "cql").scores(data.states), bare)  # 06_cql.py's shape, no params.json
    torch.save({"state_dict": trained.net.state_dict(), "actions": [a.as_tuple() for a in reversed(ACTIONS)]}, pth)
    with pytest.raises(DataError, match="actions"):
        load_policy(tmp_path, "mlp_bandit", trust=True)
    torch.save({"weights": 1}, pth)
    with pytest.raises(DataError, match="not a QNetwork state dict"):
        load_policy(tmp_path, "mlp_bandit", trust=True)


@pytest.mark.slow
def test_train_param_option_records_and_reports_the_published_picks(synthetic_files, tmp_path):
    ds = str(synthetic_files["dataset"])
    r = harness(
        "train", "--dataset", ds, "--out", str(tmp_path), "--algos", "linucb,lookup_table", "--param", "linucb.alpha=1"
    )
    assert r.returncode == 0, r.stderr + r.stdout
    meta = json.loads((tmp_path / "train.json").read_text())
    assert meta["deviations"] == {"linucb": {"alpha": [1, 0.0]}}
    assert json.loads((tmp_path / "linucb" / "params.json").read_text())["params"]["alpha"] == 1
    greedy = pick(fit_policy("linucb", load_dataset(ds)), load_dataset(ds))
    assert meta["published_picks"] == {"linucb": {str(bs): c.as_list() for bs, c in greedy.items()}}
    r = harness("report", "policies", str(tmp_path), "--no-figures")
    assert r.returncode == 0, r.stderr + r.stdout
    assert (
        "picks with the published scripts' options" in r.stdout and "alpha=1 (published 0.0; refit shown)" in r.stdout
    )
    old = {k: v for k, v in meta.items() if k not in ("deviations", "published_picks")}  # a models folder from before
    (tmp_path / "train.json").write_text(json.dumps(old))
    r = harness("report", "policies", str(tmp_path), "--no-figures")
    assert r.returncode == 0 and "predates the recorded policy options" in r.stdout, r.stdout + r.stderr
    for bad, says in ((["--param", "linucb.beta=1"], "no option 'beta'"), (["--param", "cql.td_loss=l1", "--algos", "cql"], "td_loss must be one of"),
                      (["--param", "linucb.alpha=x"], "takes a number"), (["--param", "cql.alpha=0"], "does not train")):  # fmt: skip
        argv = ["train", "--dataset", ds, "--out", str(tmp_path / "bad"), *bad]
        if "--algos" not in bad:
            argv += ["--algos", "linucb"]
        r = harness(*argv)
        assert r.returncode != 0 and says in r.stdout + r.stderr, (bad, r.stdout + r.stderr)
        assert not (tmp_path / "bad" / "train.json").exists()
