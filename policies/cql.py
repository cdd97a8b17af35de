"""Discrete conservative Q-learning with gamma 0 (one-step episodes): the d3rlpy DiscreteCQL objective,
``Huber(Q(s,a), r) + alpha * mean(logsumexp_a' Q(s,a') - Q(s,a))``; alpha 1.0, 600 epochs. Artifact ``cql/policy.pth``.

On a full-factorial grid the logging policy is uniform, so the penalty pushes every action down evenly: CQL reduces
to a regularised Q regression here (see docs/policies.md).
"""

from __future__ import annotations

import torch
from torch.nn import functional as F

from policies.base import register
from policies.nets import data_values
from policies.qlearning import QRegressionPolicy


def cql_loss(q: torch.Tensor, a: torch.Tensor, r: torch.Tensor, alpha: float) -> torch.Tensor:
    q_data = data_values(q, a)
    return F.smooth_l1_loss(q_data, r) + alpha * (torch.logsumexp(q, dim=1) - q_data).mean()


@register
class CQL(QRegressionPolicy):
    name = "cql"
    defaults = {"alpha": 1.0, "epochs": 600}

    def loss(self, q: torch.Tensor, a: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        return cql_loss(q, a, r, self.params["alpha"])
