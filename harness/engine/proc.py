"""Child processes the harness owns: started in their own process group, tied to the harness's life, stopped by PID.

Children get ``PR_SET_PDEATHSIG`` (Linux) so a harness killed with ``kill -9`` does not leave servers behind, and
``stop`` sends SIGTERM to the child's own process group (sglang spawns scheduler processes), waits, then SIGKILLs.
The death signal follows the *thread* that spawned the child: a server launched from a worker thread (serve's relaunch
pool) gets SIGTERM when that thread ends, at the pool's close, just before ``stop`` sends its own; the twin's servers
take the second one safely (``harness.core.stopflag``).
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

_PR_SET_PDEATHSIG = 1


try:  # loaded once in the parent: the child must not load libraries between fork and exec
    _LIBC = ctypes.CDLL("libc.so.6", use_errno=True) if sys.platform.startswith("linux") else None
except OSError:
    _LIBC = None


def _die_with_parent() -> None:  # runs in the child between fork and exec
    if _LIBC is not None:
        _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free right now on ``host``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def spawn(
    argv: list[str], log_path: str | Path, env: dict[str, str] | None = None, cwd: str | Path | None = None
) -> subprocess.Popen:
    """Start ``argv`` with stdout+stderr appended to ``log_path``, in a new session, dying with this process."""
    log_path = Path(log_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    full_env = dict(os.environ)
    full_env.update(env or {})
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=full_env,
            cwd=cwd,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )


def stop(proc: subprocess.Popen, timeout_s: float = 60.0) -> int | None:
    """SIGTERM the child's process group, wait up to ``timeout_s``, then SIGKILL it; return the exit code."""
    if proc.poll() is None:
        _signal_group(proc, signal.SIGTERM)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _signal_group(proc, signal.SIGKILL)
            proc.wait(timeout=10)
    # Reap stragglers left in the group (children of the server) without touching anything else.
    _signal_group(proc, signal.SIGKILL)
    return proc.returncode


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)  # the child leads its own session: its group id is its pid
    except (ProcessLookupError, PermissionError):
        if proc.poll() is None:
            try:
                proc.send_signal(sig)
            except ProcessLookupError:
                pass


def log_tail(path: str | Path, max_lines: int = 25, max_bytes: int = 16384) -> str:
    """The last lines of a log file (empty when there is none)."""
    p = Path(path)
    if not p.exists():
        return ""
    with open(p, "rb") as f:
        f.seek(0, os.SEEK_END)
        size = f.tell()
        f.seek(max(0, size - max_bytes))
        data = f.read().decode("utf-8", "replace")
    return "\n".join(data.splitlines()[-max_lines:])
