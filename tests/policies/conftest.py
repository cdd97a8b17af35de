"""The policy tests' shared data: a SYNTHETIC 228-row grid (``tests/policies/_synthetic_grid.py``) written in both file layouts, and
one real ``harness train`` of all eight algorithms on it. Built once per suite run: under xdist the workers share the
run's base temp folder, the first to take a folder's lock builds it and the others read it (the tests only read it;
``train.json`` records the dataset's path, so both must be the same files for every worker)."""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from _engine_helpers import run_harness
from _synthetic_grid import synthetic_records

from harness.core.jsonl import write_jsonl_atomic
from harness.runs.rows import from_native, to_published


def built_once(tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], None]) -> Path:
    """``run_temp/name``, filled by ``build`` by the first worker of this run (the others wait on its lock)."""
    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent  # the run's folder, above each worker's own
    folder, done = shared / name, shared / f"{name}.done"
    with open(shared / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            folder.mkdir(exist_ok=True)
            build(folder)
            done.touch()
    return folder


@pytest.fixture(scope="session")
def synthetic_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    def build(d: Path) -> None:
        recs = synthetic_records(seed=0)
        write_jsonl_atomic(d / "rows.jsonl", recs)
        write_jsonl_atomic(d / "dataset.jsonl", [to_published(from_native(r)) for r in recs])

    d = built_once(tmp_path_factory, "synthetic", build)
    return {"rows": d / "rows.jsonl", "dataset": d / "dataset.jsonl", "dir": d}


@pytest.fixture(scope="session")
def trained_models(synthetic_files: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``harness train`` of all eight on the published-layout synthetic dataset (one real CLI process per run)."""

    def build(out: Path) -> None:
        r = run_harness("train", "--dataset", str(synthetic_files["dataset"]), "--out", str(out), "--seed", "0")
        assert r.returncode == 0, r.stderr + r.stdout

    return built_once(tmp_path_factory, "trained-models", build)
