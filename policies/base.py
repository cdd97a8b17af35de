"""One Policy protocol, one registry, and the load / pick / train loop written once for all eight algorithms.

A policy maps states (n, 4) to scores (n, 19) (action values, upper confidence bounds, posterior draws ...) and acts
greedily under a legality mask. Its artifact lives at ``<models>/<name>/<artifact>`` in the published format, with the
hyper-parameters beside it in ``params.json``. Picks follow the published rule: per batch size, the state of that batch
size's first row and only the actions present at that batch size.
"""

from __future__ import annotations

import importlib
import json
import time
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from pydantic import BaseModel

from harness.errors import DataError, MissingFileError, UsageError
from harness.extras import needs
from harness.grid import SpecConfig
from harness.jsonl import write_json_atomic
from policies.contract import ACTIONS, PolicyDataset

ALGORITHMS: tuple[str, ...] = ("mlp_bandit", "lookup_table", "linucb", "thompson_sampling", "gbt", "doubly_robust", "cql", "bcq")
"""The eight published algorithms, in published order; each lives in ``policies/<name>.py``."""
VARIANTS: dict[str, str] = {"cql_tuned": "cql", "bcq_tuned": "bcq"}
"""Tuned variants (hyper-parameters chosen on held-out repeats) and the algorithm they use."""
PICKS_FILE = "picks.json"
TRAIN_FILE = "train.json"
PARAMS_FILE = "params.json"


class Policy(ABC):
    """The protocol every algorithm implements. ``fit`` / ``scores`` / ``act`` / ``save`` / ``load``."""

    name: ClassVar[str]
    artifact: ClassVar[str]
    defaults: ClassVar[dict[str, Any]] = {}

    def __init__(self, seed: int = 0, **params: Any) -> None:
        unknown = set(params) - set(self.defaults)
        if unknown:
            raise UsageError(f"{self.name}: unknown hyper-parameters {sorted(unknown)}", fix=f"known: {sorted(self.defaults)}")
        self.seed = seed
        self.params = {**self.defaults, **params}

    @abstractmethod
    def fit(self, data: PolicyDataset) -> "Policy":
        """Learn from the dataset; return self."""

    @classmethod
    def fit_many(cls, datasets: list[PolicyDataset], seed: int = 0, **params: Any) -> list["Policy"]:
        """One policy per dataset (the leave-one-repeat-out folds); neural policies train the folds together."""
        return [cls(seed=seed, **params).fit(d) for d in datasets]

    @abstractmethod
    def scores(self, states: np.ndarray) -> np.ndarray:
        """(n, 19) scores; higher is better."""

    def prepare(self, data: PolicyDataset) -> None:
        """Attach the sweep data a loaded policy needs at pick time (doubly_robust's IPS term); no-op by default."""

    def act(self, states: np.ndarray, legal_mask: np.ndarray | None = None) -> np.ndarray:
        """Greedy action indices; illegal actions are masked to -inf. ``legal_mask`` is (19,) or (n, 19)."""
        s = np.array(self.scores(np.atleast_2d(states)), dtype=np.float64)
        if legal_mask is not None:
            s = np.where(np.broadcast_to(legal_mask, s.shape), s, -np.inf)
        s = np.where(np.isnan(s), -np.inf, s)
        return np.argmax(s, axis=1)

    @abstractmethod
    def save_artifact(self, path: Path) -> None:
        """Write the published artifact to ``path``."""

    @abstractmethod
    def load_artifact(self, path: Path) -> None:
        """Read the published artifact from ``path`` into self."""

    def save(self, directory: str | Path) -> Path:
        """Write ``directory/<artifact>`` and ``directory/params.json``; return the artifact path."""
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        self.save_artifact(d / self.artifact)
        write_json_atomic(d / PARAMS_FILE, {"algorithm": self.name, "seed": self.seed, "params": self.params})
        return d / self.artifact

    @classmethod
    def load(cls, directory: str | Path) -> "Policy":
        d = Path(directory)
        path = d / cls.artifact
        if not path.exists():
            raise MissingFileError(f"{cls.name} artifact not found: {path}", fix="train it first: harness train --dataset FILE --out DIR")
        meta = json.loads((d / PARAMS_FILE).read_text()) if (d / PARAMS_FILE).exists() else {}
        policy = cls(seed=int(meta.get("seed", 0)), **meta.get("params", {}))
        policy.load_artifact(path)
        return policy


_REGISTRY: dict[str, type[Policy]] = {}


def register(cls: type[Policy]) -> type[Policy]:
    """Class decorator: make an algorithm available by its ``name``."""
    _REGISTRY[cls.name] = cls
    return cls


def policy_class(name: str) -> type[Policy]:
    algo = VARIANTS.get(name, name)
    if algo not in ALGORITHMS:
        raise UsageError(f"unknown algorithm {name!r}", fix="choose from: " + ", ".join((*ALGORITHMS, *VARIANTS)))
    if algo not in _REGISTRY:
        with needs(f"policy {algo}"):
            importlib.import_module(f"policies.{algo}")
    return _REGISTRY[algo]


def make_policy(name: str, seed: int = 0, **params: Any) -> Policy:
    return policy_class(name)(seed=seed, **params)


def parse_algos(text: str | None) -> list[str]:
    """``"gbt,linucb"`` -> names; None or ``"all"`` -> the eight. Each is imported here, so an unknown name or a
    missing extra fails before anything is trained."""
    if not text or text.strip() == "all":
        names = list(ALGORITHMS)
    else:
        names = [t.strip() for t in text.replace(" ", ",").split(",") if t.strip()]
    for n in names:
        policy_class(n)
    return list(dict.fromkeys(names))


def load_policy(models_dir: str | Path, name: str, data: PolicyDataset | None = None) -> Policy:
    """Load ``<models_dir>/<name>`` as the model card says; ``data`` is attached for policies that need it at pick time."""
    policy = policy_class(name).load(Path(models_dir) / name)
    if data is not None:
        policy.prepare(data)
    return policy


def pick(policy: Policy, data: PolicyDataset) -> dict[int, SpecConfig]:
    """Per batch size: the greedy action at that batch size's first-row state among the actions present there."""
    out: dict[int, SpecConfig] = {}
    for bs in data.batch_size_list:
        a = int(policy.act(data.first_state(bs)[None, :], data.legal_mask(bs))[0])
        out[bs] = ACTIONS[a]
    return out


def picks_json(picks: dict[str, dict[int, SpecConfig]]) -> dict[str, dict[str, list[int]]]:
    """``{algo: {batch_size: [s, k, d]}}`` with string keys, as written to picks.json."""
    return {algo: {str(bs): cfg.as_list() for bs, cfg in p.items()} for algo, p in picks.items()}


def load_picks(models_dir: str | Path) -> dict[str, dict[int, SpecConfig]]:
    path = Path(models_dir) / PICKS_FILE
    if not path.exists():
        raise MissingFileError(f"no {PICKS_FILE} in {models_dir}", fix="train first: harness train --dataset FILE --out DIR")
    try:
        raw = json.loads(path.read_text())
        return {algo: {int(bs): SpecConfig(*map(int, cfg)) for bs, cfg in p.items()} for algo, p in raw.items()}
    except (ValueError, TypeError) as exc:
        raise DataError(f"{path} is not a picks file ({exc})", fix="retrain to rewrite it") from None


class TrainSummary(BaseModel):
    """What ``train`` wrote: artifacts, picks, timings; saved as ``train.json``."""

    dataset: str
    rows_used: int
    rows_skipped: int
    state: str
    reward_options: dict[str, Any]
    seed: int
    algorithms: list[str]
    artifacts: dict[str, str]
    picks: dict[str, dict[str, list[int]]]
    seconds: dict[str, float]
    total_seconds: float


def fit_policy(name: str, data: PolicyDataset, seed: int = 0, **params: Any) -> Policy:
    return make_policy(name, seed, **params).fit(data)


def train(
    data: PolicyDataset,
    out: str | Path,
    algos: list[str] | None = None,
    seed: int = 0,
    params: dict[str, dict[str, Any]] | None = None,
) -> TrainSummary:
    """Fit each algorithm on ``data``, save its artifact under ``out/<name>/``, write picks.json and train.json."""
    out = Path(out)
    algos = list(algos or ALGORITHMS)
    artifacts: dict[str, str] = {}
    picks: dict[str, dict[int, SpecConfig]] = {}
    seconds: dict[str, float] = {}
    t_all = time.perf_counter()
    for name in algos:
        t0 = time.perf_counter()
        policy = fit_policy(name, data, seed, **(params or {}).get(name, {}))
        picks[name] = pick(policy, data)
        artifacts[name] = str(policy.save(out / name).relative_to(out))
        seconds[name] = round(time.perf_counter() - t0, 3)
    summary = TrainSummary(
        dataset=data.source, rows_used=len(data), rows_skipped=data.skipped_errors, state=data.state_kind,
        reward_options=data.reward_options.model_dump(), seed=seed, algorithms=algos, artifacts=artifacts,
        picks=picks_json(picks), seconds=seconds, total_seconds=round(time.perf_counter() - t_all, 3),
    )  # fmt: skip
    existing = json.loads((out / PICKS_FILE).read_text()) if (out / PICKS_FILE).exists() else {}
    write_json_atomic(out / PICKS_FILE, {**existing, **summary.picks})
    write_json_atomic(out / TRAIN_FILE, summary.model_dump())
    return summary

