"""The twin GPU's history: every state change of the device (``Snapshot``), kept for ``HISTORY_WALL_S`` wall seconds,
and the NVML-like reading of a snapshot (``reading``).

Between two snapshots power is constant, so the state at any recorded device instant is exact: energy grows linearly,
temperature and the utilization average relax exponentially (the physics of ``TwinGpu._integrate``). The device
answers for past instants from it (``GET /v1/states``), like a driver's sample buffer (``nvmlDeviceGetSamples``).
"""

from __future__ import annotations

import bisect
import math
import random
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any

from harness.gpu.clock_events import APPLICATIONS_CLOCKS_SETTING, HW_THERMAL, IDLE, SW_POWER_CAP, SW_THERMAL

if TYPE_CHECKING:
    from harness.twin.device.gpu import TwinGpu


@dataclass(frozen=True)
class Snapshot:
    """The device state from ``t_ns`` until the next snapshot: between two, power is constant, so energy,
    temperature and the utilization average evolve exactly (``evolve``) and everything else stays as it is."""

    t_ns: int
    energy_j: float
    power_w: float
    temp_c: float
    util: float
    util_avg: float
    busy: bool
    last_busy_ns: int
    clock_factor: float
    capped: bool
    lock_binds: bool
    limit_w: float
    engines: int
    memory_used_mb: float
    counter_offset_j: float
    uuid: str

    def same_regime(self, other: "Snapshot") -> bool:
        """Whether ``other`` follows from this one by ``evolve`` alone (nothing but time changed)."""
        return all(getattr(self, f.name) == getattr(other, f.name) for f in fields(self) if f.name not in EVOLVING)

    def evolve(self, t_ns: int, ambient_c: float, r_th: float, tau_s: float, util_avg_s: float) -> "Snapshot":
        """The state at ``t_ns`` >= ``self.t_ns`` under this snapshot's constant power (``relax``)."""
        dt = (t_ns - self.t_ns) / 1e9
        if dt <= 0:
            return self
        energy, util_avg, temp = relax(
            self.energy_j,
            self.util_avg,
            self.temp_c,
            self.power_w,
            self.util if self.busy else 0.0,
            dt,
            ambient_c,
            r_th,
            tau_s,
            util_avg_s,
        )
        return replace(
            self,
            t_ns=t_ns,
            energy_j=energy,
            temp_c=temp,
            util_avg=util_avg,
            last_busy_ns=t_ns if self.busy else self.last_busy_ns,
        )


EVOLVING = frozenset({"t_ns", "energy_j", "temp_c", "util_avg", "last_busy_ns"})
"""The ``Snapshot`` fields that change with time alone; a change in any other starts a new regime."""


def relax(
    energy_j: float,
    util_avg: float,
    temp_c: float,
    power_w: float,
    util_now: float,
    dt: float,
    ambient_c: float,
    r_th: float,
    tau_s: float,
    util_avg_s: float,
) -> tuple[float, float, float]:
    """(energy J, utilization average, temperature C) after ``dt`` seconds at constant ``power_w``: the energy counter
    integrates the power; NVML utilization (the share of the last sample period with a kernel running) is a trailing
    average of ``util_now``; the temperature relaxes toward ambient + R_th x power (exact exponential steps)."""
    t_ss = ambient_c + r_th * power_w
    return (
        energy_j + power_w * dt,
        util_now + (util_avg - util_now) * math.exp(-dt / max(util_avg_s, 1e-6)),
        t_ss + (temp_c - t_ss) * math.exp(-dt / tau_s),
    )


HISTORY_WALL_S = 120.0
"""How far back (wall seconds) the device answers for past instants: a sampler late by more reads a gap."""


class History:
    """The device's snapshots, oldest first, trimmed to ``horizon_ns`` of device time (amortized O(1) per record)."""

    def __init__(self, horizon_ns: int) -> None:
        self.horizon_ns = horizon_ns
        self.snapshots: list[Snapshot] = []
        self.times: list[int] = []  # the snapshots' t_ns (bisected)

    def __len__(self) -> int:
        return len(self.snapshots)

    def record(self, snap: Snapshot) -> None:
        """Append ``snap`` when it starts a new regime (not only time passing); the newest snapshot before the horizon
        stays, so the horizon itself is answerable."""
        if self.snapshots and self.snapshots[-1].same_regime(snap):
            return
        if self.snapshots and self.times[-1] == snap.t_ns:
            self.snapshots[-1] = snap
        else:
            self.snapshots.append(snap)
            self.times.append(snap.t_ns)
        if self.times[0] < snap.t_ns - self.horizon_ns * 3 // 2:  # trim in chunks
            k = bisect.bisect_right(self.times, snap.t_ns - self.horizon_ns) - 1
            del self.snapshots[:k], self.times[:k]

    def at(self, t_ns: int, ambient_c: float, r_th: float, tau_s: float, util_avg_s: float) -> Snapshot | None:
        """The exact state at device instant ``t_ns`` (not past the newest snapshot's evolution: callers clamp ``t_ns``
        to the device's last update), or None before the history starts."""
        k = bisect.bisect_right(self.times, t_ns) - 1
        if k < 0:
            return None
        return self.snapshots[k].evolve(t_ns, ambient_c, r_th, tau_s, util_avg_s)


def clock_event_bits(p: Any, snap: Snapshot) -> int:
    """NVML clock-event bits of ``snap`` under device parameters ``p``."""
    bits = 0
    if not snap.busy and snap.t_ns - snap.last_busy_ns >= p.idle_after_s * 1e9:
        bits |= IDLE
    if snap.capped:
        bits |= SW_POWER_CAP
    if snap.lock_binds:
        bits |= APPLICATIONS_CLOCKS_SETTING
    if snap.temp_c > p.slowdown_temp_c:
        bits |= SW_THERMAL
    if snap.temp_c > p.hw_slowdown_temp_c:
        bits |= HW_THERMAL
    return bits


def reading(gpu: TwinGpu, snap: Snapshot, w: int, m: int) -> dict:
    """The NVML-like reading of ``snap`` (the ``/v1/state`` contract), stamped at host instant (``w``, ``m``)."""
    now = snap.t_ns
    bits = clock_event_bits(gpu.p, snap)
    idle = bool(bits & IDLE)
    e_1s = gpu.energy_at(now - 1_000_000_000)
    span = min(1.0, (now - gpu.seg_t[0]) / 1e9)
    sensor = random.Random(f"{gpu.seed}-{now // 50_000_000}").gauss(0.0, gpu.p.temp_noise_c)
    memory_used = snap.memory_used_mb
    return {
        "wall_ns": w,
        "mono_ns": m,
        "device_ns": now,
        "name": gpu.p.name,
        "uuid": snap.uuid,
        "driver_version": gpu.p.driver_version,
        "hardware": gpu.profile.hardware,
        "twin": True,
        "energy_mj": int((snap.energy_j - snap.counter_offset_j) * 1000.0),
        "power_w": round(snap.power_w, 3),
        "power_avg_w": round((snap.energy_j - e_1s) / span, 3) if span > 0 else round(snap.power_w, 3),
        "temperature_c": round(snap.temp_c + sensor, 1),
        "sm_clock_mhz": gpu.p.idle_sm_clock_mhz if idle else int(round(gpu.p.max_sm_clock_mhz * snap.clock_factor)),
        "mem_clock_mhz": gpu.p.idle_mem_clock_mhz if idle else gpu.p.mem_clock_mhz,
        "utilization_pct": int(round(snap.util_avg * 100)),
        "memory_total_mb": gpu.p.memory_total_mb,
        "memory_reserved_mb": gpu.p.memory_reserved_mb,
        "memory_used_mb": int(round(memory_used)),
        "memory_free_mb": int(round(gpu.p.memory_total_mb - gpu.p.memory_reserved_mb - memory_used)),
        "power_limit_w": snap.limit_w,
        "power_management_limit_w": snap.limit_w,
        "clock_event_reasons": bits,
        "engines": snap.engines,
        "late_events": gpu.late_events,
        "max_late_ms": round(gpu.max_late_ns / 1e6, 3),
    }
