"""Bayesian linear Thompson sampling: theta_k ~ N(mean_k, sigma^2 A_k^-1), a fresh posterior draw per decision.

Artifact ``thompson_sampling/model.npz`` with ``mean`` (19, 4), ``cov`` (19, 4, 4), ``actions`` (19, 3).

``draws`` says where the randomness comes from; both give every decision (so every batch size) its own draw:
- ``sequential`` (default, the published ``03_thompson_sampling.py``): one generator seeded once when the policy is
  fitted or loaded, advanced by every decision; ``act`` draws only the legal actions, in index order, each as
  ``rng.multivariate_normal(mean_k, cov_k)`` would. Picking the batch sizes in ascending order right after fitting
  reproduces the published script's picks. A decision depends on the decisions made before it.
- ``per_state``: a generator seeded from (seed, the state's bytes): a pure function of the seed and the state, the
  same whatever was decided before; states that differ (another batch size) get independent draws.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from policies.base import register
from policies.contract import N_ACTIONS, STATE_DIM, PolicyDataset
from policies.linear import LinearArmsPolicy


@register
class ThompsonSampling(LinearArmsPolicy):
    name = "thompson_sampling"
    defaults = {"sigma": 1.0, "l2_lambda": 1.0, "draws": "sequential"}
    choices = {"draws": ("sequential", "per_state")}
    published = {"draws": "sequential"}
    keys = ("mean", "cov")

    def fit(self, data: PolicyDataset) -> "ThompsonSampling":
        super().fit(data)
        self._rng = np.random.default_rng(self.seed)
        return self

    def load_artifact(self, path: Path) -> None:
        super().load_artifact(path)
        self._rng = np.random.default_rng(self.seed)

    def _second(self) -> np.ndarray:
        return self.params["sigma"] ** 2 * np.linalg.inv(self.A)

    def _set_second(self, value: np.ndarray) -> None:
        self.A = np.linalg.inv(value / self.params["sigma"] ** 2)

    @property
    def cov(self) -> np.ndarray:
        return self._second()

    def draw(self, states: np.ndarray, legal_mask: np.ndarray | None = None) -> np.ndarray:
        """(n, 19, 4) posterior draws of theta per state, NaN for actions not drawn (illegal, with ``sequential``)."""
        x = np.atleast_2d(states)
        u, s, vh = np.linalg.svd(self.cov)
        factor = vh * np.sqrt(s)[..., None]  # theta = mean + z @ factor, as Generator.multivariate_normal (svd) does
        if self.params["draws"] == "per_state":
            mask = np.ones((len(x), N_ACTIONS), dtype=bool)
            z = np.stack([np.random.default_rng([self.seed, *np.frombuffer(row.astype(np.float64).tobytes(), np.uint32)]).standard_normal((N_ACTIONS, STATE_DIM))
                          for row in x])  # fmt: skip
        else:
            mask = (
                np.ones((len(x), N_ACTIONS), dtype=bool)
                if legal_mask is None
                else np.broadcast_to(legal_mask, (len(x), N_ACTIONS))
            )
            z = np.full((len(x), N_ACTIONS, STATE_DIM), np.nan)
            z[mask] = self._rng.standard_normal((int(mask.sum()), STATE_DIM))  # state-major, then action index order
        return self.theta[None] + np.einsum("nkj,kji->nki", z, factor)

    def scores(self, states: np.ndarray) -> np.ndarray:
        """x . theta~ with a fresh posterior draw per state and action."""
        x = np.atleast_2d(states)
        return np.einsum("ni,nki->nk", x, self.draw(x))

    def act(self, states: np.ndarray, legal_mask: np.ndarray | None = None) -> np.ndarray:
        x = np.atleast_2d(states)
        s = np.einsum("ni,nki->nk", x, self.draw(x, legal_mask))
        if legal_mask is not None:
            s = np.where(np.broadcast_to(legal_mask, s.shape), s, -np.inf)
        return np.argmax(np.where(np.isnan(s), -np.inf, s), axis=1)
