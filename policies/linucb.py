"""LinUCB (ridge lambda 1): score_k(x) = x.theta_k + alpha sqrt(x' A_k^-1 x). Artifact ``linucb/model.npz``."""

from __future__ import annotations

import numpy as np

from policies.base import register
from policies.linear import LinearArmsPolicy


@register
class LinUCB(LinearArmsPolicy):
    name = "linucb"
    defaults = {"alpha": 1.0, "l2_lambda": 1.0}

    def scores(self, states: np.ndarray) -> np.ndarray:
        x = np.atleast_2d(states)
        bonus = np.sqrt(np.einsum("ni,kij,nj->nk", x, np.linalg.inv(self.A), x))
        return x @ self.theta.T + self.params["alpha"] * bonus
