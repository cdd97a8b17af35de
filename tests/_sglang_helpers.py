"""Real sglang wheels in cached venvs (no CUDA): build once per version, then parse argv with sglang's own parser.

Each venv lives in ``~/.cache/eagle-energy-harness/sglang-conformance/<version>/`` (outside the checkout, so every clone
on a machine, CI's fresh one included, shares it) and is reused while its requirements file is unchanged; a fresh
machine builds it once with pip from PyPI (torch is the CPU 2.13.0 build, a local file here).
``tests/sglang_conformance/probe.py`` runs inside the venv and is where every stub is named and explained.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CACHE = Path(
    os.environ.get("SGLANG_CONFORMANCE_CACHE")
    or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "eagle-energy-harness" / "sglang-conformance"
)
"""Where the venvs live; ``SGLANG_CONFORMANCE_CACHE`` moves them (e.g. to share one cache between checkouts)."""
HERE = Path(__file__).resolve().parent / "sglang_conformance"
PROBE = HERE / "probe.py"
NETWORK_ERRORS = (
    "Failed to establish a new connection",
    "Temporary failure in name resolution",
    "Network is unreachable",
    "ConnectionError",
    "Max retries exceeded",
)


def _pip(venv: Path, *args: str, log: Path) -> None:
    cmd = [str(venv / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check", "-q", *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    with open(log, "a") as fh:
        fh.write(f"$ {' '.join(cmd)}\n{done.stdout}\n{done.stderr}\n")
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-8:])
        if any(marker in done.stderr for marker in NETWORK_ERRORS):
            pytest.skip(f"pip cannot reach the package index to build the {venv.parent.name} {venv.name} venv: {tail}")
        raise AssertionError(f"building the {venv.parent.name} {venv.name} venv failed (log {log}):\n{tail}")


def conformance_python(version: str, package: str = "sglang") -> Path:
    """The interpreter of a venv with ``package`` ``version`` (no deps) + what its argument parser imports (the
    pins of ``tests/<package>_conformance/requirements-<version>.txt``); built once per machine."""
    reqs = REPO / "tests" / f"{package}_conformance" / f"requirements-{version}.txt"
    key = hashlib.sha256(reqs.read_bytes() + version.encode()).hexdigest()[:16]
    cache = CACHE if package == "sglang" else CACHE.parent / f"{package}-conformance"
    venv = cache / version
    ready = venv / ".ready"
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / f".{version}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # parallel sessions on one machine build it once
        if ready.exists() and ready.read_text().strip() == key:
            return venv / "bin" / "python"
        shutil.rmtree(venv, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
        log = cache / f"build-{version}.log"
        log.write_text("")
        _pip(venv, "-r", str(reqs), log=log)
        _pip(venv, "--no-deps", f"{package}=={version}", log=log)
        ready.write_text(key)
    return venv / "bin" / "python"


def hf_home(tmp: Path) -> Path:
    """A writable copy of the offline Hugging Face cache holding the target model's ``config.json``."""
    dst = tmp / "hf"
    shutil.copytree(HERE / "hf", dst)
    return dst


def real_parse(version: str, argvs: list[list[str]], tmp: Path) -> dict:
    """sglang ``version``'s verdict on each argv (flags after ``-m sglang.launch_server``): see probe.py."""
    python = conformance_python(version)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_")}
    env.update(HF_HUB_OFFLINE="1", HF_HOME=str(hf_home(tmp)), TRANSFORMERS_OFFLINE="1", PYTHONDONTWRITEBYTECODE="1")
    done = subprocess.run(
        [str(python), str(PROBE)],
        input=json.dumps(argvs),
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
        cwd=tmp,
    )
    assert done.returncode == 0, f"probe failed in the sglang {version} venv:\n{done.stderr[-3000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])  # the probe's one JSON line comes last
