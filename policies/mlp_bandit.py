"""Contextual bandit by Q regression (gamma 0): MSE between Q(s, a) and r; 200 epochs. Artifact ``mlp_bandit/policy.pth``."""

from __future__ import annotations

from policies.base import register
from policies.losses import MSE, Loss
from policies.qlearning import QRegressionPolicy


@register
class MlpBandit(QRegressionPolicy):
    name = "mlp_bandit"
    defaults = {"epochs": 200}

    def make_loss(self) -> Loss:
        return MSE()
