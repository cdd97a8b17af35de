"""Launch into freed memory: after a server stops, the next launch waits until the GPU's memory use is back to what
it was before that server started. A real GPU frees a dead process's memory some time after it exits; sglang sizes
its KV pool from the memory free when it starts and vLLM refuses to start below its utilization target, so a launch
that does not wait gets a smaller pool, a false out-of-memory, or a false retry at a lower mem fraction. Every
launch goes through ``EngineLauncher``, which asks this gate first: the sweep's cells and mem-fraction ladder and
``harness serve``'s relaunch alike."""

from __future__ import annotations

import threading
import time
from typing import Callable

MEMORY_RELEASE_TIMEOUT_S = 60.0
"""Wait at most this long (wall s) for a stopped server's memory; then launch anyway and say so."""

MemoryReading = Callable[[], tuple[float | None, float | None]]
"""(used MB, total MB) of the GPU the servers run on; (None, None) when unknown."""
MIN_SLACK_MB = 256.0
"""Memory over the level before the last server that still counts as freed (allocator and driver noise)."""
FOOTPRINT_SLACK = 0.05
"""With the models' size known, the slack is this share of it (at least ``MIN_SLACK_MB``): on an 80 GB board the old
2 % of the board (1.6 GB) let most of a 1B model's weights (2.5 GB with its draft) still be held at the next launch."""
BOARD_SLACK = 0.02
"""Without it (models not on disk yet), this share of the board's memory, as before."""


def slack_mb(total_mb: float | None, footprint_mb: float | None) -> float:
    """How far above the level before the last server memory may stay and count as freed."""
    if footprint_mb:
        return max(MIN_SLACK_MB, FOOTPRINT_SLACK * footprint_mb)
    return max(MIN_SLACK_MB, BOARD_SLACK * (total_mb or 0.0))


class MemoryRelease:
    """The gate every launch passes. ``before_launch`` waits while the memory of a stopped server is still in use and
    returns the level the new server starts from; ``stopped`` records that level as the one to come back to. With
    servers still running (``harness serve``'s pool) there is no level to wait for: they hold memory too."""

    def __init__(
        self,
        read: MemoryReading | None = None,
        *,
        timeout_s: float = MEMORY_RELEASE_TIMEOUT_S,
        poll_s: float = 0.05,
        note: Callable[[str], None] | None = None,
        footprint: Callable[[], float | None] | None = None,
    ) -> None:
        self.read = read
        self.footprint = footprint
        """The MB of the models a server loads (target + draft weights on disk), read at each wait; None: unknown."""
        self.timeout_s = timeout_s
        self.poll_s = poll_s
        self.note = note
        self.waited_s = 0.0
        """Wall seconds every launch so far spent waiting for memory."""
        self._lock = threading.Lock()
        self._live = 0
        self._floor: float | None = None

    def before_launch(self) -> float | None:
        """Wait (at most ``timeout_s``) until memory is back to the level before the last stopped server started;
        then the level now (None without a reading)."""
        if self.read is None:
            return None
        with self._lock:
            floor, live = self._floor, self._live
            self._floor = None
            self._live += 1
        if floor is None or live > 0:  # nothing stopped since, or servers still running: no level to wait for
            return self.read()[0]
        t0 = time.monotonic()
        footprint = self.footprint() if self.footprint is not None else None
        while True:
            used, total = self.read()
            if used is None or used <= floor + slack_mb(total, footprint):
                break
            if time.monotonic() - t0 >= self.timeout_s:
                if self.note is not None:
                    self.note(
                        f"GPU memory still {used:.0f} MB in use (was {floor:.0f} MB before the previous server) "
                        f"after {self.timeout_s:g} s; launching anyway"
                    )
                break
            time.sleep(self.poll_s)
        self.waited_s += time.monotonic() - t0
        return used  # the wait's last reading is the level the new server starts from

    def stopped(self, level_before: float | None) -> None:
        """A server launched from ``level_before`` (``before_launch``'s answer) stopped, or its launch failed."""
        with self._lock:
            self._live = max(0, self._live - 1)
            if level_before is not None:
                self._floor = level_before if self._floor is None else min(self._floor, level_before)
