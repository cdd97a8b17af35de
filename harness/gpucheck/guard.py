"""Undo what the check changed on the GPU (power limit, locked clocks) on every way out: normal exit, an exception,
SIGINT/SIGTERM and interpreter exit. Each undo runs once; its failure is recorded, never raised."""

from __future__ import annotations

import atexit
import signal
import sys
import threading
from types import FrameType
from typing import Callable


class RestoreGuard:
    """A stack of named undo actions; ``restore_all`` runs them newest first, once each."""

    def __init__(self, log: Callable[[str], None] = lambda m: print(m, flush=True)) -> None:
        self._undo: list[tuple[str, Callable[[], str]]] = []
        self._lock = threading.Lock()
        self.log = log
        self.results: list[dict[str, str]] = []
        self.signal_received: str | None = None

    def push(self, name: str, undo: Callable[[], str]) -> None:
        """Register ``undo`` (returns a short description of what it restored)."""
        with self._lock:
            self._undo.append((name, undo))

    def pop(self, name: str) -> None:
        """Run and forget the undo named ``name`` (the phase restores its own change when it ends normally)."""
        with self._lock:
            items = [u for u in self._undo if u[0] == name]
            self._undo = [u for u in self._undo if u[0] != name]
        for item in items:
            self._run(*item)

    def discard(self, name: str) -> None:
        """Forget the undo named ``name`` without running it (the change it guarded was refused: nothing to undo)."""
        with self._lock:
            self._undo = [u for u in self._undo if u[0] != name]

    def _run(self, name: str, undo: Callable[[], str]) -> None:
        try:
            self.results.append({"name": name, "ok": "true", "detail": undo()})
            self.log(f"restored {name}: {self.results[-1]['detail']}")
        except Exception as exc:  # noqa: BLE001 - a failed restore is a finding, and the others must still run
            self.results.append({"name": name, "ok": "false", "detail": f"{type(exc).__name__}: {exc}"})
            self.log(f"RESTORE FAILED {name}: {type(exc).__name__}: {exc}")

    def restore_all(self) -> None:
        while True:
            with self._lock:
                if not self._undo:
                    return
                item = self._undo.pop()
            self._run(*item)

    def install(self) -> "RestoreGuard":
        """Restore at interpreter exit and on SIGINT/SIGTERM (then exit 130/143)."""
        atexit.register(self.restore_all)
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self._on_signal)
        return self

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.signal_received = signal.Signals(signum).name
        self.log(f"{self.signal_received} received: restoring the GPU settings")
        self.restore_all()
        sys.exit(128 + signum)
