"""One writer per run folder: an exclusive ``flock`` on ``RUN_DIR/.lock``, held for the writer's whole life.

The kernel drops the lock when the holder dies (even by ``kill -9``), so a stale lock never blocks ``--resume``.
The holder writes its pid, host and start time into the lock file (and the sweep copies them into the manifest), so
a second writer's error names the holder, and ``harness status`` tells a live run from a dead one: the lock taken
means running; a manifest that still says ``running`` with nobody holding the lock means the writer is gone.
Children never inherit the lock (``subprocess`` closes inherited descriptors), so a leftover server cannot hold it.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
from pathlib import Path
from typing import Any

from harness.core.clocks import to_iso, wall_ns
from harness.core.errors import OutputError
from harness.runs.writable import check_writable

LOCK_NAME = ".lock"


class RunFolderBusy(OutputError):
    """Another process is writing this run folder."""

    exit_code = 8


def holder_info() -> dict[str, Any]:
    """This process as a writer: pid, host, start time."""
    now = wall_ns()
    return {"pid": os.getpid(), "host": socket.gethostname(), "started_ns": now, "started": to_iso(now)}


def _read_holder(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text() or "{}")
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def describe_holder(info: dict[str, Any]) -> str:
    if not info.get("pid"):
        return "another process (its pid is not recorded yet)"
    return f"pid {info['pid']} on {info.get('host', '?')} since {info.get('started', '?')}"


class RunLock:
    """The exclusive lock of one run folder; ``acquire()`` raises ``RunFolderBusy`` naming the holder."""

    def __init__(self, run_dir: str | Path) -> None:
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / LOCK_NAME
        self.info: dict[str, Any] = {}
        self._fd: int | None = None

    def acquire(self) -> dict[str, Any]:
        """Take the lock (the folder must exist); write and return this writer's pid/host/start."""
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            if exc.errno in (errno.EACCES, errno.EPERM):  # another user's (a run as root): say whose, and the fix
                check_writable([self.run_dir], f"the run folder {self.run_dir}")
            raise OutputError(
                f"cannot create the run lock {self.path}: {exc.strerror}", fix="choose a writable run folder"
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            holder = describe_holder(_read_holder(self.path))
            raise RunFolderBusy(
                f"{self.run_dir} is being written by {holder}",
                fix="wait for that run to finish (harness status shows it), or stop it before --resume",
            ) from None
        except OSError as exc:
            os.close(fd)
            raise OutputError(
                f"cannot lock {self.path}: {exc.strerror}",
                fix="put the run folder on a local file system (one that supports flock)",
            ) from None
        self.info = holder_info()
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(self.info) + "\n").encode(), 0)
        os.fsync(fd)
        self._fd = fd
        return self.info

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor drops the flock
            self._fd = None

    def __enter__(self) -> "RunLock":
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def probe_holder(run_dir: str | Path) -> dict[str, Any] | None:
    """The live writer of ``run_dir`` (pid/host/start) when one holds the lock, else None.

    Reads ``/proc/locks`` (Linux) so that asking never takes the lock itself, not even for an instant; elsewhere it
    falls back to a non-blocking shared-lock probe.
    """
    path = Path(run_dir) / LOCK_NAME
    try:
        inode = path.stat().st_ino
    except OSError:
        return None
    held = _held_in_proc_locks(inode)
    if held is None:
        held = _held_by_probe(path)
    return (_read_holder(path) or {"pid": None}) if held else None


def _held_in_proc_locks(inode: int) -> bool | None:
    try:
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        parts = line.split()
        if "FLOCK" in parts and "->" not in parts:
            dev = next((p for p in parts if p.count(":") == 2), "")
            if dev.rsplit(":", 1)[-1] == str(inode):
                return True
    return False


def _held_by_probe(path: Path) -> bool:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
