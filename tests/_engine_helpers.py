"""Shared helpers of the engine/sweep tests: run the harness CLI as a real process, read run folders, find leftovers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
FAST = [
    "--time-scale",
    "50",
    "--output-tokens",
    "128",
    "--settle",
    "0",
    "--plain",
    "--engine-arg=--twin-launch-scale",
    "--engine-arg=0.2",
]
"""Sweep flags that keep a twin sweep short: the twin world 50x faster, 128 tokens per request, no settling, and
twin launches 5x shorter than a real server's."""


HOST_LOAD = {"slow_probe", "gap_over_3_periods", "coverage_below_95pct"}
"""Window reasons a starved host causes (the sampler missed its schedule): the product flags such a window honestly
and its numbers still hold (docs/twin.md, "Load immunity"); tests of sweep logic accept them, never other reasons."""


def harness_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "harness", *args]


def run_harness(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "200", "PYTHONUNBUFFERED": "1"}
    return subprocess.run(harness_cmd(*args), capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=env)


def wait_rows(run: Path, n: int, proc: subprocess.Popen, timeout: float = 90) -> None:
    """Wait until ``run/rows.jsonl`` has ``n`` lines while the sweep ``proc`` runs (fails when it ends first)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if (run / "rows.jsonl").exists() and len((run / "rows.jsonl").read_bytes().splitlines()) >= n:
            return
        time.sleep(0.05)
    raise AssertionError(f"no {n} rows in time (rc {proc.poll()})")


def read_lines(path: Path) -> list[dict[str, Any]]:
    """Every line of a JSONL file parsed strictly (a torn line fails the test)."""
    data = path.read_bytes()
    assert data == b"" or data.endswith(b"\n"), f"{path} ends with a torn line"
    return [json.loads(line) for line in data.splitlines() if line.strip()]


def processes_mentioning(needle: str) -> list[int]:
    """PIDs of live processes whose command line contains ``needle`` (to prove nothing was left behind)."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = next((ln for ln in (d / "status").read_text().splitlines() if ln.startswith("State:")), "")
        except OSError:
            continue
        if needle in cmd and "Z" not in state.split()[1:2]:
            out.append(int(d.name))
    return out
