"""Doubly robust: a LinearRegression direct model on ``[state..., action_idx/19]`` plus an IPS correction.

Artifact ``doubly_robust/model.joblib`` (the LinearRegression only). The correction is not stored: at pick time it is
recomputed from the sweep data (``prepare``) with uniform propensities over the actions logged at each batch size:
``c_bs[k] = mean_{i at bs} 1[a_i = k] / p_i * (r_i - q(x_i, a_i))``, and ``score_k(x) = q(x, k) + c_bs(x)[k]``.
Averaged over a batch size's rows this is exactly obp's DoublyRobust value of the constant policy "always k".
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
from sklearn.linear_model import LinearRegression

from policies.base import register
from policies.contract import N_ACTIONS, PolicyDataset, batch_sizes_of, nearest
from policies.regression import RegressionPolicy, features


@register
class DoublyRobust(RegressionPolicy):
    name = "doubly_robust"
    defaults: ClassVar[dict[str, Any]] = {}

    def make_model(self) -> LinearRegression:
        return LinearRegression()

    def fit(self, data: PolicyDataset) -> "DoublyRobust":
        super().fit(data)
        self.prepare(data)
        return self

    def prepare(self, data: PolicyDataset) -> None:
        residual = data.rewards - self.model.predict(features(data.states, data.actions))
        weighted = residual / data.pscores()
        self.correction: dict[int, np.ndarray] = {}
        for bs in data.batch_size_list:
            sel = data.batch_sizes == bs
            self.correction[bs] = np.bincount(data.actions[sel], weights=weighted[sel], minlength=N_ACTIONS) / sel.sum()

    def scores(self, states: np.ndarray) -> np.ndarray:
        q = self.q_hat(states)
        table = getattr(self, "correction", {})
        if not table:
            return q  # no sweep data attached: the direct model alone
        rows = [table[nearest(int(b), list(table))] for b in batch_sizes_of(states)]
        return q + np.stack(rows)
