"""LinUCB (ridge lambda 1): score_k(x) = x.theta_k + alpha sqrt(x' A_k^-1 x). Artifact ``linucb/model.npz``.

``alpha`` defaults to 0: the published ``02_linucb.py`` fits theta and A but picks greedily on x.theta (its bonus is
"only for online collection", and the logs are already collected). ``alpha > 0`` adds the exploration bonus.
"""

from __future__ import annotations

import numpy as np

from policies.base import register
from policies.linear import LinearArmsPolicy


@register
class LinUCB(LinearArmsPolicy):
    name = "linucb"
    defaults = {"alpha": 0.0, "l2_lambda": 1.0}
    published = {"alpha": 0.0}

    def scores(self, states: np.ndarray) -> np.ndarray:
        x = np.atleast_2d(states)
        greedy = x @ self.theta.T
        if not self.params["alpha"]:
            return greedy
        bonus = np.sqrt(np.einsum("ni,kij,nj->nk", x, np.linalg.inv(self.A), x))
        return greedy + self.params["alpha"] * bonus
