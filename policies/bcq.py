"""Discrete batch-constrained Q-learning with gamma 0: a behaviour net (cross-entropy on the logged actions, 300
epochs), then a Q net (regression on the reward, 300 epochs); at decision time actions with pi_b(a|s) / max pi_b <=
threshold (0.3) are filtered out (all legal actions stay when none passes), then greedy on Q. Artifact
``bcq/policy.pth``: a dict with ``behavior_state_dict``, ``q_state_dict`` and ``actions``.

Options (defaults = the published ``07_bcq.py``): ``q_loss`` ``mse`` | ``huber`` (d3rlpy's Q loss); ``q_shuffle``
``continue`` (one shuffle generator seeded once runs through both phases) | ``reseed`` (the Q phase gets a fresh
generator seeded ``seed + 1``).

On a full-factorial grid the behaviour policy is uniform, so the filter keeps (almost) every logged action and BCQ
reduces to Q regression (see docs/policies.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from policies.base import Policy, register
from policies.contract import ACTIONS, PolicyDataset
from policies.losses import TD_LOSSES, CrossEntropy
from policies.nets import BehaviorNetwork, QNetwork, predict, seeded, train_batched


@register
class BCQ(Policy):
    name = "bcq"
    artifact = "policy.pth"
    defaults = {"threshold": 0.3, "behavior_epochs": 300, "q_epochs": 300, "q_loss": "mse", "q_shuffle": "continue"}
    choices = {"q_loss": ("mse", "huber"), "q_shuffle": ("continue", "reseed")}
    published = {"q_loss": "mse", "q_shuffle": "continue"}

    def fit(self, data: PolicyDataset) -> "BCQ":
        self._fit_all([self], [data])
        return self

    @classmethod
    def fit_many(cls, datasets: list[PolicyDataset], seed: int = 0, **params: Any) -> list[Policy]:
        if len({len(d) for d in datasets}) != 1:
            return super().fit_many(datasets, seed, **params)
        return cls._fit_all([cls(seed=seed, **params) for _ in datasets], datasets)

    @staticmethod
    def _fit_all(policies: list["BCQ"], datasets: list[PolicyDataset]) -> list[Policy]:
        """Behaviour nets first (cross-entropy), then Q nets (``q_loss`` on r); folds train together."""
        for p in policies:
            with seeded(p.seed):
                p.behavior, p.q = BehaviorNetwork(), QNetwork()
        first, seeds = policies[0], [p.seed for p in policies]
        gens = [torch.Generator().manual_seed(s) for s in seeds]
        with seeded(first.seed):
            train_batched(
                [p.behavior for p in policies],
                datasets,
                CrossEntropy(),
                epochs=first.params["behavior_epochs"],
                generators=gens,
            )
            if first.params["q_shuffle"] == "reseed":
                gens = [torch.Generator().manual_seed(s + 1) for s in seeds]
            q_loss = TD_LOSSES[first.params["q_loss"]]()
            train_batched([p.q for p in policies], datasets, q_loss, epochs=first.params["q_epochs"], generators=gens)
        return list(policies)

    def allowed(self, states: np.ndarray, legal_mask: np.ndarray | None = None) -> np.ndarray:
        """(n, 19) bool: actions whose behaviour probability ratio to the best (legal) action exceeds the threshold."""
        logits = predict(self.behavior, states)
        if legal_mask is not None:
            logits = np.where(np.broadcast_to(legal_mask, logits.shape), logits, -np.inf)
        probs = np.exp(logits - logits.max(axis=1, keepdims=True))
        return probs / probs.max(axis=1, keepdims=True) > self.params["threshold"]

    def scores(self, states: np.ndarray) -> np.ndarray:
        return np.where(self.allowed(states), predict(self.q, states), -np.inf)

    def act(self, states: np.ndarray, legal_mask: np.ndarray | None = None) -> np.ndarray:
        x = np.atleast_2d(states)
        keep = self.allowed(x, legal_mask)
        legal = np.ones_like(keep) if legal_mask is None else np.broadcast_to(legal_mask, keep.shape)
        keep = np.where(keep.any(axis=1, keepdims=True), keep, legal)  # the published fallback: threshold too strict
        return np.argmax(np.where(keep, predict(self.q, x), -np.inf), axis=1)

    def save_artifact(self, path: Path) -> None:
        torch.save(
            {
                "behavior_state_dict": self.behavior.state_dict(),
                "q_state_dict": self.q.state_dict(),
                "actions": [a.as_list() for a in ACTIONS],
            },
            path,
        )

    def load_artifact(self, path: Path) -> None:
        blob = torch.load(path, weights_only=True)
        self.behavior, self.q = BehaviorNetwork(), QNetwork()
        self.behavior.load_state_dict(blob["behavior_state_dict"])
        self.q.load_state_dict(blob["q_state_dict"])
        self.behavior.eval()
        self.q.eval()
