"""Offline evaluation, written once for every algorithm.

1. In-sample: each algorithm's picks vs the fixed reference (3,4,8) vs the per-batch-size oracle (best cell mean).
2. Leave-one-repeat-out (LORO), all folds: refit on the other repeats, pick per batch size, score the picks on the
   held-out repeat by full-information replay (the grid logs every action, so the picked config's reward is observed);
   regret against the held-out oracle; paired delta to the reference; bootstrap CIs over (fold, batch size) units.
   Each fold's rewards are rebuilt from that fold's own rows (``fold_datasets``): training rewards use only training
   baselines, held-out rewards the held-out repeat's own, as the published ``validate_holdout.py`` does; slicing the
   full-file rewards would score training rows against the held-out repeat's baseline (the ``last`` rule).
3. Off-policy estimates on each held-out repeat with the known logging propensities (uniform over the actions logged
   at each batch size, 1/19 on a full grid): IPS, SNIPS and DR (q-hat = training-repeat cell means), for the recipe
   (per-batch-size picks) and for the contextual policy (greedy on each held-out row's own state).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel

from harness.core.errors import DataError
from policies import ope
from policies.base import ALGORITHMS, Policy, fit_policy, load_policy, pick, policy_class
from policies.contract import ACTIONS, N_ACTIONS, REFERENCE, PolicyDataset, action_index, dataset_from_rows

REF = action_index(REFERENCE)


class PickScore(BaseModel):
    batch_size: int
    config: list[int]
    reward: float
    reference: float
    oracle: float
    oracle_config: list[int]


class FoldScore(BaseModel):
    algo: str
    fold: int  # the held-out repeat
    batch_size: int
    config: list[int]
    value: float
    reference: float
    oracle: float
    oracle_config: list[int]
    regret: float
    hit: bool


class AlgoSummary(BaseModel):
    algo: str
    in_sample_avg: float
    delta_reference_in_sample: float
    loro_value: float | None = None
    loro_value_ci: tuple[float, float] | None = None
    loro_regret: float | None = None
    loro_regret_ci: tuple[float, float] | None = None
    loro_delta_reference: float | None = None
    loro_delta_reference_ci: tuple[float, float] | None = None
    hit_rate: float | None = None
    ope: dict[str, float] = {}


class CellStat(BaseModel):
    """Means over repeats of one (batch size, config) cell: for the throughput and energy-band figures."""

    batch_size: int
    config: list[int]
    reward: float
    speed_tok_s: float
    utilization: float
    n: int


class Evaluation(BaseModel):
    dataset: str
    state: str
    reward_options: dict[str, Any]
    rows: int
    folds: list[int]
    reference_in_sample_avg: float
    oracle_in_sample_avg: float
    in_sample: dict[str, list[PickScore]]
    cells: list[CellStat]
    fold_scores: list[FoldScore]
    summary: dict[str, AlgoSummary]
    params: dict[str, dict[str, Any]]
    seconds: float


def cell_stats(data: PolicyDataset) -> list[CellStat]:
    rewards, speeds, utils = data.cell_means(), data.cell_means(data.speeds), data.cell_means(data.utilization)
    out = []
    for bs in data.batch_size_list:
        for a in np.flatnonzero(data.legal_mask(bs)):
            n = int(((data.batch_sizes == bs) & (data.actions == a)).sum())
            out.append(CellStat(batch_size=bs, config=ACTIONS[a].as_list(), reward=float(rewards[bs][a]), speed_tok_s=float(speeds[bs][a]),
                                utilization=float(utils[bs][a]), n=n))  # fmt: skip
    return out


def value_at(data: PolicyDataset, batch_size: int, action: int) -> float:
    """Mean reward of the rows at (batch size, action); 0 when the config was never measured there (an errored cell)."""
    sel = (data.batch_sizes == batch_size) & (data.actions == action)
    return float(data.rewards[sel].mean()) if sel.any() else 0.0


def oracle_at(data: PolicyDataset, batch_size: int) -> tuple[int, float]:
    m = data.cell_means()[batch_size]
    a = int(np.nanargmax(m))
    return a, float(m[a])


def in_sample(data: PolicyDataset, picks: dict[int, Any]) -> list[PickScore]:
    out = []
    for bs, cfg in sorted(picks.items()):
        if bs not in data.batch_size_list:
            continue
        oa, ov = oracle_at(data, bs)
        out.append(PickScore(batch_size=bs, config=cfg.as_list(), reward=value_at(data, bs, action_index(cfg)),
                             reference=value_at(data, bs, REF), oracle=ov, oracle_config=ACTIONS[oa].as_list()))  # fmt: skip
    return out


def q_hat_from(train: PolicyDataset, rows: PolicyDataset) -> np.ndarray:
    """(n, 19): training-repeat cell means at each row's batch size (0 where the training data never logged the action)."""
    means = train.cell_means()
    return np.stack([np.nan_to_num(means.get(int(b), np.zeros(N_ACTIONS)), nan=0.0) for b in rows.batch_sizes])


def ope_estimates(train: PolicyDataset, held: PolicyDataset, target: np.ndarray) -> dict[str, float]:
    """IPS, SNIPS, DR and full-information replay of deterministic per-row target actions on held-out rows."""
    dist = ope.one_hot(target, N_ACTIONS)
    p = held.pscores()
    replay = float(np.mean([value_at(held, int(b), int(a)) for b, a in zip(held.batch_sizes, target)]))
    return {
        "ips": ope.ips(held.rewards, held.actions, p, dist),
        "snips": ope.snips(held.rewards, held.actions, p, dist),
        "dr": ope.dr(held.rewards, held.actions, p, dist, q_hat_from(train, held)),
        "replay": replay,
    }


def _fold(
    name: str, policy: Policy, train: PolicyDataset, held: PolicyDataset, fold: int
) -> tuple[list[FoldScore], dict[str, float]]:
    picks = pick(policy, train)
    scores = []
    for bs in held.batch_size_list:
        a = action_index(picks[bs]) if bs in picks else REF
        oa, ov = oracle_at(held, bs)
        v = value_at(held, bs, a)
        scores.append(FoldScore(algo=name, fold=fold, batch_size=bs, config=ACTIONS[a].as_list(), value=v, reference=value_at(held, bs, REF),
                                oracle=ov, oracle_config=ACTIONS[oa].as_list(), regret=ov - v, hit=a == oa))  # fmt: skip
    recipe = np.array([action_index(picks.get(int(b), REFERENCE)) for b in held.batch_sizes])
    legal = np.stack(
        [
            train.legal_mask(int(b)) if int(b) in train.batch_size_list else np.ones(N_ACTIONS, bool)
            for b in held.batch_sizes
        ]
    )
    contextual = policy.act(held.states, legal)
    est = {f"recipe_{k}": v for k, v in ope_estimates(train, held, recipe).items()}
    est.update({f"contextual_{k}": v for k, v in ope_estimates(train, held, contextual).items()})
    return scores, est


def fold_datasets(data: PolicyDataset, repeat: int) -> tuple[PolicyDataset, PolicyDataset]:
    """(training, held-out) datasets of the fold that holds out ``repeat``, each with rewards rebuilt from its own rows.

    Under the ``last`` baseline rule the full file's baseline per batch size is the last repeat's, so slicing the
    full-file rewards would let the held-out repeat set the training rewards (a leak). Raises DataError when a side
    lacks a baseline row at some batch size."""

    def build(rows: list, what: str) -> PolicyDataset:
        return dataset_from_rows(
            rows, state=data.state_kind, reward=data.reward_options, source=f"{data.source} ({what})"
        )

    train = build(
        [r for r in data.rows if r.repeat != repeat], f"training rows of the fold holding out repeat {repeat}"
    )
    held = build([r for r in data.rows if r.repeat == repeat], f"held-out repeat {repeat}")
    return train, held


def loro_repeats(data: PolicyDataset, what: str = "leave-one-repeat-out") -> list[int]:
    """The repeats to hold out in turn; DataError with fewer than 2."""
    folds = [r for r in data.repeat_list if r >= 0]
    if len(folds) < 2:
        raise DataError(
            f"{data.source}: {what} needs at least 2 repeats, found {folds}", fix="run the grid with --repeats 3"
        )
    return folds


def loro(
    data: PolicyDataset, algos: list[str], params: dict[str, dict], seed: int = 0
) -> tuple[list[FoldScore], dict[str, dict[str, float]]]:
    """Leave-one-repeat-out over every repeat; returns the per-(algo, fold, bs) scores and mean OPE estimates per algo."""
    folds = loro_repeats(data)
    splits = [fold_datasets(data, r) for r in folds]
    all_scores: list[FoldScore] = []
    estimates: dict[str, dict[str, float]] = {}
    for name in algos:
        per_fold = []
        fitted = policy_class(name).fit_many([t for t, _ in splits], seed, **params.get(name, {}))
        for r, (train, held), policy in zip(folds, splits, fitted):
            s, e = _fold(name, policy, train, held, r)
            all_scores += s
            per_fold.append(e)
        estimates[name] = {k: float(np.mean([e[k] for e in per_fold])) for k in per_fold[0]}
    return all_scores, estimates


def _ci(values: list[float], seed: int) -> tuple[float, float]:
    return ope.bootstrap_ci(np.array(values), seed=seed)


def summarise(
    name: str, ins: list[PickScore], folds: list[FoldScore], est: dict[str, float] | None, seed: int
) -> AlgoSummary:
    s = AlgoSummary(algo=name, in_sample_avg=float(np.mean([p.reward for p in ins])),
                    delta_reference_in_sample=float(np.mean([p.reward - p.reference for p in ins])))  # fmt: skip
    mine = [f for f in folds if f.algo == name]
    if mine:
        values, regrets = [f.value for f in mine], [f.regret for f in mine]
        deltas = [f.value - f.reference for f in mine]
        s.loro_value, s.loro_value_ci = float(np.mean(values)), _ci(values, seed)
        s.loro_regret, s.loro_regret_ci = float(np.mean(regrets)), _ci(regrets, seed)
        s.loro_delta_reference, s.loro_delta_reference_ci = float(np.mean(deltas)), _ci(deltas, seed)
        s.hit_rate = float(np.mean([f.hit for f in mine]))
        s.ope = est or {}
    return s


def stored_params(models_dir: str | Path | None, name: str) -> dict[str, Any]:
    if models_dir is None:
        return {}
    import json

    path = Path(models_dir) / name / "params.json"
    return json.loads(path.read_text()).get("params", {}) if path.exists() else {}


def evaluate(
    data: PolicyDataset,
    *,
    models_dir: str | Path | None = None,
    algos: list[str] | None = None,
    seed: int = 0,
    with_loro: bool = True,
    params: dict[str, dict[str, Any]] | None = None,
    trust_artifacts: bool = False,
) -> Evaluation:
    """In-sample (trained artifacts from ``models_dir``, checked against train.json's sha256 unless
    ``trust_artifacts``, or fresh fits) plus LORO and OPE for each algorithm."""
    t0 = time.perf_counter()
    algos = list(algos or ALGORITHMS)
    params = {n: {**stored_params(models_dir, n), **(params or {}).get(n, {})} for n in algos}
    policies: dict[str, Policy] = {}
    for n in algos:
        policy_class(n)
        policies[n] = (
            load_policy(models_dir, n, data, trust=trust_artifacts)
            if models_dir is not None
            else fit_policy(n, data, seed, **params[n])
        )
    ins = {n: in_sample(data, pick(p, data)) for n, p in policies.items()}
    folds, est = loro(data, algos, params, seed) if with_loro else ([], {})
    bss = data.batch_size_list
    return Evaluation(
        dataset=data.source, state=data.state_kind, reward_options=data.reward_options.model_dump(), rows=len(data), folds=[r for r in data.repeat_list if r >= 0] if with_loro else [],
        reference_in_sample_avg=float(np.mean([value_at(data, b, REF) for b in bss])),
        oracle_in_sample_avg=float(np.mean([oracle_at(data, b)[1] for b in bss])),
        in_sample=ins, cells=cell_stats(data), fold_scores=folds, summary={n: summarise(n, ins[n], folds, est.get(n), seed) for n in algos},
        params=params, seconds=round(time.perf_counter() - t0, 3),
    )  # fmt: skip
