"""A stop request that a signal handler may set (SIGTERM, Ctrl-C), and waits that wake on it at once.

``threading.Event.set`` takes the event's lock. A handler runs in the main thread between two bytecodes, and when
that thread was inside ``Event.wait`` of the same event holding that lock, ``set`` waits for a lock its own thread
holds: the process hangs until SIGKILL. Seen: a twin engine that took SIGTERM while its main loop waited, then
ignored it for the 60 s until ``harness.engine.proc.stop`` killed it (a serve test ran 60 s long, 1 run in 5).
``StopFlag.set`` only stores a bool and writes a byte to a self-pipe; ``wait`` selects on the pipe, so no lock is
shared with the handler, and every waiter (any thread) wakes when it is set.
"""

from __future__ import annotations

import os
import select
import signal


class StopFlag:
    """Like a ``threading.Event`` that is only ever set once, safe to set from a signal handler."""

    def __init__(self) -> None:
        self._set = False
        self._r, self._w = os.pipe()
        os.set_blocking(self._w, False)

    def set(self) -> None:
        self._set = True
        try:
            os.write(self._w, b"x")  # the pipe stays readable from now on: every later wait returns at once
        except OSError:  # full (already set many times) or closed: the bool is what counts
            pass

    def is_set(self) -> bool:
        return self._set

    def wait(self, timeout: float | None = None) -> bool:
        """Block up to ``timeout`` seconds (None: until set); whether the flag is set."""
        if not self._set:
            try:
                select.select([self._r], [], [], timeout)
            except (OSError, ValueError):  # closed at interpreter exit
                pass
        return self._set

    def stop_on_signals(self, *signums: int) -> "StopFlag":
        """Set this flag on each of ``signums`` (default SIGTERM and SIGINT); call from the main thread."""
        for signum in signums or (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: self.set())
        return self
