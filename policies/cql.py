"""Discrete conservative Q-learning with gamma 0 (one-step episodes):
``td(Q(s,a), r) + alpha * mean(logsumexp_a' Q(s,a') - Q(s,a))``; alpha 1.0, 600 epochs. Artifact ``cql/policy.pth``.

``td_loss``: ``mse`` (default, the published ``06_cql.py``) or ``huber`` (d3rlpy's DiscreteCQL; half the MSE on
rewards in [0, 1], so the same alpha is effectively doubled).

On a full-factorial grid the logging policy is uniform, so the penalty pushes every action down evenly: CQL reduces
to a regularised Q regression here (see docs/policies.md).
"""

from __future__ import annotations

import torch
from torch.nn import functional as F

from policies.base import register
from policies.contract import N_ACTIONS
from policies.losses import CQL as CQLLoss
from policies.losses import Loss
from policies.qlearning import QRegressionPolicy


def cql_loss(q: torch.Tensor, a: torch.Tensor, r: torch.Tensor, alpha: float, td_loss: str = "mse") -> torch.Tensor:
    """The CQL objective on Q outputs (B, 19), logged actions (B,) and rewards (B,)."""
    return CQLLoss(alpha, td_loss).value(q, F.one_hot(a, N_ACTIONS).to(q.dtype), r)


@register
class CQL(QRegressionPolicy):
    name = "cql"
    defaults = {"alpha": 1.0, "epochs": 600, "td_loss": "mse"}
    choices = {"td_loss": ("mse", "huber")}
    published = {"td_loss": "mse"}

    def make_loss(self) -> Loss:
        return CQLLoss(self.params["alpha"], self.params["td_loss"])
