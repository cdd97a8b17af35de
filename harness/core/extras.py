"""Optional dependency groups (the pyproject extras) and one way to say which one is missing.

The core install (``pip install eagle-energy-harness``) carries only what the sweep, the twin and the sampler need,
so it can go into an sglang environment without touching sglang's torch. Everything else is an extra:

| extra | modules | features |
|---|---|---|
| ``policies`` | torch, sklearn (scikit-learn), joblib | ``harness train / evaluate / recommend``, ``policies`` |
| ``report`` | matplotlib | PNG figures of ``harness report sweep`` and ``harness report policies`` |
| ``export`` | pyarrow, datasets | ``harness dataset export --format parquet|hf``, parquet / HF SWE-bench instances |
| ``ray`` | ray | ``harness sweep --executor ray`` (cells sharded across GPUs and nodes, ``harness.sweep.executors``) |
| ``stats`` | scipy | ``dataset compare``, ``reproduce --compare``, ``twin calibrate``, ``sweep --strategy active`` |
| ``all`` | all of the above | everything |

Code imports these modules lazily, inside ``needs(...)`` (or the CLI's last-resort mapping in ``harness.cli``),
so a missing one becomes a ``MissingDependencyError`` naming the extra to install.

``ELSEWHERE`` names the few modules that code of this repository imports but that neither the core nor an extra
installs, because that code runs in another environment (the engine's, Harbor's) or is a maintainer's tool; each
with the only files allowed to import it (``tests/core/test_declared_imports.py`` checks both tables).
"""

from __future__ import annotations

import importlib
from contextlib import contextmanager
from typing import Iterator

from harness.core.errors import MissingDependencyError

DIST = "eagle-energy-harness"

# top-level module -> the extra that installs it
EXTRA_OF: dict[str, str] = {
    "torch": "policies",
    "sklearn": "policies",
    "joblib": "policies",
    "matplotlib": "report",
    "pyarrow": "export",
    "datasets": "export",
    "ray": "ray",
    "scipy": "stats",
}

# top-level module -> the files that may import it and why no install of the harness brings it
ELSEWHERE: dict[str, tuple[frozenset[str], str]] = {
    "sglang": (
        frozenset({"harness/gpucheck/argv_check.py"}),
        "the engine's own environment: the GPU check runs sglang's parser when it is importable and says so if not",
    ),
    "harbor": (
        frozenset({"pilots/terminalbench/harbor_side/tb_local_sandbox.py"}),
        "Harbor's own venv imports this file; the harness never does",
    ),
    "tokenizers": (
        frozenset({"harness/twin/tokenizer_build.py"}),
        "a maintainer's tool that rebuilds the shipped tokenizer data; nothing at run time imports it",
    ),
}


def missing_extra(exc: ModuleNotFoundError) -> str | None:
    """The extra that provides the module ``exc`` could not find, or None when it is not an optional dependency."""
    return EXTRA_OF.get((exc.name or "").split(".")[0])


def install_hint(extra: str) -> str:
    return f"pip install '{DIST}[{extra}]' (or '{DIST}[all]' for every feature)"


def dependency_error(exc: ModuleNotFoundError, purpose: str | None = None) -> MissingDependencyError | None:
    """A ``MissingDependencyError`` for ``exc`` when it is an optional dependency, else None."""
    extra = missing_extra(exc)
    if extra is None:
        return None
    module = (exc.name or "").split(".")[0]
    what = f"{purpose} needs" if purpose else "this command needs"
    return MissingDependencyError(
        f"{what} {module}, which is not installed (it comes with the [{extra}] extra)", fix=install_hint(extra)
    )


def require(module: str, purpose: str) -> None:
    """Check up front that an optional ``module`` imports (before a run spends time), else the extra's error."""
    with needs(purpose):
        importlib.import_module(module)


@contextmanager
def needs(purpose: str) -> Iterator[None]:
    """Run a block of lazy imports; a missing optional module becomes a ``MissingDependencyError`` about ``purpose``."""
    try:
        yield
    except ModuleNotFoundError as exc:
        err = dependency_error(exc, purpose)
        if err is None:
            raise
        raise err from None
