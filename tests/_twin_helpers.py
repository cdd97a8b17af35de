"""Start twin processes (GPU device, engine) on 127.0.0.1 for tests and stop them by PID.

Other parts may import these (pytest puts tests/ on sys.path): ``from _twin_helpers import twin_gpu``; ``with twin_gpu(time_scale=50) as gpu: gpu.url``.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import httpx

PY = sys.executable


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop_process(proc: subprocess.Popen, timeout: float = 5.0) -> int | None:
    """Terminate, then kill after ``timeout``; returns the exit code."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
    return proc.returncode


@dataclass
class TwinProc:
    proc: subprocess.Popen
    url: str
    log_path: Path
    ready: dict = field(default_factory=dict)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def get(self, path: str, **kw) -> httpx.Response:
        return httpx.get(self.url + path, timeout=kw.pop("timeout", 10.0), **kw)

    def post(self, path: str, **kw) -> httpx.Response:
        return httpx.post(self.url + path, timeout=kw.pop("timeout", 30.0), **kw)

    def stop(self) -> int | None:
        return stop_process(self.proc)


def _wait_ready_line(proc: subprocess.Popen, log: Path, timeout: float) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace") if log.exists() else ""
        for line in text.splitlines():
            if line.startswith("{") and '"event": "ready"' in line:
                return json.loads(line)
        if proc.poll() is not None:
            raise RuntimeError(f"twin process exited with {proc.returncode}:\n{text[-3000:]}")
        time.sleep(0.03)
    raise TimeoutError(f"twin process not ready after {timeout}s:\n{log.read_text(errors='replace')[-3000:]}")


@contextlib.contextmanager
def twin_gpu(
    time_scale: float = 50.0,
    seed: int = 0,
    profile: str = "rtx4060-laptop",
    log_dir: str | None = None,
    extra: tuple[str, ...] = (),
) -> Iterator[TwinProc]:
    """A twin GPU device on a free port (the device binds port 0 and announces the one it got)."""
    log = Path(log_dir or tempfile.mkdtemp(prefix="twin-gpu-")) / "gpu.log"
    with open(log, "w") as fh:
        proc = subprocess.Popen(
            [
                PY,
                "-m",
                "harness",
                "twin",
                "gpu",
                "--port",
                "0",
                "--time-scale",
                str(time_scale),
                "--seed",
                str(seed),
                "--profile",
                profile,
                *extra,
            ],
            stdout=fh,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    try:
        ready = _wait_ready_line(proc, log, 20.0)
        yield TwinProc(proc, ready["url"], log, ready)
    finally:
        stop_process(proc)


def start_engine(
    gpu_url: str,
    args: list[str],
    *,
    env: dict | None = None,
    log_dir: str | None = None,
    wait_healthy: bool = True,
    timeout: float = 30.0,
) -> TwinProc:
    """Start ``harness twin engine`` with sglang-style ``args`` (port chosen here) and wait for /health 200."""
    port = free_port()
    log = Path(log_dir or tempfile.mkdtemp(prefix="twin-engine-")) / f"engine-{port}.log"
    full_env = {**os.environ, "SGLANG_RECORD_STEP_TIME": "1", **(env or {})}
    with open(log, "w") as fh:
        proc = subprocess.Popen(
            [
                PY,
                "-m",
                "harness",
                "twin",
                "engine",
                *args,
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--twin-gpu",
                gpu_url,
            ],
            stdout=fh,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=full_env,
        )
    tp = TwinProc(proc, f"http://127.0.0.1:{port}", log)
    if wait_healthy:
        try:
            wait_health(tp, timeout)
        except Exception:
            stop_process(proc)
            raise
    return tp


def wait_health(tp: TwinProc, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if tp.proc.poll() is not None:
            raise RuntimeError(f"engine exited with {tp.proc.returncode}:\n{tp.log()[-3000:]}")
        try:
            if httpx.get(tp.url + "/health", timeout=2.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    raise TimeoutError(f"engine not healthy after {timeout}s:\n{tp.log()[-3000:]}")


@contextlib.contextmanager
def twin_engine(gpu_url: str, args: list[str], **kw) -> Iterator[TwinProc]:
    tp = start_engine(gpu_url, args, **kw)
    try:
        yield tp
    finally:
        tp.stop()
