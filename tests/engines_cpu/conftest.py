"""Fixtures for the real-engine tests: the real sglang 0.5.23 serving tiny local models on this machine's CPU.

They run only when HARNESS_ENGINES_PYTHON names the engines venv's interpreter (`make engines-cpu` builds the venv
and sets it); otherwise every test in tests/engines_cpu is skipped, so the default suite never needs sglang. The
test process itself imports neither torch nor sglang: it runs tiny_models.py with the engines interpreter and
talks HTTP to the server (_server.py).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ENGINES_PYTHON_ENV = "HARNESS_ENGINES_PYTHON"
SKIP_REASON = "real sglang on CPU: run `make engines-cpu`"
MODEL_NAMES = ("target", "draft-full", "draft-partial", "draft-none")

sys.path.insert(0, str(HERE))  # the tests import _server as a plain module


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "engines_cpu: runs the real sglang on this CPU (make engines-cpu)")


VLLM_PYTHON_ENV = "HARNESS_VLLM_CPU_PYTHON"
VLLM_SKIP_REASON = "real vLLM on CPU: run `make engines-cpu-vllm`"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test under tests/engines_cpu, and skip them without their engine's interpreter: the vLLM tests
    (test_vllm_*.py) need HARNESS_VLLM_CPU_PYTHON, the others HARNESS_ENGINES_PYTHON."""
    for item in items:
        path = Path(str(item.fspath)).resolve()
        if HERE not in path.parents:
            continue
        item.add_marker(pytest.mark.engines_cpu)
        vllm = path.name.startswith("test_vllm")
        if not os.environ.get(VLLM_PYTHON_ENV if vllm else ENGINES_PYTHON_ENV):
            item.add_marker(pytest.mark.skip(reason=VLLM_SKIP_REASON if vllm else SKIP_REASON))


@pytest.fixture(scope="session")
def engines_python() -> Path:
    """The engines venv's python (HARNESS_ENGINES_PYTHON)."""
    value = os.environ.get(ENGINES_PYTHON_ENV)
    if not value:
        pytest.skip(SKIP_REASON)
    path = Path(value)
    if not path.exists():
        pytest.fail(f"{ENGINES_PYTHON_ENV}={value} does not exist")
    return path


def models_cache_root() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "eagle-energy-harness" / "engines-cpu" / "models"


def tiny_models_key() -> str:
    """The cache key: the sha256 of tiny_models.py (a changed generator builds new models)."""
    return hashlib.sha256((HERE / "tiny_models.py").read_bytes()).hexdigest()[:16]


def build_tiny_models(python: Path, root: Path | None = None) -> dict[str, Path]:
    """Build the tiny models once per machine (file-locked, so parallel sessions and fresh clones share them)."""
    root = root or models_cache_root()
    root.mkdir(parents=True, exist_ok=True)
    key = tiny_models_key()
    final = root / key
    with open(root / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (final / "summary.json").exists():
            staging = root / f"{key}.partial-{os.getpid()}"
            shutil.rmtree(staging, ignore_errors=True)
            proc = subprocess.run(
                [str(python), str(HERE / "tiny_models.py"), str(staging)],
                capture_output=True,
                text=True,
                timeout=600,
            )
            if proc.returncode != 0:
                shutil.rmtree(staging, ignore_errors=True)
                raise RuntimeError(f"tiny_models.py failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
            shutil.rmtree(final, ignore_errors=True)
            staging.rename(final)
    summary = json.loads((final / "summary.json").read_text())
    assert set(MODEL_NAMES) <= set(summary["models"]), summary
    return {name: final / name for name in MODEL_NAMES}


@pytest.fixture(scope="session")
def tiny_models(engines_python: Path) -> dict[str, Path]:
    """name -> directory of the tiny target and drafts (see tiny_models.py / MODELS.md)."""
    return build_tiny_models(engines_python)


@pytest.fixture(scope="session")
def server_logs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A directory for the servers' logs (kept by pytest's tmp_path retention for post-mortems)."""
    yield tmp_path_factory.mktemp("sglang-logs")
