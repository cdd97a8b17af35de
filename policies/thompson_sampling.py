"""Bayesian linear Thompson sampling: theta_k ~ N(mean_k, sigma^2 A_k^-1), one seeded draw per decision.

Artifact ``thompson_sampling/model.npz`` with ``mean`` (19, 4), ``cov`` (19, 4, 4), ``actions`` (19, 3).
"""

from __future__ import annotations

import numpy as np

from policies.base import register
from policies.linear import LinearArmsPolicy


@register
class ThompsonSampling(LinearArmsPolicy):
    name = "thompson_sampling"
    defaults = {"sigma": 1.0, "l2_lambda": 1.0}
    keys = ("mean", "cov")

    def _second(self) -> np.ndarray:
        return self.params["sigma"] ** 2 * np.linalg.inv(self.A)

    def _set_second(self, value: np.ndarray) -> None:
        self.A = np.linalg.inv(value / self.params["sigma"] ** 2)

    @property
    def cov(self) -> np.ndarray:
        return self._second()

    def scores(self, states: np.ndarray) -> np.ndarray:
        """x . theta~ with a fresh posterior draw per state; the draws are a pure function of the seed and the states."""
        x = np.atleast_2d(states)
        rng = np.random.default_rng(self.seed)
        chol = np.linalg.cholesky(self.cov)  # (19, 4, 4)
        z = rng.standard_normal((len(x), *self.theta.shape))  # (n, 19, 4)
        draws = self.theta[None] + np.einsum("kij,nkj->nki", chol, z)
        return np.einsum("ni,nki->nk", x, draws)
