"""Where a run's GPU time went, by phase: what a sweep costs its user, and how much of it is measurement.

Device seconds: wall seconds times the world's time scale (a twin run at time scale 20 spends 20 device seconds per
wall second; a GPU run, 1). The twin's ``--twin-launch-scale`` shortens its launches for test speed only, so the
accounting undoes it on the launch phase: a launch counts what it would cost at the real engine's pace.

Phases (they sum to ``total``):
- ``preflight``: the checks and the band probe before the first cell (probe launches included);
- ``launch``: a server from start to ready (imports, weights, CUDA graphs, the engine's own warm-up), ladder retries
  included, the memory wait excluded;
- ``memory_wait``: waiting, before a launch, for a stopped server's memory to come back;
- ``warmup``: the warm-up batch, the bench's requests around the measured window, and cells that failed;
- ``measured``: the measured windows the rows report;
- ``flush_settle``: cache flushes and the settle between cells;
- ``teardown``: stopping servers.
"""

from __future__ import annotations

import math
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator

PHASES = ("preflight", "launch", "memory_wait", "warmup", "measured", "flush_settle", "teardown")
"""The manifest's ``gpu_time`` keys, besides ``total`` and the derived figures."""


class GpuTime:
    """Device seconds per phase, carried on from a saved record (``--resume`` adds to what the killed run spent);
    ``on_change`` gets the record after every addition (the manifest keeps it)."""

    def __init__(
        self,
        scale: float = 1.0,
        launch_scale: float = 1.0,
        saved: dict[str, Any] | None = None,
        on_change: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self.scale = scale
        self.launch_scale = launch_scale if launch_scale > 0 else 1.0
        self.seconds = {p: float((saved or {}).get(p) or 0.0) for p in PHASES}
        self.launch_parts = {k: float(v) for k, v in ((saved or {}).get("launch_phases") or {}).items()}
        """The launch phase by the server log's own phases (imports, weights, cuda_graphs, other), device seconds."""
        self.on_change = on_change

    def add(self, phase: str, wall_s: float) -> None:
        """``wall_s`` wall seconds spent in ``phase`` (negative spans, a clock quirk, count as nothing)."""
        self.add_device(phase, max(0.0, wall_s) * self.scale)

    def add_device(self, phase: str, device_s: float) -> None:
        """``device_s`` device seconds spent in ``phase`` (a measured window is already on the world clock)."""
        if phase not in self.seconds:
            raise ValueError(f"unknown GPU-time phase {phase!r}; known: {', '.join(PHASES)}")
        if phase == "launch":
            device_s /= self.launch_scale
        self.seconds[phase] += max(0.0, device_s)
        if self.on_change is not None:
            self.on_change(self.record())

    def add_launch_parts(self, wall_parts: dict[str, float]) -> None:
        """One launch's parts in wall seconds (``harness.engine.launch_phases``), kept beside the launch phase."""
        for part, wall_s in wall_parts.items():
            self.launch_parts[part] = (
                self.launch_parts.get(part, 0.0) + max(0.0, wall_s) * self.scale / self.launch_scale
            )
        if self.on_change is not None:
            self.on_change(self.record())

    @contextmanager
    def timing(self, phase: str) -> Iterator[None]:
        """Count the wall time of the block as ``phase``."""
        t0 = time.monotonic()
        try:
            yield
        finally:
            self.add(phase, time.monotonic() - t0)

    @property
    def total(self) -> float:
        return sum(self.seconds.values())

    def record(self) -> dict[str, Any]:
        """The manifest's ``gpu_time``: every phase and ``total`` (device seconds), ``measured_share`` (0-1) and
        ``per_measured`` (GPU time / measured windows: 1 would be a run that did nothing but measure)."""
        rec = time_record(self.seconds, self.scale, self.launch_scale)
        if self.launch_parts:
            rec["launch_phases"] = {k: round(v, 3) for k, v in self.launch_parts.items()}
        return rec


def twin_launch_scale(engine: str, engine_args: list[str]) -> float:
    """The ``--twin-launch-scale`` a twin sweep passes its engines (``--engine-arg``), else 1."""
    if engine != "twin":
        return 1.0
    args = [a for arg in engine_args for a in str(arg).split("=", 1)]
    for flag, value in zip(args, args[1:]):
        if flag == "--twin-launch-scale":
            try:
                return float(value)
            except ValueError:
                return 1.0
    return 1.0


def time_record(seconds: dict[str, float], scale: float = 1.0, launch_scale: float = 1.0) -> dict[str, Any]:
    """The record of per-phase device seconds (see ``GpuTime.record``)."""
    total = sum(seconds.get(p, 0.0) for p in PHASES)
    measured = seconds.get("measured", 0.0)
    return {
        **{p: round(seconds.get(p, 0.0), 3) for p in PHASES},
        "total": round(total, 3),
        "measured_share": round(measured / total, 4) if total > 0 else None,
        "per_measured": round(total / measured, 3) if measured > 0 else None,
        "unit": "device seconds",
        "time_scale": scale,
        "launch_scale_undone": launch_scale if launch_scale != 1.0 else None,
    }


def gpu_time_line(record: dict[str, Any] | None) -> str | None:
    """One line for the end of a sweep, ``harness status`` and the report; None without a record."""
    if not record or not record.get("total"):
        return None
    total = float(record["total"])
    parts = [f"{label} {100 * float(record.get(p) or 0.0) / total:.0f} %" for p, label in _LABELS if record.get(p)]
    share, per = record.get("measured_share"), record.get("per_measured")
    head = f"GPU time {duration_text(total)}"
    if share is not None and per is not None:
        head += f": measured share {100 * share:.0f} % ({per:.1f}x the measured windows)"
    return head + ("; " + ", ".join(parts) if parts else "")


def versus_plan_line(spent: dict[str, Any] | None, plan: dict[str, Any] | None) -> str | None:
    """What the run spent against what its plan estimated (``plan.estimate.gpu_time``), phase by phase where they
    differ most; None without both."""
    planned = ((plan or {}).get("estimate") or {}).get("gpu_time") or {}
    if not spent or not planned.get("total") or not spent.get("total"):
        return None
    ratio = float(spent["total"]) / float(planned["total"])
    worst = sorted(PHASES, key=lambda p: -abs(float(spent.get(p) or 0) - float(planned.get(p) or 0)))[:2]
    detail = ", ".join(
        f"{p} {duration_text(float(spent.get(p) or 0))} vs ~{duration_text(float(planned.get(p) or 0))}" for p in worst
    )
    return f"GPU time spent {duration_text(float(spent['total']))} against a plan of ~{duration_text(float(planned['total']))} ({ratio:.2f}x; {detail})"


_LABELS = (
    ("launch", "launch"),
    ("memory_wait", "memory wait"),
    ("warmup", "warm-up"),
    ("measured", "measured"),
    ("flush_settle", "flush+settle"),
    ("teardown", "teardown"),
    ("preflight", "preflight"),
)


def duration_text(seconds: float) -> str:
    """Device seconds for a reader: hours past an hour, minutes past a minute, else whole seconds."""
    if seconds >= 3600:
        return f"{seconds / 3600:.2f} h"
    if seconds >= 60:
        return f"{seconds / 60:.1f} min"
    return f"{math.ceil(seconds)} s"
