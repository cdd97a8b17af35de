"""Where the controller's pick per batch size comes from: a policy artifact, an active sweep's ``recipe.json``, or a
table given inline (``1=0:0:0,16=3:2:4``). Every source ends in ``{batch_size: SpecConfig}``."""

from __future__ import annotations

import json
from pathlib import Path

from harness.core.errors import DataError, MissingFileError, UsageError
from harness.grid import SpecConfig, parse_config

PickTable = dict[int, SpecConfig]


def parse_table(text: str) -> PickTable:
    """``"1=0:0:0,16=3:2:4"`` -> {1: (0,0,0), 16: (3,2,4)}; a malformed item is a UsageError naming it."""
    out: PickTable = {}
    for item in (p.strip() for p in text.split(",") if p.strip()):
        bs, sep, cfg = item.partition("=")
        if not sep or not bs.strip().isdigit() or int(bs) < 1:
            raise UsageError(f"bad pick {item!r} in --picks", fix="write BS=s:k:d items, e.g. --picks 1=0:0:0,16=3:2:4")
        out[int(bs)] = parse_config(cfg)
    if not out:
        raise UsageError("--picks is empty", fix="write BS=s:k:d items, e.g. --picks 1=0:0:0,16=3:2:4")
    return out


def from_recipe(path: str | Path) -> PickTable:
    """The ``config`` per batch size of an active sweep's ``recipe.json`` (a run folder or the file itself)."""
    p = Path(path)
    p = p / "recipe.json" if p.is_dir() else p
    if not p.exists():
        raise MissingFileError(f"no recipe at {p}", fix="pass RUN_DIR/recipe.json of `harness sweep --strategy active`")
    try:
        raw = json.loads(p.read_text())
        return {int(bs): SpecConfig(*map(int, entry["config"])) for bs, entry in raw.items()}
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise DataError(
            f"{p} is not a recipe ({type(exc).__name__}: {exc})", fix="pass the recipe.json an active sweep wrote"
        ) from None


def from_policy(
    models: str | Path, algo: str, dataset: str | Path | None = None, trust_artifacts: bool = False
) -> PickTable:
    """A trained policy's pick per batch size: loaded and picked on ``dataset`` when given (``policies.base``'s
    load/pick), else the ``picks.json`` that training wrote, after checking the artifact loads (and matches the
    sha256 train recorded, unless ``trust_artifacts``)."""
    from policies.base import load_picks, load_policy, pick

    if dataset is not None:
        from policies.base import read_train_meta, reward_options_of
        from policies.contract import load_dataset

        meta = read_train_meta(models)
        data = load_dataset(dataset, state=meta.get("state", "hindsight"), reward=reward_options_of(models, meta))
        return dict(pick(load_policy(models, algo, data, trust=trust_artifacts), data))
    picks = load_picks(models)
    if algo not in picks:
        raise UsageError(f"no picks for algorithm {algo!r} in {models}", fix="trained: " + ", ".join(sorted(picks)))
    load_policy(models, algo, trust=trust_artifacts)  # a missing, corrupt or changed artifact is not served
    return dict(picks[algo])


def resolve(
    picks: str | None,
    recipe: str | Path | None,
    models: str | Path | None,
    algo: str | None,
    dataset: str | Path | None = None,
    trust_artifacts: bool = False,
) -> PickTable:
    """Exactly one source: ``--picks``, ``--recipe`` or ``--models`` with ``--algo``."""
    given = [name for name, v in (("--picks", picks), ("--recipe", recipe), ("--models", models)) if v]
    if len(given) != 1:
        raise UsageError(
            f"give exactly one pick source (got {', '.join(given) or 'none'})",
            fix="--picks 1=0:0:0,16=3:2:4, or --recipe RUN_DIR/recipe.json, or --models DIR --algo NAME",
        )
    if picks:
        return parse_table(picks)
    if recipe:
        return from_recipe(recipe)
    if not algo:
        raise UsageError("--models needs --algo", fix="name one of the eight policies, e.g. --algo lookup_table")
    assert models is not None
    return from_policy(models, algo, dataset, trust_artifacts)
