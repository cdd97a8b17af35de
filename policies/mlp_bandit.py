"""Contextual bandit by Q regression (gamma 0): MSE between Q(s, a) and r; 200 epochs. Artifact ``mlp_bandit/policy.pth``."""

from __future__ import annotations

import torch
from torch.nn import functional as F

from policies.base import register
from policies.nets import data_values
from policies.qlearning import QRegressionPolicy


@register
class MlpBandit(QRegressionPolicy):
    name = "mlp_bandit"
    defaults = {"epochs": 200}

    def loss(self, q: torch.Tensor, a: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        return F.mse_loss(data_values(q, a), r)
