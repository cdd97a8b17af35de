"""Tuned CQL and BCQ variants: hyper-parameters chosen by leave-one-repeat-out value on held-out repeats.

The published defaults (CQL alpha 1.0, BCQ threshold 0.3) are trained as ``cql`` and ``bcq``; the variants are saved
as ``cql_tuned`` and ``bcq_tuned`` with the chosen values in their ``params.json``. Selection uses the same held-out
folds that ``harness evaluate`` reports, so a tuned variant's held-out figure is optimistic (no nested CV); the
tuning table in ``tuning.json`` shows every candidate's held-out value.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from pydantic import BaseModel

from policies.base import pick, policy_class
from policies.contract import PolicyDataset, action_index
from policies.evaluate import fold_datasets, loro_repeats, value_at

# CQL: the conservative weight (alpha 0 is plain Q regression with the td_loss, MSE by default) at the mlp_bandit epoch budget.
CQL_GRID: list[dict[str, Any]] = [{"alpha": a, "epochs": 200} for a in (0.0, 0.01, 0.1, 1.0)]
# BCQ: the filter threshold acts at decision time only, so each fold's nets are trained once for all candidates.
BCQ_GRID: list[dict[str, Any]] = [{"threshold": t} for t in (0.0, 0.1, 0.3, 0.6, 0.9)]


class Candidate(BaseModel):
    params: dict[str, Any]
    heldout_value: float


class Tuning(BaseModel):
    variant: str
    algorithm: str
    chosen: dict[str, Any]
    candidates: list[Candidate]


def _heldout_value(policy: Any, train: PolicyDataset, held: PolicyDataset) -> float:
    picks = pick(policy, train)
    return float(np.mean([value_at(held, bs, action_index(picks[bs])) for bs in held.batch_size_list if bs in picks]))


def _folds(data: PolicyDataset) -> list[tuple[PolicyDataset, PolicyDataset]]:
    """The leave-one-repeat-out folds, rewards rebuilt per fold as ``harness evaluate`` does (no held-out leak)."""
    return [fold_datasets(data, r) for r in loro_repeats(data, "tuning on held-out repeats")]


def tune_cql(data: PolicyDataset, seed: int = 0) -> Tuning:
    folds = _folds(data)
    cands = []
    for params in CQL_GRID:
        fitted = policy_class("cql").fit_many([t for t, _ in folds], seed, **params)
        cands.append(
            Candidate(
                params=params,
                heldout_value=float(np.mean([_heldout_value(p, t, h) for p, (t, h) in zip(fitted, folds)])),
            )
        )
    best = max(cands, key=lambda c: c.heldout_value)  # first best wins ties (grid order)
    return Tuning(variant="cql_tuned", algorithm="cql", chosen=best.params, candidates=cands)


def tune_bcq(data: PolicyDataset, seed: int = 0) -> Tuning:
    folds = _folds(data)
    fitted = policy_class("bcq").fit_many([t for t, _ in folds], seed)
    cands = []
    for params in BCQ_GRID:
        values = []
        for p, (t, h) in zip(fitted, folds):
            p.params.update(params)
            values.append(_heldout_value(p, t, h))
        cands.append(Candidate(params=params, heldout_value=float(np.mean(values))))
    best = max(cands, key=lambda c: c.heldout_value)
    return Tuning(variant="bcq_tuned", algorithm="bcq", chosen=best.params, candidates=cands)


def tune_variants(data: PolicyDataset, seed: int = 0) -> list[Tuning]:
    return [tune_cql(data, seed), tune_bcq(data, seed)]
