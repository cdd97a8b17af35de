"""The policy tests' shared data: a SYNTHETIC 228-row grid (``tests/policies/_synthetic_grid.py``) written in both file layouts, and
one real ``harness train`` of all eight algorithms on it. Session-scoped: built once per test process."""

from __future__ import annotations

from pathlib import Path

import pytest
from _engine_helpers import run_harness
from _synthetic_grid import synthetic_records

from harness.core.jsonl import write_jsonl_atomic
from harness.runs.rows import from_native, to_published


@pytest.fixture(scope="session")
def synthetic_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("synthetic")
    recs = synthetic_records(seed=0)
    write_jsonl_atomic(d / "rows.jsonl", recs)
    write_jsonl_atomic(d / "dataset.jsonl", [to_published(from_native(r)) for r in recs])
    return {"rows": d / "rows.jsonl", "dataset": d / "dataset.jsonl", "dir": d}


@pytest.fixture(scope="session")
def trained_models(synthetic_files: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``harness train`` of all eight on the published-layout synthetic dataset (one real CLI process per session)."""
    out = tmp_path_factory.mktemp("models")
    r = run_harness("train", "--dataset", str(synthetic_files["dataset"]), "--out", str(out), "--seed", "0")
    assert r.returncode == 0, r.stderr + r.stdout
    return out
