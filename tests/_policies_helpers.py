"""Shared fixtures for the policy tests: a SYNTHETIC 228-row grid (policies.synthetic) written as both file kinds,
and one CLI training run of all eight algorithms shared by every policy test module."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.core.jsonl import write_jsonl_atomic
from harness.runs.rows import from_native, to_published
from policies.synthetic import synthetic_records

HARNESS = [sys.executable, "-m", "harness"]


def harness(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "200"}
    return subprocess.run([*HARNESS, *args], capture_output=True, text=True, timeout=timeout, env=env)


_CACHE: dict[str, object] = {}  # this module is imported once per session, so fixtures imported into several test
# modules (each a separate fixture definition to pytest) still build their data only once.


@pytest.fixture(scope="session")
def synthetic_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    if "files" not in _CACHE:
        _CACHE["files"] = _write_synthetic(tmp_path_factory)
    return _CACHE["files"]  # type: ignore[return-value]


def _write_synthetic(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("synthetic")
    recs = synthetic_records(seed=0)
    write_jsonl_atomic(d / "rows.jsonl", recs)
    write_jsonl_atomic(d / "dataset.jsonl", [to_published(from_native(r)) for r in recs])
    return {"rows": d / "rows.jsonl", "dataset": d / "dataset.jsonl", "dir": d}


@pytest.fixture(scope="session")
def trained_models(synthetic_files: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``harness train`` of all eight on the published-layout synthetic dataset (one real CLI process per session)."""
    if "models" in _CACHE:
        return _CACHE["models"]  # type: ignore[return-value]
    out = tmp_path_factory.mktemp("models")
    r = harness("train", "--dataset", str(synthetic_files["dataset"]), "--out", str(out), "--seed", "0")
    assert r.returncode == 0, r.stderr + r.stdout
    _CACHE["models"] = out
    return out
