"""One-step (gamma 0) Q regression with a QNetwork, shared by mlp_bandit and cql: the artifact is the state dict.

``policy.pth`` is saved as the bare state dict (the model card: ``QNetwork(4, 19).load_state_dict(torch.load(p))``)
and loads in either shape: bare, or ``{"state_dict", "actions"}`` as the published training scripts save it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from harness.core.errors import DataError
from policies.base import Policy
from policies.contract import ACTIONS, PolicyDataset
from policies.losses import Loss
from policies.nets import QNetwork, predict, seeded, train_batched


class QRegressionPolicy(Policy):
    """Fits ``QNetwork(4, 19)`` by minimising ``make_loss()`` for ``epochs``; scores are Q(s, .)."""

    artifact = "policy.pth"

    def make_loss(self) -> Loss:
        raise NotImplementedError

    def fit(self, data: PolicyDataset) -> "QRegressionPolicy":
        self._fit_all([self], [data])
        return self

    @classmethod
    def fit_many(cls, datasets: list[PolicyDataset], seed: int = 0, **params: Any) -> list["Policy"]:
        if len({len(d) for d in datasets}) != 1:
            return super().fit_many(datasets, seed, **params)
        return cls._fit_all([cls(seed=seed, **params) for _ in datasets], datasets)

    @staticmethod
    def _fit_all(policies: list["QRegressionPolicy"], datasets: list[PolicyDataset]) -> list["Policy"]:
        """Each policy's net starts from its own seed; all train together (see nets.train_batched)."""
        for p in policies:
            with seeded(p.seed):
                p.net = QNetwork()
        first = policies[0]
        with seeded(first.seed):
            train_batched(
                [p.net for p in policies],
                datasets,
                first.make_loss(),
                epochs=first.params["epochs"],
                seeds=[p.seed for p in policies],
            )
        return list(policies)

    def scores(self, states: np.ndarray) -> np.ndarray:
        return predict(self.net, states)

    def save_artifact(self, path: Path) -> None:
        torch.save(self.net.state_dict(), path)

    def load_artifact(self, path: Path) -> None:
        self.net = QNetwork()
        self.net.load_state_dict(state_dict_of(torch.load(path, weights_only=True), path))
        self.net.eval()


def state_dict_of(blob: Any, path: Path) -> dict:
    """The QNetwork state dict in a loaded ``policy.pth``: bare, or under ``state_dict`` beside ``actions``."""
    if isinstance(blob, dict) and "state_dict" in blob:
        actions = blob.get("actions")
        if actions is not None and [list(map(int, a)) for a in actions] != [a.as_list() for a in ACTIONS]:
            raise DataError(f"{path}: its actions list is not the 19 published actions in published order",
                            fix="retrain it with harness train (the action index is the policy's output contract)")  # fmt: skip
        blob = blob["state_dict"]
    if not isinstance(blob, dict) or not all(k.startswith("net.") for k in blob):
        raise DataError(f"{path}: not a QNetwork state dict (keys net.0.*, net.2.*, net.4.*) nor a {{state_dict, actions}} dict",
                        fix="train it with harness train, or save QNetwork(4, 19).state_dict()")  # fmt: skip
    return blob
