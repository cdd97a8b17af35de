"""Shared helpers for telemetry tests: a scripted probe with an exact energy counter, synthetic samples, free ports."""

from __future__ import annotations

import math
import socket
import time
from typing import Any, Callable

from harness.telemetry.windows import STATE_FIELDS, GpuSample


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wave_power(t_s: float) -> float:
    """A load-like power trace (W): 40 W base, a 2.5 s square wave of +30 W and a slow sine ripple."""
    square = 30.0 if int(t_s / 2.5) % 2 else 0.0
    return 40.0 + square + 5.0 * math.sin(t_s * 1.3)


def wave_energy(t_s: float) -> float:
    """Exact integral of ``wave_power`` from 0 to ``t_s`` (J)."""
    k, rem = divmod(t_s, 5.0)
    on = k * 2.5 + max(0.0, rem - 2.5)
    return 40.0 * t_s + 30.0 * on + 5.0 * (1.0 - math.cos(1.3 * t_s)) / 1.3


class ScriptedProbe:
    """A probe whose device clock runs ``scale`` times faster than monotonic and whose energy counter is the exact
    integral ``energy(t)`` of ``power(t)``. Faults: ``counter_reset``, ``uuid``,
    ``delay_s``, ``error``."""

    kind = "scripted"

    def __init__(
        self,
        power: Callable[[float], float] = wave_power,
        energy: Callable[[float], float] = wave_energy,
        scale: float = 1.0,
    ) -> None:
        self.power = power
        self.energy_j = energy
        self.scale = scale
        self.anchor_mono = time.monotonic_ns()
        self.anchor_wall = time.time_ns()
        self.uuid = "GPU-scripted-0"
        self.delay_s = 0.0
        self.error: str | None = None
        self.counter_offset_j = 0.0
        self.reads = 0

    def device_s(self, mono: int) -> float:
        return (mono - self.anchor_mono) * self.scale / 1e9

    def truth_wall(self, start_ns: int, end_ns: int) -> float:
        """Energy over a wall-ns interval (wall and mono advance together during a test)."""
        off = self.anchor_wall - self.anchor_mono
        return self.energy_j(self.device_s(end_ns - off)) - self.energy_j(self.device_s(start_ns - off))

    def read(self) -> dict[str, Any]:
        self.reads += 1
        if self.delay_s:
            time.sleep(self.delay_s)
        out: dict[str, Any] = {f: None for f in STATE_FIELDS}
        if self.error:
            out["device_ns"], out["errors"] = None, [self.error]
            return out
        mono = time.monotonic_ns()
        t = self.device_s(mono)
        out.update(
            name="Scripted GPU", uuid=self.uuid, driver_version="scripted",
            energy_mj=(self.energy_j(t) - self.counter_offset_j) * 1e3, power_w=self.power(t), temperature_c=50.0,
            utilization_pct=80.0, memory_used_mb=1000.0, clock_event_reasons=0x1,
        )  # fmt: skip
        out["device_ns"] = self.anchor_wall + int(t * 1e9)
        out["errors"] = []
        return out

    def identity(self) -> dict[str, Any]:
        return {"backend": "scripted", "name": "Scripted GPU", "uuid": self.uuid}

    def close(self) -> None:
        pass


def mk_sample(seq: int, t_s: float, energy_j: float | None, power_w: float | None = None, **kw: Any) -> GpuSample:
    """A synthetic sample at ``t_s`` seconds after epoch 1e18 ns (wall = mono = device)."""
    t_ns = 10**18 + int(round(t_s * 1e9))
    base: dict[str, Any] = dict(run_id="r", seq=seq, t_wall_ns=t_ns, t_mono_ns=t_ns, device_ns=t_ns, uuid="GPU-a", name="g",
                                energy_mj=None if energy_j is None else energy_j * 1e3, power_w=power_w)  # fmt: skip
    base.update(kw)
    return GpuSample(**base)


def ns(t_s: float) -> int:
    return 10**18 + int(round(t_s * 1e9))
