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
from typing import Any, ClassVar, Mapping

import numpy as np
from pydantic import BaseModel

from harness.core.errors import DataError, HarnessError, MissingFileError, UsageError
from harness.core.extras import needs
from harness.core.jsonl import read_json_object, write_json_atomic
from harness.grid import SpecConfig
from policies.artifacts import previous_hashes, record, recorded_for, verify
from policies.contract import ACTIONS, PolicyDataset

ALGORITHMS: tuple[str, ...] = (
    "mlp_bandit",
    "lookup_table",
    "linucb",
    "thompson_sampling",
    "gbt",
    "doubly_robust",
    "cql",
    "bcq",
)
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
    choices: ClassVar[dict[str, tuple[str, ...]]] = {}
    """Allowed values of the named (string) options."""
    published: ClassVar[dict[str, Any]] = {}
    """The option values that reproduce the published script's behaviour (where the project offers another choice)."""

    def __init__(self, seed: int = 0, **params: Any) -> None:
        self.check_options(params)
        self.seed = seed
        self.params = {**self.defaults, **params}

    @classmethod
    def check_options(cls, params: dict[str, Any]) -> None:
        """UsageError for an unknown option or a named option outside its choices."""
        unknown = set(params) - set(cls.defaults)
        if unknown:
            raise UsageError(
                f"{cls.name}: unknown hyper-parameters {sorted(unknown)}", fix=f"known: {sorted(cls.defaults)}"
            )
        for key, allowed in cls.choices.items():
            if key in params and params[key] not in allowed:
                raise UsageError(
                    f"{cls.name}: {key} must be one of {', '.join(allowed)}, got {params[key]!r}",
                    fix=f"--param {cls.name}.{key}={allowed[0]}",
                )

    def deviations(self) -> dict[str, tuple[Any, Any]]:
        """``{option: (value in force, published value)}`` for each option that departs from the published behaviour."""
        return {k: (self.params[k], v) for k, v in self.published.items() if self.params[k] != v}

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

    def prepare(self, data: PolicyDataset) -> None:  # noqa: B027 - an optional hook: doing nothing is the default
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
    def load(cls, directory: str | Path, expected: Mapping[str, str] | None = None) -> "Policy":
        """Load ``directory/<artifact>``. Only from the folder given: an artifact that is a link out of it is refused
        (gbt's joblib file is a pickle, which can run code when loaded). With ``expected`` (``{file name: sha256}``,
        as train recorded them) the artifact and params.json must match before the artifact is read. A corrupt
        artifact is a DataError."""
        d = Path(directory)
        path = d / cls.artifact
        fix = f"retrain it: harness train --dataset RUN_DIR --out {d.parent} --algos {cls.name}"
        if not path.is_file():
            raise MissingFileError(f"{cls.name} artifact not found: {path}", fix=fix)
        if not path.resolve().is_relative_to(d.resolve()):
            raise DataError(
                f"{path} points outside {d} (to {path.resolve()}); artifacts load only from the folder you name",
                fix="copy the artifact into the models folder you trust, or retrain",
            )
        params = d / PARAMS_FILE
        try:
            meta = json.loads(params.read_text()) if params.exists() else {}
            if not isinstance(meta, dict) or not isinstance(meta.get("params", {}), dict):
                raise ValueError("not a JSON object with a params mapping")
        except (ValueError, UnicodeDecodeError) as exc:  # the hyper-parameters, not the artifact, are damaged
            raise DataError(f"{params} is corrupt ({str(exc)[:160]})", fix=fix) from None
        if expected is not None:  # after params.json (plain JSON, named when garbage), before the artifact
            verify(d, (cls.artifact, PARAMS_FILE), expected, what=f"{cls.name} artifact", fix=fix)
        try:
            policy = cls(seed=int(meta.get("seed", 0)), **meta.get("params", {}))
            policy.load_artifact(path)
        except HarnessError:
            raise
        except Exception as exc:  # noqa: BLE001 - any library's failure on a damaged file becomes one clear error
            raise DataError(
                f"{cls.name} artifact {path} is corrupt or unreadable ({type(exc).__name__}: {str(exc)[:160]})", fix=fix
            ) from None
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


def parse_params(items: list[str] | None) -> dict[str, dict[str, Any]]:
    """``["linucb.alpha=1", "cql.td_loss=huber"]`` -> ``{"linucb": {"alpha": 1}, "cql": {"td_loss": "huber"}}``;
    values are JSON when they parse as JSON, else strings. Unknown algorithms or options are UsageErrors."""
    out: dict[str, dict[str, Any]] = {}
    for item in items or []:
        key, sep, raw = item.partition("=")
        algo, dot, option = key.strip().partition(".")
        if not sep or not dot or not option:
            raise UsageError(f"bad --param {item!r}", fix="--param ALGO.OPTION=VALUE, e.g. --param linucb.alpha=1")
        cls = policy_class(algo)
        if option not in cls.defaults:
            raise UsageError(f"{algo} has no option {option!r}", fix=f"known: {', '.join(sorted(cls.defaults))}")
        try:
            value = json.loads(raw)
        except ValueError:
            value = raw
        default = cls.defaults[option]
        if isinstance(default, (int, float)) and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise UsageError(
                f"--param {item!r}: {algo}.{option} takes a number", fix=f"e.g. --param {algo}.{option}={default}"
            )
        cls.check_options({option: value})
        out.setdefault(algo, {})[option] = value
    return out


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


def load_policy(models_dir: str | Path, name: str, data: PolicyDataset | None = None, *, trust: bool = False) -> Policy:
    """Load ``<models_dir>/<name>`` as the model card says, its files checked against the sha256 ``train.json``
    recorded unless ``trust`` (``--trust-artifacts``); ``data`` is attached for policies that need it at pick time."""
    expected = None if trust else recorded_for(read_train_meta(models_dir), name)
    policy = policy_class(name).load(Path(models_dir) / name, expected)
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
        raise MissingFileError(
            f"no {PICKS_FILE} in {models_dir}", fix="train first: harness train --dataset FILE --out DIR"
        )
    try:
        raw = json.loads(path.read_text())
        return {algo: {int(bs): SpecConfig(*map(int, cfg)) for bs, cfg in p.items()} for algo, p in raw.items()}
    except (ValueError, TypeError) as exc:
        raise DataError(f"{path} is not a picks file ({exc})", fix="retrain to rewrite it") from None


def read_train_meta(models: str | Path) -> dict[str, Any]:
    """``MODELS/train.json`` (empty when absent); a missing models folder or a corrupt file is an error."""
    models = Path(models)
    fix = f"retrain: harness train --dataset RUN_DIR --out {models}"
    if not models.is_dir():
        raise MissingFileError(f"models folder not found: {models}", fix="pass the --out folder of harness train")
    path = models / TRAIN_FILE
    if not path.exists():
        return {}
    return read_json_object(path, "train summary", fix)


def reward_options_of(models: str | Path, meta: dict[str, Any]) -> Any:
    """The RewardOptions the models were trained with (``train.json``); bad values are a DataError."""
    from policies.contract import RewardOptions

    try:
        return RewardOptions(**(meta.get("reward_options") or {}))
    except (TypeError, ValueError) as exc:
        raise DataError(
            f"{Path(models) / TRAIN_FILE}: bad reward_options ({str(exc)[:160]})",
            fix=f"retrain: harness train --dataset RUN_DIR --out {models}",
        ) from None


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
    deviations: dict[str, dict[str, list[Any]]] = {}
    """Per algorithm trained with an option other than the published script's: ``{option: [value, published]}``."""
    published_picks: dict[str, dict[str, list[int]]] = {}
    """For those algorithms, the picks of a refit with the published options (same data, same seed)."""
    selection: dict[str, Any] = {}
    """How the rows were chosen (``invalid_windows``, ``power_cap``): ``evaluate`` uses the same unless told otherwise."""
    options: dict[str, Any] = {}
    """The ``harness train`` options (``policies.options.TrainOptions``): a ``--config`` file that trains the same."""
    artifact_sha256: dict[str, str] = {}
    """``{"<algo>/<file>": sha256}`` of every file train wrote per algorithm; loading checks them (policies.artifacts)."""


def fit_policy(name: str, data: PolicyDataset, seed: int = 0, **params: Any) -> Policy:
    return make_policy(name, seed, **params).fit(data)


def train(
    data: PolicyDataset,
    out: str | Path,
    algos: list[str] | None = None,
    seed: int = 0,
    params: dict[str, dict[str, Any]] | None = None,
    selection: dict[str, Any] | None = None,
    options: dict[str, Any] | None = None,
) -> TrainSummary:
    """Fit each algorithm on ``data``, save its artifact under ``out/<name>/``, write picks.json and train.json."""
    out = Path(out)
    algos = list(algos or ALGORITHMS)
    artifacts: dict[str, str] = {}
    hashes = previous_hashes(out / TRAIN_FILE)
    picks: dict[str, dict[int, SpecConfig]] = {}
    seconds: dict[str, float] = {}
    deviations: dict[str, dict[str, list[Any]]] = {}
    published: dict[str, dict[int, SpecConfig]] = {}
    t_all = time.perf_counter()
    for name in algos:
        t0 = time.perf_counter()
        own = (params or {}).get(name, {})
        policy = fit_policy(name, data, seed, **own)
        picks[name] = pick(policy, data)
        saved = policy.save(out / name)
        artifacts[name] = str(saved.relative_to(out))
        hashes.update(record(out, (saved, saved.parent / PARAMS_FILE)))
        if policy.deviations():
            deviations[name] = {k: list(v) for k, v in policy.deviations().items()}
            published[name] = pick(fit_policy(name, data, seed, **{**own, **policy.published}), data)
        seconds[name] = round(time.perf_counter() - t0, 3)
    summary = TrainSummary(
        dataset=data.source, rows_used=len(data), rows_skipped=data.skipped_errors, state=data.state_kind,
        reward_options=data.reward_options.model_dump(), seed=seed, algorithms=algos, artifacts=artifacts,
        picks=picks_json(picks), seconds=seconds, total_seconds=round(time.perf_counter() - t_all, 3),
        deviations=deviations, published_picks=picks_json(published), selection=selection or {},
        options=options or {}, artifact_sha256=hashes,
    )  # fmt: skip
    existing = json.loads((out / PICKS_FILE).read_text()) if (out / PICKS_FILE).exists() else {}
    write_json_atomic(out / PICKS_FILE, {**existing, **summary.picks})
    write_json_atomic(out / TRAIN_FILE, summary.model_dump())
    return summary
