"""Hand-written estimators and learners checked against library oracles: obp 0.4.1 (IPS, SNIPS, DM, DR),
mabwiser 2.7.4 (LinUCB, linear Thompson sampling posteriors), d3rlpy 2.8.1 (discrete CQL loss, BCQ action rule)."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch
from _synthetic_grid import synthetic_rows

from policies import ope
from policies.base import fit_policy
from policies.contract import N_ACTIONS, dataset_from_rows
from policies.evaluate import evaluate, ope_estimates


@pytest.fixture(scope="module")
def data():
    return dataset_from_rows(synthetic_rows(seed=0))


def _bandit_log(seed: int = 0, n: int = 228):
    rng = np.random.default_rng(seed)
    action = rng.integers(0, N_ACTIONS, n)
    reward = rng.random(n)
    pscore = np.full(n, 1 / N_ACTIONS)
    dist = rng.dirichlet(np.ones(N_ACTIONS), n)
    q_hat = rng.random((n, N_ACTIONS))
    return reward, action, pscore, dist, q_hat


@pytest.mark.parametrize("deterministic", [True, False])
def test_estimators_equal_obp(deterministic):
    from obp.ope import (
        DirectMethod,
        DoublyRobust,
        InverseProbabilityWeighting,
        SelfNormalizedInverseProbabilityWeighting,
    )

    reward, action, pscore, dist, q_hat = _bandit_log(1)
    if deterministic:
        dist = ope.one_hot(np.random.default_rng(2).integers(0, N_ACTIONS, len(action)), N_ACTIONS)
    kw = dict(reward=reward, action=action, pscore=pscore, action_dist=dist[:, :, None])
    assert ope.ips(reward, action, pscore, dist) == pytest.approx(
        InverseProbabilityWeighting().estimate_policy_value(**kw), abs=1e-9
    )
    assert ope.snips(reward, action, pscore, dist) == pytest.approx(
        SelfNormalizedInverseProbabilityWeighting().estimate_policy_value(**kw), abs=1e-9
    )
    assert ope.dr(reward, action, pscore, dist, q_hat) == pytest.approx(
        DoublyRobust().estimate_policy_value(**kw, estimated_rewards_by_reg_model=q_hat[:, :, None]), abs=1e-9
    )
    assert ope.dm(q_hat, dist) == pytest.approx(
        DirectMethod().estimate_policy_value(
            action_dist=dist[:, :, None], estimated_rewards_by_reg_model=q_hat[:, :, None]
        ),
        abs=1e-9,
    )


def test_doubly_robust_scores_are_obp_dr_of_constant_policies(data):
    from obp.ope import DoublyRobust

    policy = fit_policy("doubly_robust", data)
    p = data.pscores()
    for bs in data.batch_size_list:
        sel = data.batch_sizes == bs
        q = policy.q_hat(data.states[sel])
        for k in range(N_ACTIONS):
            dist = np.zeros((sel.sum(), N_ACTIONS, 1))
            dist[:, k, 0] = 1.0
            obp_value = DoublyRobust().estimate_policy_value(reward=data.rewards[sel], action=data.actions[sel], pscore=p[sel],
                                                             action_dist=dist, estimated_rewards_by_reg_model=q[:, :, None])  # fmt: skip
            assert q[:, k].mean() + policy.correction[bs][k] == pytest.approx(obp_value, abs=1e-9)


def test_linucb_equals_mabwiser(data):
    from mabwiser.mab import MAB, LearningPolicy

    policy = fit_policy(
        "linucb", data, alpha=1.0
    )  # the exploration-bonus option (the default is the published greedy pick)
    mab = MAB(arms=list(range(N_ACTIONS)), learning_policy=LearningPolicy.LinUCB(alpha=1.0, l2_lambda=1.0), seed=0)
    mab.fit(decisions=data.actions, rewards=data.rewards, contexts=data.states)
    for k in range(N_ACTIONS):
        model = mab._imp.arm_to_model[k]
        assert np.allclose(model.beta, policy.theta[k], atol=1e-9) and np.allclose(model.A, policy.A[k], atol=1e-9)
    expected = mab.predict_expectations(data.states[:40])
    ours = policy.scores(data.states[:40])
    assert np.allclose([[e[k] for k in range(N_ACTIONS)] for e in expected], ours, atol=1e-9)


def test_thompson_posterior_equals_mabwiser_and_draws_match_it(data):
    from mabwiser.mab import MAB, LearningPolicy

    policy = fit_policy("thompson_sampling", data, seed=0)
    mab = MAB(arms=list(range(N_ACTIONS)), learning_policy=LearningPolicy.LinTS(alpha=1.0, l2_lambda=1.0), seed=0)
    mab.fit(decisions=data.actions, rewards=data.rewards, contexts=data.states)
    for k in range(N_ACTIONS):
        model = mab._imp.arm_to_model[k]
        assert np.allclose(model.beta, policy.theta[k], atol=1e-9)
        assert np.allclose(model.A_inv, policy.cov[k], atol=1e-9)  # alpha^2 A^-1 with alpha = sigma = 1
    x = data.states[0]
    draws = policy.scores(np.repeat(x[None], 20000, axis=0))
    mean, var = policy.theta @ x, np.einsum("i,kij,j->k", x, policy.cov, x)
    assert np.allclose(draws.mean(axis=0), mean, atol=5 * np.sqrt(var / 20000).max())
    assert np.allclose(draws.var(axis=0), var, rtol=0.05)


def _quiet_d3rlpy():
    import structlog

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))


def _d3_dataset(seed: int, n_actions_logged: int = N_ACTIONS):
    from d3rlpy.constants import ActionSpace
    from d3rlpy.dataset import MDPDataset

    rng = np.random.default_rng(seed)
    x = rng.random((64, 4)).astype("f4")
    a = rng.integers(0, n_actions_logged, 64)
    r = rng.random(64).astype("f4")
    return x, MDPDataset(observations=x, actions=a[:, None], rewards=r[:, None], terminals=np.ones(64, "f4"),
                         action_space=ActionSpace.DISCRETE, action_size=N_ACTIONS)  # fmt: skip


def test_cql_loss_equals_d3rlpy_discrete_cql_with_gamma_0():
    import d3rlpy
    from d3rlpy.torch_utility import TorchMiniBatch

    from policies.cql import cql_loss

    _quiet_d3rlpy()
    _, ds = _d3_dataset(0)
    for alpha in (1.0, 0.1):
        algo = d3rlpy.algos.DiscreteCQLConfig(gamma=0.0, alpha=alpha, batch_size=8).create(device="cpu:0")
        algo.build_with_dataset(ds)
        batch = TorchMiniBatch.from_batch(
            ds.sample_transition_batch(8), gamma=0.0, compute_returns_to_go=False, device="cpu:0"
        )
        with torch.no_grad():
            theirs = algo.impl.compute_loss(batch, algo.impl.compute_target(batch)).loss
            q = algo.impl._q_func_forwarder.compute_expected_q(batch.observations)
            ours = cql_loss(q, batch.actions.long().view(-1), batch.rewards.view(-1), alpha, td_loss="huber")
        assert float(ours) == pytest.approx(float(theirs), abs=1e-6)


def test_bcq_action_rule_equals_d3rlpy_discrete_bcq():
    import d3rlpy

    from policies.bcq import BCQ

    _quiet_d3rlpy()
    x, ds = _d3_dataset(1, n_actions_logged=6)  # a skewed logger, so the behaviour filter actually bites
    algo = d3rlpy.algos.DiscreteBCQConfig(gamma=0.0, action_flexibility=0.3, beta=0.01, batch_size=8).create(
        device="cpu:0"
    )
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        algo.fit(
            ds,
            n_steps=400,
            n_steps_per_epoch=400,
            show_progress=False,
            logger_adapter=d3rlpy.logging.NoopAdapterFactory(),
        )
    finally:
        torch.set_num_threads(threads)
    impl = algo.impl

    class Logits(torch.nn.Module):
        def forward(self, s):
            return impl._modules.imitator(s).logits

    class Q(torch.nn.Module):
        def forward(self, s):
            return impl._q_func_forwarder.compute_expected_q(s)

    ours = BCQ(threshold=0.3)
    ours.behavior, ours.q = Logits(), Q()
    assert ours.allowed(x).sum(axis=1).mean() < N_ACTIONS - 3  # the filter removed actions
    assert (ours.act(x) == algo.predict(x)).all()


def test_bcq_filter_keeps_almost_every_action_on_a_uniform_grid(data):
    """The documented equivalence: on full-factorial logs BCQ's filter is (nearly) a no-op, so BCQ ~ Q regression."""
    policy = fit_policy("bcq", data, behavior_epochs=60, q_epochs=1)
    kept = np.mean(
        [
            policy.allowed(data.first_state(bs)[None], data.legal_mask(bs)).sum() / data.legal_mask(bs).sum()
            for bs in data.batch_size_list
        ]
    )
    assert kept > 0.8


def test_bs_only_policies_ips_snips_dr_equal_replay_on_held_out_repeat(data):
    train, held = data.subset(data.repeats != 2), data.subset(data.repeats == 2)
    lookup = fit_policy("lookup_table", train)
    target = lookup.act(held.states, np.stack([train.legal_mask(int(b)) for b in held.batch_sizes]))
    est = ope_estimates(train, held, target)
    assert est["ips"] == pytest.approx(est["replay"], abs=1e-12)
    assert est["snips"] == pytest.approx(est["replay"], abs=1e-12)
    assert est["dr"] == pytest.approx(est["replay"], abs=1e-12)


def test_leave_one_repeat_out_over_all_folds(data):
    ev = evaluate(data, algos=["lookup_table", "linucb", "doubly_robust"], seed=0)
    assert ev.folds == [0, 1, 2] and len(ev.fold_scores) == 3 * 3 * 4
    assert all(f.regret >= 0 for f in ev.fold_scores)
    s = ev.summary["lookup_table"]
    assert s.loro_regret == pytest.approx(0.0) and s.hit_rate == 1.0
    lo, hi = s.loro_value_ci
    assert lo <= s.loro_value <= hi and s.loro_delta_reference > 0
    assert ev.oracle_in_sample_avg >= max(v.in_sample_avg for v in ev.summary.values())
    assert ev.summary["lookup_table"].ope["recipe_snips"] == pytest.approx(
        ev.summary["lookup_table"].ope["recipe_replay"]
    )
