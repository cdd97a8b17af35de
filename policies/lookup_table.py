"""Per-batch-size empirical best: the action with the highest mean reward among those logged at that batch size.

Artifact ``lookup_table/model.json``: ``{batch_size: {"config": [s, k, d], "mean_reward": x}}``. A state's batch size
is read from feature 0 (bs/8); an unseen batch size uses the nearest known one.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from harness.core.jsonl import write_json_atomic
from harness.grid import action_index
from policies.base import Policy, register
from policies.contract import ACTIONS, N_ACTIONS, PolicyDataset, batch_sizes_of, nearest


@register
class LookupTable(Policy):
    name = "lookup_table"
    artifact = "model.json"

    def fit(self, data: PolicyDataset) -> "LookupTable":
        self.means = {bs: np.where(np.isnan(m), -np.inf, m) for bs, m in data.cell_means().items()}
        return self

    def scores(self, states: np.ndarray) -> np.ndarray:
        return np.stack([self.means[nearest(int(b), list(self.means))] for b in batch_sizes_of(states)])

    def table(self) -> dict[str, dict]:
        return {
            str(bs): {"config": ACTIONS[int(np.argmax(m))].as_list(), "mean_reward": float(np.max(m))}
            for bs, m in self.means.items()
        }

    def save_artifact(self, path: Path) -> None:
        write_json_atomic(path, self.table())

    def load_artifact(self, path: Path) -> None:
        """Only the best config per batch size is stored: it scores its mean reward, every other action -inf."""
        self.means = {}
        for bs, entry in json.loads(path.read_text()).items():
            m = np.full(N_ACTIONS, -np.inf)
            m[action_index(entry["config"])] = entry["mean_reward"]
            self.means[int(bs)] = m
