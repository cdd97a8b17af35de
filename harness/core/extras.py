"""Optional dependency groups (the pyproject extras) and one way to say which one is missing.

The core install (``pip install eagle-energy-harness``) carries only what the sweep, the twin and the sampler need,
so it can go into an sglang environment without touching sglang's torch. Everything else is an extra:

| extra | modules | features |
|---|---|---|
| ``policies`` | torch, sklearn (scikit-learn), joblib | ``harness train / evaluate / recommend``, ``policies`` |
| ``report`` | matplotlib | PNG figures of ``harness report sweep`` and ``harness report policies`` |
| ``export`` | pyarrow, datasets | ``harness dataset export --format parquet|hf``, parquet / HF SWE-bench instances |
| ``ray`` | ray | ``harness sweep --executor ray`` (cells sharded across GPUs and nodes, ``harness.sweep.executors``) |
| ``all`` | all of the above | everything |

Code imports these modules lazily, inside ``needs(...)`` (or the CLI's last-resort mapping in ``harness.cli``),
so a missing one becomes a ``MissingDependencyError`` naming the extra to install.
"""

from __future__ import annotations

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
