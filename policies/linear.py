"""Per-action ridge regression (lambda * I + X'X, no intercept), shared by LinUCB and linear Thompson sampling."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from policies.base import Policy
from policies.contract import ACTIONS, N_ACTIONS, STATE_DIM, PolicyDataset


def ridge_per_action(data: PolicyDataset, lam: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """(theta (19, 4), A (19, 4, 4)) with A_k = lam I + X_k'X_k and theta_k = A_k^-1 X_k'r_k."""
    A = np.repeat(lam * np.eye(STATE_DIM)[None], N_ACTIONS, axis=0)
    b = np.zeros((N_ACTIONS, STATE_DIM))
    for k in range(N_ACTIONS):
        x = data.states[data.actions == k]
        A[k] += x.T @ x
        b[k] = x.T @ data.rewards[data.actions == k]
    return np.linalg.solve(A, b[..., None])[..., 0], A


class LinearArmsPolicy(Policy):
    """A policy whose model is one linear model per action; subclasses name the npz keys and score."""

    artifact = "model.npz"
    keys: tuple[str, str] = ("theta", "A")

    def fit(self, data: PolicyDataset) -> "LinearArmsPolicy":
        self.theta, self.A = ridge_per_action(data, self.params["l2_lambda"])
        return self

    def save_artifact(self, path: Path) -> None:
        first, second = self.keys
        arrays = {first: self.theta, second: self._second(), "actions": np.array([a.as_list() for a in ACTIONS])}
        np.savez(path, **arrays)  # type: ignore[arg-type]  # numpy's stub lets **kwds fill allow_pickle: bool

    def load_artifact(self, path: Path) -> None:
        first, second = self.keys
        with np.load(path) as z:
            self.theta = z[first]
            self._set_second(z[second])

    def _second(self) -> np.ndarray:
        return self.A

    def _set_second(self, value: np.ndarray) -> None:
        self.A = value
