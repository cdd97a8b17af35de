"""Fixtures for the real load tools (``make clients``; the tests and what they share: _clients.py). Every test here is
skipped unless HARNESS_CLIENTS_PYTHON names the clients venv's interpreter (.ci/clients.sh builds it and sets it)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the tests import _clients as a plain module

from _clients import (
    CLIENTS_PYTHON_ENV,
    CONFIG,
    HERE,
    MODEL,
    MODEL_NAME,
    SKIP_REASON,
    SPEC,
    TIME_SCALE,
    Target,
)
from _sampler_testbed import start_sampler
from _twin_helpers import twin_engine, twin_gpu

from harness.serve.session import SessionOptions, open_session


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.fspath)).resolve().parents and not os.environ.get(CLIENTS_PYTHON_ENV):
            item.add_marker(pytest.mark.skip(reason=SKIP_REASON))


@pytest.fixture(scope="session")
def clients_python() -> Path:
    path = Path(os.environ.get(CLIENTS_PYTHON_ENV, ""))
    if not path.is_file():
        pytest.fail(f"{CLIENTS_PYTHON_ENV}={path} does not exist")
    return path


@pytest.fixture(scope="session")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    """A twin engine at (3,4,8), named MODEL_NAME, with sglang's /metrics; a sampler watches its twin GPU."""
    extra = ["--mem-fraction-static", "0.65", "--cuda-graph-max-bs", "8", "--twin-launch-scale", "0.1"]
    with twin_gpu(time_scale=TIME_SCALE) as gpu, twin_engine(
        gpu.url, MODEL + SPEC + extra + ["--enable-metrics", "--served-model-name", MODEL_NAME]
    ) as eng:  # fmt: skip
        sampler = start_sampler(gpu.url, None, tmp_path_factory.mktemp("sampler"), rate_hz=10.0)
        try:
            yield Target("engine", eng.url, [eng.url], sampler.url)
        finally:
            sampler.stop()


@pytest.fixture(scope="session")
def serve(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    """``harness serve`` routing every batch size to (3,4,8) (plus its no_spec fallback), the same engine flags."""
    options = SessionOptions(
        picks={1: CONFIG},
        run_dir=tmp_path_factory.mktemp("serve"),
        time_scale=TIME_SCALE,
        tick_s=0.05,
        engine_args=("--twin-launch-scale", "0.1", "--enable-metrics", "--served-model-name", MODEL_NAME),
    )
    with open_session(options) as s:
        yield Target("serve", s.url, [inst.base_url for inst in s.pool.instances.values()])
