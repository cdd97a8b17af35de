"""Gradient-boosted trees (sklearn, 100 trees, depth 3) on ``[state..., action_idx/19]``. Artifact ``gbt/model.joblib``."""

from __future__ import annotations

from sklearn.ensemble import GradientBoostingRegressor

from policies.base import register
from policies.regression import RegressionPolicy


@register
class GBT(RegressionPolicy):
    name = "gbt"
    defaults = {"n_estimators": 100, "max_depth": 3}

    def make_model(self) -> GradientBoostingRegressor:
        return GradientBoostingRegressor(
            n_estimators=self.params["n_estimators"], max_depth=self.params["max_depth"], random_state=self.seed
        )
