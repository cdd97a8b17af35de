"""The control loop: every tick it observes (in-flight requests at the front, the sampler's utilization, which
instances are alive, accept lengths of finished requests), asks a decider (the band controller or the adaptive
emulation, both pure) and routes to the config it names; with a clock actuator (``--clock-control``) the same tick
trims the locked SM clock. Every switch and every clock change is one JSONL line with its reason."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol

from harness.core.clocks import ScaledClock, mono_ns, wall_ns
from harness.core.jsonl import JsonlAppender
from harness.grid import SpecConfig
from harness.serve import adaptive, controller
from harness.serve.clock_actuator import ClockActuator
from harness.serve.controller import Observation, Switch
from harness.serve.pool import Instance, Pool
from harness.telemetry.client import TelemetrySource

STALE_S = 2.0
"""A sample older than this (wall seconds) counts as lost telemetry."""
CLEAN_WINDOW_S = 1.0
"""Device seconds of the sampler's power average: a sample speaks for the routed config and clock after this."""


class Decider(Protocol):
    """State in, decision out, one tick at a time."""

    name: str

    def tick(self, obs: Observation) -> tuple[SpecConfig | None, Switch | None]: ...

    def describe(self) -> dict[str, Any]: ...


class BandDecider:
    """``controller.step`` over a pick table."""

    name = "band"

    def __init__(self, table: Mapping[int, SpecConfig], params: controller.ControllerParams | None = None) -> None:
        self.table = dict(table)
        self.params = params or controller.ControllerParams()
        self.state = controller.ControllerState()

    def tick(self, obs: Observation) -> tuple[SpecConfig | None, Switch | None]:
        d = controller.step(self.state, obs, self.table, self.params)
        self.state = d.state
        return d.state.active, d.switch

    def describe(self) -> dict[str, Any]:
        s = self.state
        return {
            "decider": self.name,
            "picks": {str(b): c.as_list() for b, c in sorted(self.table.items())},
            "bs_ema": s.bs_ema,
            "fallback": s.fallback,
            "band": list(self.params.band),
            "closed_loop": self.params.model is not None,
        }


class AdaptiveDecider:
    """``adaptive.step``: the emulation of sglang's ``--speculative-adaptive``."""

    name = "adaptive"

    def __init__(self, params: adaptive.AdaptiveParams | None = None) -> None:
        self.params = params or adaptive.AdaptiveParams()
        self.state = adaptive.AdaptiveState()

    def tick(self, obs: Observation) -> tuple[SpecConfig | None, Switch | None]:
        d = adaptive.step(self.state, obs, self.params)
        self.state = d.state
        return self.state.active, d.switch

    def describe(self) -> dict[str, Any]:
        return {"decider": self.name, "bs_ema": self.state.bs_ema, "accept_ema": self.state.accept_ema}


def utilization(
    telemetry: TelemetrySource, stale_s: float = STALE_S
) -> tuple[float | None, str | None, float, float | None]:
    """(avg power / enforced cap of the newest sample, None, its age in wall seconds, its SM clock MHz) or (None, why
    it is unusable, age, None)."""
    try:
        s = telemetry.snapshot()
    except Exception as exc:  # noqa: BLE001 - any failure of telemetry is lost telemetry
        return None, f"telemetry error: {type(exc).__name__}: {exc}", 0.0, None
    if s is None:
        return None, str(getattr(telemetry, "last_error", None) or "no sample"), 0.0, None
    age_s = max(0.0, (wall_ns() - s.t_wall_ns) / 1e9)
    power = s.power_avg_w if s.power_avg_w is not None else s.power_w
    if age_s > stale_s:
        return None, f"newest sample is {age_s:.1f} s old", age_s, None
    if power is None or not s.power_limit_w:
        return None, "sample without power or power limit", age_s, None
    return power / s.power_limit_w, None, age_s, getattr(s, "sm_clock_mhz", None)


class ControlLoop:
    """Owns the routing decision; ``route()`` is what the front asks per request."""

    def __init__(
        self,
        pool: Pool,
        decider: Decider,
        telemetry: TelemetrySource,
        clock: ScaledClock,
        log_path: str | Path,
        tick_s: float = 0.05,
        on_switch: Callable[[dict[str, Any]], None] | None = None,
        clock_actuator: Callable[["ControlLoop"], ClockActuator] | None = None,
    ) -> None:
        self.pool = pool
        self.decider = decider
        self.telemetry = telemetry
        self.clock = clock
        self.tick_s = tick_s
        self.log = JsonlAppender(log_path, fsync=False)
        self.log_path = Path(log_path)
        self.on_switch = on_switch
        self.in_flight = 0
        self.switches = 0
        self.telemetry_problem: str | None = None
        self.last_utilization: float | None = None
        self._accepts: list[float] = []
        self._tokens: list[int] = []
        self._arrivals = 0
        self._active: SpecConfig | None = None
        self._clean_since: float | None = None
        """Twin seconds since when the GPU serves the routed instance's requests only (None: not now)."""
        self._went_idle = False
        self._lock = threading.Lock()
        self._tick_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._log_lock = threading.Lock()
        self._log_closed = False
        pool.attach(on_lost=self.tick, on_event=self.log_event)
        self.clock_actuator: ClockActuator | None = clock_actuator(self) if clock_actuator is not None else None
        """The SM clock trim (``--clock-control``), built with this loop's log; None: speculation only."""
        self.tick()  # a route exists before the first request

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="band-control", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.tick_s):
            self.tick()

    def tick(self) -> None:
        """Observe, decide, log a switch (also called at once when an instance is found lost)."""
        with self._tick_lock:
            u, problem, age_s, running_mhz = utilization(self.telemetry)
            with self._lock:
                accepts, self._accepts = self._accepts, []
                tokens, self._tokens, arrivals, self._arrivals = self._tokens, [], self._arrivals, 0
                in_flight, went_idle, self._went_idle = self.in_flight, self._went_idle, False
            now = self.clock.now_ns() / 1e9
            clean_s = self._clean(now, in_flight, went_idle) - age_s * self.clock.scale
            obs = Observation(
                t_s=now,
                in_flight=in_flight,
                utilization=u,
                alive=self.pool.alive(),
                accept_length=sum(accepts) / len(accepts) if accepts else None,
                clean_s=clean_s,
                arrivals=arrivals,
                tokens=sum(tokens) / len(tokens) if tokens else None,
                clock_locked=self.clock_actuator is not None and self.clock_actuator.locked_mhz is not None,
                clock_active=self.clock_actuator is not None and self.clock_actuator.active,
            )
            self.telemetry_problem, self.last_utilization = problem, u
            active, switch = self.decider.tick(obs)
            if active != self._active:
                self._clean_since = None
                if active is not None:
                    self.pool.activate(active)
            self._active = active
            if switch is not None:
                self._record(switch, problem)
            if self.clock_actuator is not None:
                clean = switch is None and in_flight > 0 and clean_s >= CLEAN_WINDOW_S
                self.clock_actuator.tick(now, u, running_mhz, clean, age_s * self.clock.scale)

    def _clean(self, now: float, in_flight: int, went_idle: bool) -> float:
        """Twin seconds the GPU has served only the routed instance's requests, without a gap (0: not now)."""
        others = any(inst.in_flight > 0 for c, inst in self.pool.instances.items() if c != self._active)
        if in_flight == 0 or went_idle or others or self._active is None:
            self._clean_since = None
            return 0.0
        if self._clean_since is None:
            self._clean_since = now
        return now - self._clean_since

    def _record(self, sw: Switch, problem: str | None) -> None:
        self.switches += 1
        rec: dict[str, Any] = {
            "t_wall_ns": wall_ns(),
            "t_mono_ns": mono_ns(),
            "t_device_ns": self.clock.now_ns(),
            "decider": self.decider.name,
            "old": sw.old.as_list() if sw.old else None,
            "new": sw.new.as_list(),
            "reason": sw.reason,
            **sw.detail,
        }
        if sw.reason == "telemetry_lost":
            rec["telemetry_problem"] = problem
        if sw.reason == "instance_lost" and sw.old is not None:
            rec["lost"] = self.pool.get(sw.old).lost_reason
        self._append(rec)
        if self.on_switch:
            self.on_switch(rec)

    def log_event(self, rec: dict[str, Any]) -> None:
        """A line of the switch log that is not a switch (``{"event": ...}``), stamped like one."""
        self._append({"t_wall_ns": wall_ns(), "t_mono_ns": mono_ns(), "t_device_ns": self.clock.now_ns(), **rec})

    def _append(self, rec: dict[str, Any]) -> None:
        """One line of the switch log (a switch from the loop, or the pool's relaunch event from its worker)."""
        with self._log_lock:
            if not self._log_closed:
                self.log.append(rec)

    def set_decider(self, decider: Decider) -> None:
        """Replace the decider (the benchmark runs several on one set of instances); it starts afresh."""
        with self._tick_lock:
            self.decider, self._active = decider, None
        self.tick()

    def route(self) -> Instance | None:
        """The instance of the routed config (None when every instance is lost)."""
        cfg = self._active
        if cfg is None or not self.pool.get(cfg).alive():
            self.tick()
            cfg = self._active
        return self.pool.get(cfg) if cfg is not None else None

    def lost(self, inst: Instance, reason: str) -> None:
        inst.mark_lost(reason)
        self.tick()

    def request_started(self) -> None:
        with self._lock:
            self.in_flight += 1
            self._arrivals += 1

    def request_finished(self, accept_length: float | None = None, tokens: int | None = None) -> None:
        with self._lock:
            self.in_flight -= 1
            self._went_idle = self._went_idle or self.in_flight == 0
            if accept_length is not None:
                self._accepts.append(accept_length)
            if tokens is not None:
                self._tokens.append(tokens)

    def describe(self) -> dict[str, Any]:
        return {
            "active": self._active.as_list() if self._active else None,
            "in_flight": self.in_flight,
            "switches": self.switches,
            "utilization": self.last_utilization,
            "telemetry_problem": self.telemetry_problem,
            "instances": self.pool.describe(),
            "switch_log": str(self.log_path),
            "one_at_a_time": self.pool.one_at_a_time,
            "relaunches": len(self.pool.relaunches),
            **self.decider.describe(),
            **(self.clock_actuator.describe() if self.clock_actuator is not None else {"clock_control": False}),
        }

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)
        if self.clock_actuator is not None:
            with self._tick_lock:
                self.clock_actuator.restore("exit")
        with self._log_lock:
            self._log_closed = True
            self.log.close()
