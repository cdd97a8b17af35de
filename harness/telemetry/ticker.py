"""The sampling grid: call a function on monotonic deadlines (standard library only; the sampler and the GPU check
share it). ``next += period`` after each call, so the grid never drifts; a call that ends past the next deadline
skips the missed ticks and reports them (calls never overlap or bunch up)."""

from __future__ import annotations

import threading
from typing import Callable

from harness.core.clocks import mono_ns


def run_ticks(period_s: float, stop: threading.Event, tick: Callable[[], object], on_overrun: Callable[[int], None],
              on_error: Callable[[Exception], None]) -> None:  # fmt: skip
    """Call ``tick`` every ``period_s`` until ``stop`` is set; ``on_overrun(missed)`` after a late call,
    ``on_error(exc)`` when ``tick`` raises (the loop outlives any bug in one iteration)."""
    period_ns = int(round(period_s * 1e9))
    deadline = mono_ns()
    while not stop.is_set():
        now = mono_ns()
        if now < deadline:
            if stop.wait((deadline - now) / 1e9):
                break
            continue
        try:
            tick()
        except Exception as exc:  # noqa: BLE001 - the loop must outlive any bug in one iteration
            on_error(exc)
        deadline += period_ns
        now = mono_ns()
        if now >= deadline:  # overran: skip the missed ticks, keep the grid
            missed = (now - deadline) // period_ns + 1
            on_overrun(missed)
            deadline += missed * period_ns
