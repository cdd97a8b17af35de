"""Closed-loop clients: when each announced request counts as received, on the device clock.

A client that declares its loop (``harness.twin.engine.loop_hint``) gets its requests placed where they would arrive on a
GPU (first wave together, each successor at its predecessor's finish + the client's turnaround), however late the
host delivers them; the scheduler holds iterations back until an announced request is in (``ClosedLoops.hold_ns``).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from harness.core.clocks import ScaledClock
from harness.twin.engine.log import log
from harness.twin.engine.loop_hint import LoopSpec
from harness.twin.engine.request import EngineRequest

FRESH_MS = 1000.0
"""Wall ms between a complete unannounced first wave and its receipt (time for its load report to reach the device)."""
UNPLACED_NS = 1 << 62
"""Arrival of a request whose receipt is not placed yet (a member of an incomplete first wave): never admitted."""
WAVE_WAIT_S = 30.0
"""Wall seconds an incomplete first wave waits for its missing members before it starts without them."""


@dataclass
class LoopSession:
    """The engine's view of one closed-loop batch: whom it still expects, and at which device instant."""

    total: int
    wave: int  # first-wave requests still expected
    wave_ns: int | None  # their common receipt instant (device ns); None until an unannounced wave is complete
    issued: int  # requests received or expected so far
    first_ns: int = 0  # device instant the wave's first member came in (or was expected)
    size: int = 0  # requests in the first wave
    done: int = 0
    members: list[EngineRequest] = field(default_factory=list)  # requests of an unplaced first wave
    next: LoopSpec | None = None
    expect: dict[int, int] = field(default_factory=dict)  # successor k (0-based) -> its receipt instant
    early: dict[int, EngineRequest] = field(default_factory=dict)  # successors that came before their slot freed


class ClosedLoops:
    """The announced closed-loop batches of one engine and the device instants of their requests.

    The engine calls ``stamp`` for every new request, ``done`` when a request finishes (computed), ``lapse`` and
    ``hold_ns`` from its scheduler (under its lock); ``late_requests`` counts requests the host delivered too late.
    """

    def __init__(
        self,
        clock: ScaledClock,
        lock: threading.RLock,
        wake: threading.Event,
        arrival_delay_ns: int,
        turnaround_ns: int,
    ) -> None:
        self.clock = clock
        self.lock = lock
        self.wake = wake
        self.arrival_delay_ns = arrival_delay_ns
        self.turnaround_ns = turnaround_ns
        self.fresh_ns = int(FRESH_MS * 1e6 * clock.scale)
        self.sessions: dict[str, LoopSession] = {}
        self.late_requests = 0

    def hold_ns(self) -> int | None:
        """The earliest arrival (device ns) of an announced request that has not come in yet."""
        holds = [
            s.first_ns if s.wave_ns is None else s.wave_ns + self.arrival_delay_ns
            for s in self.sessions.values()
            if s.wave > 0
        ]
        holds += [t + self.arrival_delay_ns for s in self.sessions.values() for t in s.expect.values()]
        return min(holds) if holds else None

    def lapse(self, now: int) -> None:
        """Give up on announced requests the device clock ``now`` has passed (the host delivered them too late)."""
        for s in self.sessions.values():
            if s.wave > 0 and s.wave_ns is None and now - s.first_ns > WAVE_WAIT_S * 1e9 * self.clock.scale:
                log(
                    f"closed-loop first wave incomplete after {WAVE_WAIT_S:g} s: {s.wave} request(s) missing; "
                    "starting without them",
                    "WARNING",
                )
                s.wave = 0
                self._place_wave(s, now)
            elif s.wave > 0 and s.wave_ns is not None and s.wave_ns + self.arrival_delay_ns <= now:
                # an announced wave the host did not deliver in time: placed when complete, like an unannounced one
                # (the engine has run nothing since, so only the idle gap before the wave grows)
                log(
                    f"closed-loop first wave late: {s.wave} request(s) not in when the device clock reached them "
                    f"(host slower than the lead); placing the wave when it is complete",
                    "WARNING",
                )
                self.late_requests += 1
                s.wave_ns, s.first_ns = None, now
                for m in s.members:
                    self._set_receipt(m, UNPLACED_NS - self.arrival_delay_ns)
            for k in [k for k, t in s.expect.items() if t + self.arrival_delay_ns <= now]:
                log(f"closed-loop request {k} after the first wave late (host too slow for the lead)", "WARNING")
                del s.expect[k]

    def _place_wave(self, s: LoopSession, now: int) -> None:
        """Fix the receipt of an unannounced first wave once it is complete: a short while after the device clock
        ``now`` (so its load reaches the device in time); its members' stagger on a busy host falls before it."""
        s.wave_ns = now + self.fresh_ns
        for m in s.members:
            self._set_receipt(m, s.wave_ns)
        s.members.clear()
        self.wake.set()

    def stamp(self, req: EngineRequest) -> None:
        """Set the device instant at which a request counts as received (and its arrival at the scheduler).

        A plain request: the device clock now. A closed-loop request: its batch's first wave all at one instant
        (``fresh_ns`` after its last member came in, or, for a batch announced by ``X-Twin-Next``, the previous
        batch's last finish + the client's modelled turnaround ``CLIENT_TURNAROUND_MS``); a next request at its
        predecessor's finish + that turnaround, however long the host took to deliver it.
        """
        now = self.clock.now_ns()
        hint = req.loop
        if hint is None:
            self._set_receipt(req, now)
            return
        with self.lock:
            spec = hint.loop
            s = self.sessions.get(spec.session)
            if s is None:
                first = min(spec.total, spec.concurrency)
                s = self.sessions[spec.session] = LoopSession(spec.total, first, None, first, first_ns=now, size=first)
            if hint.next is not None:
                s.next = hint.next
            at: int | None = None
            first = s.size
            if hint.seq < first and s.wave > 0:
                s.wave -= 1
                s.members.append(req)
                if s.wave_ns is None:  # an unannounced wave is placed when complete
                    if s.wave == 0:
                        self._place_wave(s, now)
                    return
                at = s.wave_ns
                if s.wave == 0:
                    s.members.clear()
            elif hint.seq >= first:
                k = hint.seq - first
                if k in s.expect:
                    at = s.expect.pop(k)
                elif k >= s.issued - first:  # its slot has not freed yet (the client raced ahead): placed then
                    s.early[k] = req
                    return
            if at is None or at + self.arrival_delay_ns <= now:
                log(
                    f"closed-loop request {hint.seq} of {spec.session} came after its instant (host too slow for the "
                    "lead); counted from now",
                    "WARNING",
                )
                self.late_requests += 1
                at = now + self.fresh_ns
            self._set_receipt(req, at)
        self.wake.set()

    def _set_receipt(self, req: EngineRequest, at: int) -> None:
        """The request counts as received at device ``at`` and reaches the scheduler after the request overhead."""
        req.received_ns = at
        req.sim.arrival_ns = at + self.arrival_delay_ns

    def done(self, req: EngineRequest) -> bool:
        """A closed-loop request finished (computed): its client refills the slot right away while it has requests
        left, and starts the announced next batch right after the last one; True when the client waits on it."""
        spec = req.loop.loop if req.loop is not None else None
        if spec is None:
            return False
        s = self.sessions.get(spec.session)
        if s is None or req.sim.finish_ns is None:
            return False
        s.done += 1
        waits = False
        if s.issued < s.total:  # successor k takes the k-th slot freed (in twin time, whatever the host's order)
            k = s.issued - s.size
            t = req.sim.finish_ns + self.turnaround_ns
            s.issued += 1
            waits = True
            came = s.early.pop(k, None)
            if came is not None:
                self._set_receipt(came, t)
            else:
                s.expect[k] = t
        if s.done >= s.total:
            del self.sessions[spec.session]
            nxt = s.next
            if nxt is not None and nxt.session not in self.sessions:
                first = min(nxt.total, nxt.concurrency)
                t = req.sim.finish_ns + self.turnaround_ns
                self.sessions[nxt.session] = LoopSession(nxt.total, first, t, first, first_ns=t, size=first)
                waits = True
        return waits
