"""Start the real sglang server on this machine's CPU for the real-engine tests (`make engines-cpu`).

`start_sglang(...)` launches `python -m sglang.launch_server` from the engines venv with the CPU settings below and
the pure-PyTorch `sgl_kernel` stand-in (tests/engines_cpu/standin) on PYTHONPATH, waits until it serves, yields its
base URL and stops the whole process group afterwards. `CPU_ENV` and `CPU_ARGS` are exported so other tests (the
harness sweep against the real server) launch it with exactly the same flags.

This module imports nothing heavy: the test process talks HTTP to the server and never imports torch or sglang.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

STANDIN_DIR = Path(__file__).resolve().parent / "standin"

# Environment of the server process (added to the caller's environment).
CPU_ENV: dict[str, str] = {
    # sglang's is_cpu() is false without it, whatever --device says
    "SGLANG_USE_CPU_ENGINE": "1",
    # the sgl_kernel stand-in and its start-up hook (standin/sitecustomize.py), in every process sglang spawns
    "PYTHONPATH": str(STANDIN_DIR),
    # sglang torch.compile-s a few small speculative helpers; eager is as correct, saves the compile at start-up
    # and needs no C++ compiler on the machine
    "TORCHDYNAMO_DISABLE": "1",
}

# Arguments every CPU launch gets (after --model-path, --host and --port).
CPU_ARGS: tuple[str, ...] = (
    "--device",
    "cpu",
    # the KV pool is sized from free RAM otherwise: ~10 GB and ~40 s just to allocate it
    "--max-total-tokens",
    "16384",
    "--mem-fraction-static",
    "0.5",
    # log a decode line (and update avg_spec_accept_length) on every decode step, not every 40
    "--decode-log-interval",
    "1",
    # request timestamps in meta_info and the Prometheus /metrics endpoint
    "--enable-metrics",
)

BIND_CLASH = ("address already in use", "errno 98", "error while attempting to bind")


def spec_args(draft: str | os.PathLike[str], config: tuple[int, int, int]) -> list[str]:
    """The EAGLE3 arguments for draft model `draft` at (steps, topk, draft tokens) `config`."""
    steps, topk, tokens = config
    return [
        "--speculative-algorithm",
        "EAGLE3",
        "--speculative-draft-model-path",
        str(draft),
        "--speculative-num-steps",
        str(steps),
        "--speculative-eagle-topk",
        str(topk),
        "--speculative-num-draft-tokens",
        str(tokens),
    ]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def http_json(url: str, payload: Mapping | Sequence | None = None, timeout: float = 300.0) -> Any:
    """GET (payload None) or POST JSON; the decoded JSON answer ({"text": body} when it is not JSON)."""
    data = None if payload is None else json.dumps(payload).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        body = resp.read().decode()
    try:
        return json.loads(body)
    except json.JSONDecodeError:
        return {"text": body}


def _healthy(base: str) -> bool:
    try:
        with urllib.request.urlopen(base + "/health", timeout=5) as resp:
            return resp.status == 200
    except (urllib.error.URLError, OSError):
        return False


def log_tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _stop(proc: subprocess.Popen, grace_s: float = 20.0) -> None:
    """SIGTERM the process group the server leads, then SIGKILL it if it outlives `grace_s`."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)  # children that outlived their leader
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)


def _launch(argv: list[str], env: dict[str, str], log_path: Path) -> subprocess.Popen:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "wb") as log:
        return subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, start_new_session=True
        )


@contextlib.contextmanager
def start_sglang(
    python: str | os.PathLike[str],
    model: str | os.PathLike[str],
    *,
    draft: str | os.PathLike[str] | None = None,
    config: tuple[int, int, int] | None = None,
    log_path: str | os.PathLike[str],
    extra_args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    timeout_s: float = 240.0,
    attempts: int = 3,
) -> Iterator[str]:
    """Run the real sglang server on 127.0.0.1 and yield its base URL (``http://127.0.0.1:PORT``).

    With `draft` and `config` (steps, topk, draft tokens) it runs EAGLE3. Waits for /health to answer 200 (sglang
    answers 503 until its own warm-up request is done). A port taken between choosing and binding it is retried
    on a new port (up to `attempts`); any other failed start raises RuntimeError with the log's tail. On exit the
    server's whole process group gets SIGTERM, then SIGKILL if it lingers.
    """
    if (draft is None) != (config is None):
        raise ValueError("give both draft and config, or neither")
    log = Path(log_path)
    full_env = {**os.environ, **CPU_ENV, **(env or {})}
    for attempt in range(1, attempts + 1):
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        argv = [str(python), "-m", "sglang.launch_server", "--model-path", str(model)]
        argv += ["--host", "127.0.0.1", "--port", str(port), *CPU_ARGS]
        if draft is not None and config is not None:
            argv += spec_args(draft, config)
        argv += list(extra_args)
        proc = _launch(argv, full_env, log)
        deadline = time.monotonic() + timeout_s
        try:
            while time.monotonic() < deadline and proc.poll() is None and not _healthy(base):
                time.sleep(1.0)
            if proc.poll() is None and _healthy(base):
                break
            tail = log_tail(log)
            _stop(proc)
            if attempt < attempts and any(marker in tail.lower() for marker in BIND_CLASH):
                continue
            why = "exited" if proc.returncode is not None else f"not healthy after {timeout_s:.0f} s"
            raise RuntimeError(f"sglang server {why} (log {log}):\n{tail}")
        except BaseException:
            _stop(proc)
            raise
    try:
        yield base
    finally:
        _stop(proc)
