"""Clocks. Every timestamp is UTC epoch nanoseconds (``wall_ns``) plus monotonic nanoseconds (``mono_ns``).

Never use naive datetimes. The twin world may run faster than the wall clock (``--time-scale X``): its clock is a
``ScaledClock`` anchored on one (wall, monotonic) pair, and every duration that is divided by (power = energy /
duration, speed = tokens / duration) must be measured on the same clock as the quantity it divides.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime, timezone, tzinfo


def wall_ns() -> int:
    """UTC epoch nanoseconds (CLOCK_REALTIME)."""
    return time.time_ns()


def mono_ns() -> int:
    """Monotonic nanoseconds (CLOCK_MONOTONIC); only differences mean anything."""
    return time.monotonic_ns()


def to_iso(ns: int) -> str:
    """RFC 3339 UTC string with an explicit offset for an epoch-ns timestamp."""
    return datetime.fromtimestamp(ns / 1e9, tz=timezone.utc).isoformat()


def parse_iso_ns(text: str, *, assume_tz: tzinfo | None = None) -> int:
    """Parse an ISO-8601 timestamp to UTC epoch ns.

    A naive timestamp is rejected unless ``assume_tz`` says which zone it was written in (for example Harbor's
    job-level times, which are naive local time of the machine that wrote them).
    """
    dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if dt.tzinfo is None:
        if assume_tz is None:
            raise ValueError(f"naive timestamp {text!r}: its time zone is unknown")
        dt = dt.replace(tzinfo=assume_tz)
    return int(round(dt.timestamp() * 1e6)) * 1000


@dataclass(frozen=True)
class ScaledClock:
    """A clock that runs ``scale`` times faster than the wall clock, anchored at (anchor_wall_ns, anchor_mono_ns).

    ``now_ns()`` is in the scaled world's epoch ns; at the anchor it equals the wall clock. With scale 1 it is
    the wall clock (up to NTP slew). The twin GPU device publishes its anchor and scale at ``GET /v1/clock``.
    """

    scale: float = 1.0
    anchor_wall_ns: int = 0
    anchor_mono_ns: int = 0

    @classmethod
    def starting_now(cls, scale: float = 1.0) -> "ScaledClock":
        return cls(scale=float(scale), anchor_wall_ns=wall_ns(), anchor_mono_ns=mono_ns())

    def from_mono(self, mono: int) -> int:
        """Scaled-world epoch ns at a monotonic instant."""
        return self.anchor_wall_ns + int((mono - self.anchor_mono_ns) * self.scale)

    def now_ns(self) -> int:
        return self.from_mono(mono_ns())

    def elapsed_s(self, mono_start: int, mono_end: int) -> float:
        """Scaled-world seconds between two monotonic instants."""
        return (mono_end - mono_start) * self.scale / 1e9

    def wall_seconds(self, world_seconds: float) -> float:
        """How long ``world_seconds`` of scaled time last on the wall clock (for sleeps)."""
        return world_seconds / self.scale

    def sleep(self, world_seconds: float) -> None:
        if world_seconds > 0:
            time.sleep(world_seconds / self.scale)

    def to_dict(self) -> dict:
        return {"time_scale": self.scale, "anchor_wall_ns": self.anchor_wall_ns, "anchor_mono_ns": self.anchor_mono_ns}

    @classmethod
    def from_dict(cls, d: dict) -> "ScaledClock":
        return cls(
            scale=float(d["time_scale"]),
            anchor_wall_ns=int(d["anchor_wall_ns"]),
            anchor_mono_ns=int(d["anchor_mono_ns"]),
        )


WALL_CLOCK = ScaledClock(scale=1.0, anchor_wall_ns=0, anchor_mono_ns=0)
"""Used with real sglang: durations are plain monotonic differences (scale 1)."""
