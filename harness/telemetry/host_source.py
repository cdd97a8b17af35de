"""``NoEnergySource``: the telemetry of a CPU host whose kernel exposes no RAPL counters (``RaplProbe.unavailable``).

A sampler there would have nothing to sample (no energy, no power), so there is none: each snapshot reads the host
on demand (the CPU's name and utilization), and every window is invalid with ``no_energy``, so rows carry null
energy, never a made-up number, and ``extras.energy_unavailable`` says why (the probe's reason).
"""

from __future__ import annotations

import itertools
import os
from typing import Any

from harness.core.clocks import mono_ns, wall_ns
from harness.telemetry.fields import STATE_FIELDS
from harness.telemetry.rapl_probe import RaplProbe
from harness.telemetry.windows import NO_ENERGY, GpuSample, WindowStats


class NoEnergySource:
    """A ``TelemetrySource`` without a sampler: host readings on demand, windows without energy."""

    has_power = False
    """No power reading at all (``harness serve`` then routes by the pick table alone: no band to hold)."""

    def __init__(self, probe: RaplProbe) -> None:
        self.probe = probe
        self.run_id = f"host-{os.getpid()}"
        self._seq = itertools.count()

    def snapshot(self) -> GpuSample:
        reading = self.probe.read()
        return GpuSample(
            run_id=self.run_id,
            seq=next(self._seq),
            t_wall_ns=wall_ns(),
            t_mono_ns=mono_ns(),
            errors=reading["errors"],
            **{k: reading[k] for k in STATE_FIELDS},
        )

    def sample_at(self, t_ns: int) -> GpuSample:
        return self.snapshot()

    def window(self, start_ns: int, end_ns: int, wait_s: float | None = None) -> WindowStats:
        return WindowStats.invalid(start_ns, end_ns, NO_ENERGY)

    def identity(self) -> dict[str, Any]:
        return {**self.probe.identity(), "sampler": "none: no energy source on this host"}

    def close(self) -> None:
        self.probe.close()
