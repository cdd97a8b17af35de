"""The twin GPU device: a long-lived process that owns the twin clock, power, energy, temperature and memory.

Physics (all on the twin clock, ``ScaledClock`` anchored at device start):

- Power is piecewise constant between state changes (engine activity, lease changes, physics ticks). The energy
  counter is the exact integral of that power, so ``/truth/energy`` is exact over any interval.
- Power = idle + (loaded P-state extra while an engine holds memory) + engines' dynamic demand x clock_factor^gamma,
  plus seeded per-tick jitter. When that exceeds the enforced limit the SM clock drops (clock_factor < 1, NVML bit
  0x4) until power sits at the limit (plus a small controller overshoot).
- Temperature follows first-order dynamics toward ambient + R_th x power (exact exponential step per segment);
  past the slowdown temperature the clock is reduced further (bits 0x20 / 0x40).
- A locked SM clock (``POST /v1/clocks``, as ``nvmlDeviceSetGpuLockedClocks``) is one more clock ceiling,
  locked / max SM clock, beside the thermal one: the same DVFS law (dynamic power x clock_factor^gamma) gives the
  power, the cap can only hold the clock lower still, and bit 0x2 (clocks setting) is set while the lock is what
  holds a busy clock down. Engines stretch only the compute-bound share of a step by 1/clock_factor (``model.py``).
- The idle reason (0x1) is set only after the GPU has had no load for ``idle_after_s`` twin seconds.
- Memory: engines lease MB; a lease not renewed (any activity report renews it) within ``lease_s`` WALL seconds
  expires (leases are about process liveness, not physics, so they do not scale with the twin clock).
- Load immunity: engines post their activity as timed events (``at_ns``, device time, ahead of the device clock);
  the device applies each one exactly at its instant, and the power jitter is a seeded function of device time
  (one value per ``tick_ms x time_scale`` of twin time). So the power/energy timeline depends on device time only,
  not on when the HTTP reports or the physics ticks happen to run on a busy host (docs/twin.md, "Load immunity").
- Readings of past instants: every state change is recorded (``Snapshot``, a bounded history of ``HISTORY_WALL_S``
  wall seconds), and between two changes power is constant, so the state at any recorded device instant is exact
  (``states_at``, ``GET /v1/states``). A sampler that a busy host made late reads the instants it missed, like a
  driver's sample buffer (``nvmlDeviceGetSamples``): a late read is late, not missing.
"""

from __future__ import annotations

import bisect
import heapq
import random
import threading
import uuid as uuidlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

from harness.core.clocks import ScaledClock, mono_ns, wall_ns
from harness.twin.device.history import HISTORY_WALL_S, History, Snapshot, clock_event_bits, reading, relax
from harness.twin.device.settings import BoardSettings

if TYPE_CHECKING:  # the model itself needs no pydantic (the GPU check replays it on machines without it)
    from harness.twin.profile import TwinProfile


@dataclass
class Lease:
    engine_id: str
    memory_mb: float
    lease_s: float
    expires_mono_ns: int
    busy: bool = False
    dynamic_power_w: float = 0.0
    util: float = 0.0
    pid: int | None = None


def host_clocks(tries: int = 5, tight_ns: int = 20_000) -> tuple[int, int]:
    """(mono ns, wall ns) of one instant: the wall read bracketed by two monotonic reads, retried while a preemption
    pulls them apart. Past instants are asked for in wall ns and mapped to the device clock through this pair, so its
    error is multiplied by the time scale (1 ms of preemption at scale 50 is 50 ms of device time)."""
    best = (0, 0, 1 << 62)
    for _ in range(tries):
        m0, w, m1 = mono_ns(), wall_ns(), mono_ns()
        if m1 - m0 < best[2]:
            best = ((m0 + m1) // 2, w, m1 - m0)
        if m1 - m0 <= tight_ns:
            break
    return best[0], best[1]


def cap_clock_factor(base_w: float, dynamic_w: float, cap_w: float, gamma: float, ceiling: float = 1.0) -> float:
    """Largest clock factor <= ceiling such that base + dynamic * f**gamma <= cap (pure; used by the model too)."""
    if dynamic_w <= 0 or base_w + dynamic_w * ceiling**gamma <= cap_w:
        return ceiling
    room = max(cap_w - base_w, 0.0)
    return min(ceiling, (room / dynamic_w) ** (1.0 / gamma))


class TwinGpu(BoardSettings):
    """Thread-safe state of one twin GPU. All times are device (twin) epoch ns."""

    def __init__(
        self,
        profile: TwinProfile,
        seed: int = 0,
        time_scale: float = 1.0,
        index: int = 0,
        memory_release_s: float = 0.0,
    ) -> None:
        self.profile = profile
        self.memory_release_s = memory_release_s
        """Wall seconds a released lease's memory stays in use (a driver frees a dead process's memory some time
        after it exits); 0 frees it at once."""
        self._releasing: list[tuple[int, float]] = []  # (mono ns when freed, MB) of released leases
        self.index = index  # the NVML-style device index on its node; only the UUID depends on it
        self.p = profile.device
        self.seed = seed
        self.clock = ScaledClock.starting_now(time_scale)
        self.rng = random.Random(seed)
        self.lock = threading.RLock()
        uuid_key = f"uuid-{seed}" if index == 0 else f"uuid-{seed}-gpu{index}"  # N devices of one seed: N UUIDs
        self.uuid = f"GPU-twin-{uuidlib.UUID(int=random.Random(uuid_key).getrandbits(128), version=4)}"
        self.ambient_c = self.p.ambient_c + self.rng.uniform(-1.0, 1.0) * self.p.ambient_spread_c
        now = self.clock.anchor_wall_ns
        self.t_ns = now
        self.temp_c = self.ambient_c
        self.energy_j = 0.0
        self.counter_offset_j = 0.0
        self.power_w = self.p.idle_power_w
        self.noise_w = 0.0
        self.clock_factor = 1.0
        self.capped = False
        self.locked_mhz: int | None = None  # nvmlDeviceSetGpuLockedClocks: the SM clock lock in force (None: unlocked)
        self.lock_binds = False
        self.util = 0.0
        self.util_avg = 0.0
        self.busy = False
        self.last_busy_ns = now - int(self.p.idle_after_s * 2e9)
        self.engines: dict[str, Lease] = {}
        self.seg_t: list[int] = [now]
        self.seg_e: list[float] = [0.0]
        self.seg_p: list[float] = [self.power_w]
        self.faults: dict = {}
        self.limit_w = float(self.p.power_management_limit_w)  # the set (management) limit; enforced = this
        self.launch_seq = 0
        self.events: list[tuple[int, int, str, bool, float, float]] = []  # (at_ns, seq, engine, busy, dyn W, util)
        self._event_seq = 0
        self.late_events = 0
        self.max_late_ns = 0
        self.noise_period_ns = max(1, int(self.p.tick_ms * 1e6 * self.clock.scale))
        self._noise_k = self._noise_index(now)
        self.history = History(int(HISTORY_WALL_S * 1e9 * self.clock.scale))
        self._record()
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None

    # ---- clock -------------------------------------------------------------------------------------------
    def now_ns(self) -> int:
        return self.clock.now_ns()

    def device_ns_of_wall(self, wall: int) -> int:
        """Map a wall-clock epoch ns to device time (the device clock runs ``scale`` times faster from the anchor)."""
        return self.clock.anchor_wall_ns + int((wall - self.clock.anchor_wall_ns) * self.clock.scale)

    # ---- physics -----------------------------------------------------------------------------------------
    def _noise_index(self, t: int) -> int:
        return (t - self.clock.anchor_wall_ns) // self.noise_period_ns

    def _noise(self, k: int) -> float:
        """The seeded power jitter of noise period ``k`` (a function of device time, not of the tick thread)."""
        sd = self.p.power_noise_w
        if sd <= 0:
            return 0.0
        return max(-3 * sd, min(3 * sd, random.Random(f"{self.seed}-noise-{k}").gauss(0.0, sd)))

    def _advance(self, now: int) -> None:
        """Integrate up to ``now``, applying posted activity events and jitter changes exactly at their instants."""
        while True:
            t_event = self.events[0][0] if self.events else now
            t_noise = self.clock.anchor_wall_ns + (self._noise_k + 1) * self.noise_period_ns
            t = min(now, t_event, t_noise)
            self._integrate(t)
            if t >= now and t < t_event and t < t_noise:
                return
            changed = False
            while self.events and self.events[0][0] <= t:
                _, _, eid, busy, dyn, util = heapq.heappop(self.events)
                changed = self._set_load(eid, busy, dyn, util) or changed
            if t >= t_noise:
                self._noise_k = self._noise_index(t)
                self.noise_w = self._noise(self._noise_k)
                changed = True
            if changed:
                self._recompute()
            if t >= now:
                return

    def _integrate(self, now: int) -> None:
        dt = (now - self.t_ns) / 1e9
        if dt <= 0:
            return
        p = self.p
        self.energy_j, self.util_avg, self.temp_c = relax(
            self.energy_j,
            self.util_avg,
            self.temp_c,
            self.power_w,
            self.util if self.busy else 0.0,
            dt,
            self.ambient_c,
            p.thermal_resistance_c_per_w,
            p.thermal_tau_s,
            p.util_avg_s,
        )
        self.t_ns = now
        if self.busy:
            self.last_busy_ns = now

    def _set_load(self, engine_id: str, busy: bool, dynamic_power_w: float, util: float) -> bool:
        """Set one engine's load; whether it changed (False for an engine without a lease)."""
        lease = self.engines.get(engine_id)
        if lease is None:
            return False
        new = (bool(busy), max(0.0, float(dynamic_power_w)), min(1.0, max(0.0, float(util))))
        if (lease.busy, lease.dynamic_power_w, lease.util) == new:
            return False
        lease.busy, lease.dynamic_power_w, lease.util = new
        return True

    def _expire(self) -> None:
        m = mono_ns()
        for eid in [e for e, lease in self.engines.items() if lease.expires_mono_ns < m]:
            del self.engines[eid]

    def thermal_factor(self) -> float:
        """The clock ceiling of thermal slowdown (1.0 below ``slowdown_temp_c``)."""
        p = self.p
        if self.temp_c > p.slowdown_temp_c:
            return max(p.min_clock_factor, 1.0 - p.slowdown_per_c * (self.temp_c - p.slowdown_temp_c))
        return 1.0

    def _recompute(self) -> None:
        p = self.p
        busy = [e for e in self.engines.values() if e.busy]
        dyn = sum(e.dynamic_power_w for e in busy)
        self.util = min(1.0, sum(e.util for e in busy))
        was_busy = self.busy
        self.busy = bool(busy) and dyn > 0
        if was_busy and not self.busy:
            self.last_busy_ns = self.t_ns
        base = p.idle_power_w + (p.engine_loaded_power_w if self.engines else 0.0)
        thermal = self.thermal_factor()
        ceiling = min(thermal, self.lock_factor())
        cap_w = self.limit_w * (1.0 + p.cap_overshoot_frac)
        f = cap_clock_factor(base, dyn, cap_w, p.dvfs_exponent, ceiling)
        self.capped = self.busy and f < ceiling - 1e-9
        self.lock_binds = self.busy and not self.capped and ceiling < thermal - 1e-9
        self.clock_factor = max(p.min_clock_factor, f)
        power = max(0.5, self._ideal_power(base, dyn) + self.noise_w)
        if power != self.power_w:
            self.power_w = power
            self.seg_t.append(self.t_ns)
            self.seg_e.append(self.energy_j)
            self.seg_p.append(power)
        self._record()

    def _snapshot(self) -> Snapshot:
        return Snapshot(
            t_ns=self.t_ns,
            energy_j=self.energy_j,
            power_w=self.power_w,
            temp_c=self.temp_c,
            util=self.util,
            util_avg=self.util_avg,
            busy=self.busy,
            last_busy_ns=self.last_busy_ns,
            clock_factor=self.clock_factor,
            capped=self.capped,
            lock_binds=self.lock_binds,
            limit_w=self.limit_w,
            engines=len(self.engines),
            memory_used_mb=self.memory_used_mb(),
            counter_offset_j=self.counter_offset_j,
            uuid=self.uuid,
        )

    def _record(self) -> None:
        self.history.record(self._snapshot())

    def snapshot_at(self, t_ns: int) -> Snapshot | None:
        """The exact state at device instant ``t_ns`` (at most the last update), or None before the history starts."""
        p = self.p
        return self.history.at(
            min(t_ns, self.t_ns), self.ambient_c, p.thermal_resistance_c_per_w, p.thermal_tau_s, p.util_avg_s
        )

    def _ideal_power(self, base: float, dyn: float) -> float:
        return base + dyn * self.clock_factor**self.p.dvfs_exponent

    def tick(self) -> None:
        with self.lock:
            self._advance(self.now_ns())
            self._expire()
            self._recompute()

    def start(self) -> None:
        def loop() -> None:
            while not self._stop.wait(self.p.tick_ms / 1000.0):
                self.tick()

        self._ticker = threading.Thread(target=loop, name="twin-gpu-physics", daemon=True)
        self._ticker.start()

    def stop(self) -> None:
        self._stop.set()

    # ---- engines -----------------------------------------------------------------------------------------
    def memory_used_mb(self) -> float:
        now = mono_ns()
        self._releasing = [(t, mb) for t, mb in self._releasing if t > now]
        held = sum(e.memory_mb for e in self.engines.values()) + sum(mb for _, mb in self._releasing)
        return self.p.memory_base_used_mb + held

    def _freed_later(self, leases: list[Lease]) -> None:
        """Released leases whose memory stays in use for ``memory_release_s`` wall seconds."""
        if self.memory_release_s > 0:
            at = mono_ns() + int(self.memory_release_s * 1e9)
            self._releasing += [(at, lease.memory_mb) for lease in leases]

    def memory_free_mb(self) -> float:
        return self.p.memory_total_mb - self.p.memory_reserved_mb - self.memory_used_mb()

    def lease(self, engine_id: str, memory_mb: float, lease_s: float, pid: int | None = None) -> tuple[bool, float]:
        """Reserve memory for an engine (``pid``: its process, so a harness can release it after a hard kill);
        (ok, free MB after, or free MB available when it does not fit)."""
        with self.lock:
            self._advance(self.now_ns())
            self._expire()
            old = self.engines.pop(engine_id, None)
            free = self.memory_free_mb()
            if memory_mb > free:
                if old is not None:
                    self.engines[engine_id] = old
                return False, free
            self.engines[engine_id] = Lease(
                engine_id, float(memory_mb), float(lease_s), mono_ns() + int(lease_s * 1e9), pid=pid
            )
            self.launch_seq += 1
            self._recompute()
            return True, self.memory_free_mb()

    def activity(
        self, engine_id: str, busy: bool, dynamic_power_w: float, util: float, at_ns: int | None = None
    ) -> tuple[float, int] | None:
        """Record an engine's demand (at full clocks) from device time ``at_ns`` (default: now; a past instant is
        applied now and counted as late); returns (clock_factor, device_ns) or None if no lease."""
        return self.post_events(engine_id, [(at_ns, busy, dynamic_power_w, util)])

    def post_events(
        self, engine_id: str, events: list[tuple[int | None, bool, float, float]]
    ) -> tuple[float, int] | None:
        """Timed load changes of one engine, in order (see ``activity``); also renews the lease."""
        with self.lock:
            now = self.now_ns()
            self._advance(now)
            self._expire()
            lease = self.engines.get(engine_id)
            if lease is None:
                return None
            lease.expires_mono_ns = mono_ns() + int(lease.lease_s * 1e9)
            changed = False
            for at_ns, busy, dyn, util in events:
                if at_ns is not None and at_ns > now:
                    self._event_seq += 1
                    heapq.heappush(
                        self.events, (int(at_ns), self._event_seq, engine_id, bool(busy), float(dyn), float(util))
                    )
                    continue
                if at_ns is not None and at_ns < now:
                    self.late_events += 1
                    self.max_late_ns = max(self.max_late_ns, now - int(at_ns))
                changed = self._set_load(engine_id, busy, dyn, util) or changed
            if changed:
                self._recompute()
            return (self.clock_factor if self.busy else 1.0), now

    def release(self, engine_id: str) -> bool:
        with self.lock:
            self._advance(self.now_ns())
            lease = self.engines.pop(engine_id, None)
            found = lease is not None
            self._freed_later([lease] if lease is not None else [])
            self.events = [e for e in self.events if e[2] != engine_id]
            heapq.heapify(self.events)
            self._recompute()
            return found

    def release_pid(self, pid: int) -> list[str]:
        """Release every lease of process ``pid`` (a server killed before it could release its own); their ids."""
        with self.lock:
            self._advance(self.now_ns())
            ids = [eid for eid, lease in self.engines.items() if lease.pid == pid]
            self._freed_later([self.engines.pop(eid) for eid in ids])
            if ids:
                self.events = [e for e in self.events if e[2] not in ids]
                heapq.heapify(self.events)
                self._recompute()
            return ids

    # ---- readings ----------------------------------------------------------------------------------------
    def energy_at(self, t: int) -> float:
        """Cumulative truth energy (J) at device time t (clamped to [start, last update])."""
        t = max(self.seg_t[0], min(t, self.t_ns))
        k = bisect.bisect_right(self.seg_t, t) - 1
        return self.seg_e[k] + self.seg_p[k] * (t - self.seg_t[k]) / 1e9

    def truth_energy(self, start_wall_ns: int, end_wall_ns: int) -> dict:
        with self.lock:
            self._advance(self.now_ns())
            d0, d1 = self.device_ns_of_wall(start_wall_ns), self.device_ns_of_wall(end_wall_ns)
            clamped = d0 < self.seg_t[0] or d1 > self.t_ns
            return {
                "energy_j": self.energy_at(d1) - self.energy_at(d0),
                "start_ns": start_wall_ns,
                "end_ns": end_wall_ns,
                "device_start_ns": d0,
                "device_end_ns": d1,
                "duration_s": (d1 - d0) / 1e9,
                "clamped": clamped,
            }

    def reasons(self, snap: Snapshot | None = None) -> int:
        """NVML clock-event bits of the state now (or of ``snap``)."""
        return clock_event_bits(self.p, snap or self._snapshot())

    def identity(self) -> dict:
        return {"name": self.p.name, "uuid": self.uuid, "driver_version": self.p.driver_version}

    def state(self) -> dict:
        """The reading now, stamped with the host clocks (``wall_ns``, ``mono_ns``) and the device clock."""
        with self.lock:
            m, w = host_clocks()
            now = self.clock.from_mono(m)
            self._advance(now)
            self._expire()
            self._recompute()
            return reading(self, self._snapshot(), w, m)

    def states_at(self, walls: list[int]) -> list[dict]:
        """Readings at past wall instants, each exact and stamped with its own instant (a future one is read now);
        an instant older than the history is ``{"wall_ns": W, "error": ...}``."""
        with self.lock:
            m, w = host_clocks()
            self._advance(self.clock.from_mono(m))
            self._expire()
            self._recompute()
            out: list[dict] = []
            for wall in walls:
                wall = min(int(wall), w)
                mono = m - (w - wall)
                snap = self.snapshot_at(self.clock.from_mono(mono))
                if snap is None:
                    out.append(
                        {
                            "wall_ns": wall,
                            "error": f"instant older than the device's history ({HISTORY_WALL_S:g} wall s)",
                        }
                    )
                else:
                    out.append(reading(self, snap, wall, mono))
            return out

    def info(self) -> dict:
        return {
            **self.identity(),
            "profile": self.profile.name,
            "hardware": self.profile.hardware,
            "twin": True,
            "power_limit_w": self.limit_w,
            **self.power_limits(),
            "sm_clock_locked_mhz": self.locked_mhz,
            "max_sm_clock_mhz": self.p.max_sm_clock_mhz,
            "memory_total_mb": self.p.memory_total_mb,
            "time_scale": self.clock.scale,
            "seed": self.seed,
            "index": self.index,
        }

    def clock_info(self) -> dict:
        m, w = mono_ns(), wall_ns()
        return {**self.clock.to_dict(), "wall_ns": w, "mono_ns": m, "device_ns": self.clock.from_mono(m)}

    def apply_faults(self, body: dict) -> dict:
        with self.lock:
            if not body:
                self.faults = {}
                return {"ok": True, "faults": {}}
            if body.get("counter_reset"):
                self._advance(self.now_ns())
                self.counter_offset_j = self.energy_j
            if body.get("uuid_change"):
                self.uuid = f"GPU-twin-{uuidlib.uuid4()}"
            self._record()
            if "probe_delay_ms" in body:
                self.faults["probe_delay_ms"] = float(body["probe_delay_ms"] or 0)
            if "probe_error" in body:
                self.faults["probe_error"] = body["probe_error"]
            if "settings_denied" in body:
                self.faults["settings_denied"] = bool(body["settings_denied"])
            return {"ok": True, "faults": dict(self.faults), "uuid": self.uuid}
