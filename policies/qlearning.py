"""One-step (gamma 0) Q regression with a QNetwork, shared by mlp_bandit and cql: the artifact is the state dict."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from policies.base import Policy
from policies.contract import PolicyDataset
from policies.nets import QNetwork, predict, seeded, train


class QRegressionPolicy(Policy):
    """Fits ``QNetwork(4, 19)`` by minimising ``loss(q_all, a, r)`` for ``epochs``; scores are Q(s, .)."""

    artifact = "policy.pth"

    def loss(self, q: torch.Tensor, a: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def fit(self, data: PolicyDataset) -> "QRegressionPolicy":
        with seeded(self.seed):
            self.net = QNetwork()
            self.history = train(self.net, data, self.loss, epochs=self.params["epochs"], seed=self.seed)
        return self

    def scores(self, states: np.ndarray) -> np.ndarray:
        return predict(self.net, states)

    def save_artifact(self, path: Path) -> None:
        torch.save(self.net.state_dict(), path)

    def load_artifact(self, path: Path) -> None:
        self.net = QNetwork()
        self.net.load_state_dict(torch.load(path))
        self.net.eval()
