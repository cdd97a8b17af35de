"""Direct reward models on ``[state..., action_idx/19]``, shared by gbt and doubly_robust (artifact ``model.joblib``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from harness.core.extras import needs
from policies.base import Policy
from policies.contract import N_ACTIONS, PolicyDataset


def features(states: np.ndarray, actions: np.ndarray) -> np.ndarray:
    """Rows ``[state..., a/19]``."""
    return np.column_stack([np.atleast_2d(states), np.asarray(actions, dtype=np.float64) / N_ACTIONS])


def all_action_features(states: np.ndarray) -> np.ndarray:
    """(n * 19, 5): every state paired with every action, state-major."""
    x = np.atleast_2d(states)
    return features(np.repeat(x, N_ACTIONS, axis=0), np.tile(np.arange(N_ACTIONS), len(x)))


class RegressionPolicy(Policy):
    """Fits ``make_model()`` to rewards on ``[state, a/19]``; scores are its predictions for every action."""

    artifact = "model.joblib"

    def make_model(self) -> Any:
        raise NotImplementedError

    def fit(self, data: PolicyDataset) -> "RegressionPolicy":
        self.model = self.make_model().fit(features(data.states, data.actions), data.rewards)
        return self

    def q_hat(self, states: np.ndarray) -> np.ndarray:
        x = np.atleast_2d(states)
        return self.model.predict(all_action_features(x)).reshape(len(x), N_ACTIONS)

    def scores(self, states: np.ndarray) -> np.ndarray:
        return self.q_hat(states)

    def save_artifact(self, path: Path) -> None:
        with needs(f"saving {self.name}"):
            import joblib

        joblib.dump(self.model, path)

    def load_artifact(self, path: Path) -> None:
        with needs(f"loading {self.name}"):
            import joblib

        self.model = joblib.load(path)
