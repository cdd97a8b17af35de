"""The twin engine: an sglang-compatible HTTP server whose decode is a discrete-event continuous batch on the twin
clock, running on a twin GPU device (``harness twin engine <launch_server flags> --twin-gpu URL``).

Launch: simulated imports and weight loading, a memory lease on the device (out of memory -> sglang-like error and
exit 1), CUDA-graph capture, HTTP bind, a warm-up generation, then ``/health`` turns 200. A scheduler thread wakes
every millisecond or so of WALL time and runs every decode iteration whose start time has passed on the twin clock
(never one sleep per iteration), publishing tokens when an iteration's end time has passed. Load changes are reported
to the device, which answers with the clock factor that stretches the next iterations.
"""

from __future__ import annotations

import bisect
from collections import deque
import json
import os
import signal
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import httpx

from harness.grid import SpecConfig
from harness.timeutil import ScaledClock
from harness.twin import engine_args as ea
from harness.twin.httpd import Request, Response, Router, Stream, make_server
from harness.twin.model import (
    CLIENT_TURNAROUND_MS,
    Decoder,
    Iteration,
    SimRequest,
    context_quality,
    device_power,
    launch_seconds,
    memory_footprint_mb,
    prompt_quality,
)
from harness.twin.profile import profile_from_dict
from harness.twin.tokens import count_tokens, decode, filler_id, stable_hash

SAMPLING_KEYS_0523 = frozenset({
    "max_new_tokens", "stop", "stop_token_ids", "stop_regex", "temperature", "top_p", "top_k", "min_p",
    "frequency_penalty", "presence_penalty", "repetition_penalty", "min_new_tokens", "n", "json_schema", "regex",
    "ebnf", "structural_tag", "ignore_eos", "skip_special_tokens", "spaces_between_special_tokens", "no_stop_trim",
    "custom_params", "stream_interval", "logit_bias", "sampling_seed",
})
LEAD_MS = 3000.0
"""How far (wall ms) the engine's timeline may run ahead of the device clock (env ``TWIN_LEAD_MS``): the slack within
which host delays (a late scheduler thread, a slow activity report, a client's round trip) leave twin time untouched."""
FRESH_MS = 1000.0
"""Wall ms between a complete unannounced first wave and its receipt (time for its load report to reach the device)."""
UNPLACED_NS = 1 << 62
"""Arrival of a request whose receipt is not placed yet (a member of an incomplete first wave): never admitted."""
WAVE_WAIT_S = 30.0
"""Wall seconds an incomplete first wave waits for its missing members before it starts without them."""
KV_BYTES_PER_TOKEN = 32 * 1024  # Llama-3.2-1B: 16 layers x 8 KV heads x 64 dims x (K, V) x 2 bytes


def log(msg: str, level: str = "INFO") -> None:
    ts = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
    print(f"[{ts}] {level} {msg}", flush=True)


@dataclass
class EngineRequest:
    """One client request as the server sees it."""

    sim: SimRequest
    stream_key: int
    stops: list[str] = field(default_factory=list)
    stop_ids: set[int] = field(default_factory=set)
    no_stop_trim: bool = False
    streaming: bool = False  # streams wake on every iteration; plain requests only when done
    visible: int = 0
    snapshots: list[int] = field(default_factory=list)  # visible count after each iteration that added tokens
    done: bool = False
    stop_matched: str | None = None
    event: threading.Event = field(default_factory=threading.Event)
    received_ns: int = 0
    loop: "LoopHint | None" = None
    computed: int = 0  # tokens computed so far (published: ``visible``)
    computed_cap: int | None = None  # where a stop token / string cut the output

    _ids: list[int] = field(default_factory=list)
    _text: list[str] = field(default_factory=list)
    _ends: list[int] = field(default_factory=list)  # cumulative character length after each token

    def _extend(self, n: int) -> None:
        while len(self._ids) < n:
            i = filler_id(self.stream_key, len(self._ids))
            piece = decode([i])
            self._ids.append(i)
            self._text.append(piece)
            self._ends.append((self._ends[-1] if self._ends else 0) + len(piece))

    def ids(self, n: int | None = None) -> list[int]:
        count = self.visible if n is None else n
        self._extend(count)
        return self._ids[:count]

    def raw_text(self, n: int | None = None) -> str:
        count = self.visible if n is None else n
        self._extend(count)
        if len(self._text) > 1:
            self._text[:] = ["".join(self._text)]  # keep one joined string, sliced by the cumulative ends
        return self._text[0][: self._ends[count - 1]] if count > 0 else ""

    def text(self) -> str:
        t = self.raw_text()
        if self.stop_matched and not self.no_stop_trim and self.stop_matched in t:
            t = t[: t.find(self.stop_matched)]
        return t


LOOP_HEADER = "X-Twin-Loop"
SEQ_HEADER = "X-Twin-Seq"
NEXT_HEADER = "X-Twin-Next"


@dataclass(frozen=True)
class LoopSpec:
    """One closed-loop batch of a client: SESSION sends TOTAL requests at CONCURRENCY."""

    session: str
    total: int
    concurrency: int


@dataclass(frozen=True)
class LoopHint:
    """A closed-loop client's declaration, from the headers ``X-Twin-Loop: SESSION TOTAL CONCURRENCY`` (this batch),
    ``X-Twin-Seq: I`` (this request is the batch's I-th, 0-based: the first CONCURRENCY go out together, request I
    after that goes out when the (I - CONCURRENCY + 1)-th request of the batch finishes) and ``X-Twin-Next: SESSION
    TOTAL CONCURRENCY`` (the batch the client starts right after this one ends, e.g. the measured requests after the
    warm-up)."""

    loop: LoopSpec
    seq: int
    next: LoopSpec | None = None


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
    members: list = field(default_factory=list)  # requests of an unplaced first wave
    next: LoopSpec | None = None
    expect: dict[int, int] = field(default_factory=dict)  # successor k (0-based) -> its receipt instant
    early: dict[int, "EngineRequest"] = field(default_factory=dict)  # successors that came before their slot freed


def _loop_spec(header: str, value: str) -> LoopSpec:
    parts = value.split()
    try:
        if len(parts) != 3 or int(parts[1]) < 1 or int(parts[2]) < 1:
            raise ValueError
    except ValueError:
        raise ValueError(f"{header} must be 'SESSION TOTAL CONCURRENCY' (positive integers), got {value!r}") from None
    return LoopSpec(parts[0], int(parts[1]), int(parts[2]))


def parse_loop_hint(headers) -> LoopHint | None:
    """The closed-loop hint of a request's headers (None without ``X-Twin-Loop``); ValueError names a bad header."""
    loop = headers.get(LOOP_HEADER)
    if not loop:
        return None
    seq = headers.get(SEQ_HEADER)
    try:
        if seq is None or int(seq) < 0:
            raise ValueError
    except ValueError:
        raise ValueError(f"{SEQ_HEADER} must be the request's 0-based index in its {LOOP_HEADER} batch, "
                         f"got {seq!r}") from None
    spec = _loop_spec(LOOP_HEADER, loop)
    if int(seq) >= spec.total:
        raise ValueError(f"{SEQ_HEADER} {seq} is not below the batch's TOTAL {spec.total}")
    nxt = headers.get(NEXT_HEADER)
    return LoopHint(spec, int(seq), _loop_spec(NEXT_HEADER, nxt) if nxt else None)


@dataclass
class Computed:
    """An iteration computed ahead of the device clock, waiting to be published: per request (tokens, finished)."""

    it: Iteration
    counts: dict[str, tuple[int, bool]]
    early: bool  # a client waits on it (a closed-loop finish): publish up to the lead before its end


class DeviceLink:
    """HTTP to the twin GPU: clock, profile, memory lease, and the engine's load as timed events in device time.

    ``post(at_ns, busy, dyn_w, util)`` queues a load change that takes effect on the device at ``at_ns`` (device ns);
    a background thread sends the queue in order (one request for all that accumulated) and a 1 s heartbeat that
    renews the lease. Since the engine runs ahead of the device clock (``TwinEngine.lead_ns``), the device receives
    each change before its instant and integrates power exactly, however late the host runs this thread.
    """

    def __init__(self, url: str, engine_id: str) -> None:
        self.url = url.rstrip("/")
        self.engine_id = engine_id
        self.http = httpx.Client(base_url=self.url, timeout=5.0, trust_env=False)
        self.clock_factor = 1.0
        self.thermal_factor = 1.0
        self.power_limit_w: float | None = None  # the device's limit in force (a set power cap), from /v1/info and replies
        self._last: tuple | None = (False, 0.0, 0.0)  # a new lease starts idle
        self._queue: list[dict] = []
        self._cv = threading.Condition()
        self._stop = False
        self._thread: threading.Thread | None = None

    def get(self, path: str) -> dict:
        r = self.http.get(path)
        r.raise_for_status()
        return r.json()

    def lease(self, memory_mb: float, lease_s: float = 10.0) -> tuple[int, dict]:
        r = self.http.post("/v1/engines", json={"engine_id": self.engine_id, "memory_mb": memory_mb, "lease_s": lease_s,
                                                "pid": os.getpid()})
        return r.status_code, r.json()

    def release(self) -> None:
        try:
            self.http.delete(f"/v1/engines/{self.engine_id}", timeout=2.0)
        except httpx.HTTPError:
            pass

    def post(self, at_ns: int, busy: bool, dyn_w: float, util: float) -> None:
        """Queue a load change at device time ``at_ns`` (dropped when it equals the last one queued)."""
        key = (bool(busy), round(dyn_w, 3), round(util, 3))
        with self._cv:
            if key == self._last:
                return
            self._last = key
            self._queue.append({"at_ns": int(at_ns), "busy": key[0], "dynamic_power_w": key[1], "util": key[2]})
            self._cv.notify()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="device-reporter", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        with self._cv:
            self._stop = True
            self._cv.notify()

    def _loop(self) -> None:
        last = 0.0
        while True:
            with self._cv:
                if not self._queue:
                    self._cv.wait(timeout=max(0.0, 1.0 - (time.monotonic() - last)))
                if self._stop:
                    return
                events, self._queue = self._queue, []
            try:
                r = self.http.post(f"/v1/engines/{self.engine_id}/activity", json={"events": events}, timeout=2.0)
                if r.status_code == 200:
                    body = r.json()
                    self.clock_factor = float(body.get("clock_factor", 1.0))
                    self.thermal_factor = float(body.get("thermal_factor", 1.0))
                    if body.get("power_limit_w") is not None:
                        self.power_limit_w = float(body["power_limit_w"])
                    events = []
                else:
                    log(f"twin GPU refused the activity report ({r.status_code}): {r.text[:200]}", "WARNING")
                    events = []  # no lease (expired or released): nothing to resend
            except httpx.HTTPError as exc:
                log(f"twin GPU unreachable: {exc}", "WARNING")
            if events:  # not delivered: keep them, in order, ahead of newer ones
                with self._cv:
                    self._queue[:0] = events
                time.sleep(0.2)
            last = time.monotonic()


class TwinEngine:
    """Server state: args, clock, decoder, requests, counters."""

    def __init__(self, args, cfg: SpecConfig, profile, clock: ScaledClock, link: DeviceLink, seed: int, faults: set[str],
                 version: str, warnings: list[str]) -> None:
        self.args = args
        self.cfg = cfg
        self.profile = profile
        self.clock = clock
        self.link = link
        self.seed = seed
        self.faults = faults
        self.version = version
        self.spec_warnings = warnings
        self.status = "Starting"
        self.lock = threading.RLock()
        self.max_running = args.max_running_requests or (48 if not cfg.is_baseline else 1024)
        self.decoder = Decoder(profile, cfg, self.max_running, seed, start_ns=clock.now_ns(), log_interval=args.decode_log_interval)
        self.requests: dict[str, EngineRequest] = {}
        self.counter = 0
        self.computed: deque[Computed] = deque()  # computed iterations not yet published, in order
        self.stop_event = threading.Event()
        self.wake = threading.Event()
        self.record_step_time = os.environ.get("SGLANG_RECORD_STEP_TIME", "").lower() in ("1", "true", "yes")
        self.crash_after = int(os.environ.get("TWIN_CRASH_AFTER_ITERS", "60"))
        self.http500_every = max(1, int(os.environ.get("TWIN_HTTP500_EVERY", "1")))
        self.http500_count = 0
        self.runaway_armed = "runaway" in faults
        self.warmup_iters: int | None = None
        self.prompt_tokens_total = 0
        self.generation_tokens_total = 0
        self.e2e_sum = 0.0
        self.e2e_count = 0
        self.last_gen_throughput = 0.0
        self._tp_mark = (clock.now_ns(), 0)
        self.memory: dict = {}
        self.launch_s = 0.0
        self.start_wall = time.time()
        self.lead_ns = int(float(os.environ.get("TWIN_LEAD_MS", str(LEAD_MS))) * 1e6 * clock.scale)
        self.fresh_ns = int(FRESH_MS * 1e6 * clock.scale)
        self.turnaround_ns = int(CLIENT_TURNAROUND_MS * 1e6)
        self.arrival_delay_ns = int(profile.perf.request_overhead_ms * 0.75e6)
        self.sessions: dict[str, LoopSession] = {}
        self.late_loop_requests = 0

    # ---- model name / info ---------------------------------------------------------------------------------
    @property
    def model_id(self) -> str:
        return self.args.served_model_name or f"twin:{self.args.model_path}"

    # ---- scheduler -----------------------------------------------------------------------------------------
    def submit(self, req: EngineRequest) -> None:
        with self.lock:
            self.requests[req.sim.rid] = req
            self.decoder.submit(req.sim)
            self.prompt_tokens_total += req.sim.prompt_tokens
        self.wake.set()

    def run_scheduler(self) -> None:
        """Compute iterations on the engine's own timeline (device ns) and publish them (see ``_advance``)."""
        while not self.stop_event.is_set():
            with self.lock:
                now = self.clock.now_ns()
                self._advance(now)
                due = self._next_due_ns(now)
            if due is not None:
                wait = (due - self.clock.now_ns()) / self.clock.scale / 1e9
                self.wake.wait(min(max(wait, 0.0002), 0.005))
            else:
                self.wake.wait(0.05)
            self.wake.clear()

    def _lead(self) -> int:
        return self.lead_ns if self.sessions else 0  # run ahead only while a closed-loop client is announced

    def _next_due_ns(self, now: int) -> int | None:
        """The device instant of the scheduler's next possible action (None: wait for a request)."""
        cands = []
        start = self.decoder.next_start_ns()
        if start is not None:
            cands.append(start - self._lead())
        if self.computed:
            head = self.computed[0]
            cands.append(head.it.end_ns - (self.lead_ns if self._early_upto() >= 0 else 0))
        hold = self._hold_ns()
        if hold is not None and hold > now:  # (an unplaced wave's hold is in the past: it waits for its members)
            cands.append(hold)
        return min(cands) if cands else None

    def _advance(self, now: int) -> None:
        """Compute iterations up to the lead ahead of the device clock ``now``; publish those whose end it reached.

        Step start and end instants come from the model (the decoder's virtual clock), never from when this thread
        wakes; each iteration's load is posted to the device at its start instant, ahead of the device clock. An
        iteration never starts at or past the arrival of a request a closed-loop client has announced and not yet
        sent (a hold), so that request joins the batch it would join on a GPU; a hold the device clock reaches unmet
        lapses (the request is late). Results go out when the device clock reaches their end, or up to the lead
        before it when a client waits on them to send its next request (``Computed.early``).
        """
        self._lapse_holds(now)
        while True:
            start = self.decoder.next_start_ns()
            if start is None or start > self.decoder.now_ns:
                self.link.post(self.decoder.now_ns, False, 0.0, 0.0)  # idle from the last iteration's end
            hold = self._hold_ns()
            if start is None or start > now + self._lead() or (hold is not None and start >= hold):
                break
            self._compute()
        upto = self._early_upto()
        k = 0
        while self.computed:
            c = self.computed[0]
            if c.it.end_ns > now + (self.lead_ns if k <= upto else 0):
                break
            self.computed.popleft()
            self._publish(c)
            k += 1

    def _early_upto(self) -> int:
        """Index of the last computed iteration a client waits on (-1: none)."""
        for i in range(len(self.computed) - 1, -1, -1):
            if self.computed[i].early:
                return i
        return -1

    def _compute(self) -> None:
        """Run the decoder's next iteration: stops, closed-loop expectations and the device load at its start."""
        it = self.decoder.run_iteration(self._clock_factor(len(self.decoder.running)))
        counts: dict[str, tuple[int, bool]] = {}
        early = False
        for sim in it.touched:
            req = self.requests.get(sim.rid)
            if req is None:
                continue
            if (req.stops or req.stop_ids) and not sim.finished and sim.generated > req.computed:
                self._check_stops(req, req.computed, sim.generated, it.end_ns)
            req.computed = min(sim.generated, req.computed_cap or sim.generated)
            counts[sim.rid] = (req.computed, sim.finished)
            if sim.finished:
                early = self._loop_done(req) or early
        self.computed.append(Computed(it, counts, early))
        self.link.post(it.start_ns, True, it.dyn_w, it.util)
        if it.decode and self.decoder.forward_ct % self.decoder.log_interval == 0:
            self._log_decode(it)

    def _clock_factor(self, batch: int) -> float:
        """The clock factor of the next iteration, from the model's power cap (and the device's thermal ceiling):
        computed, not read back from the device, so it does not depend on when the device's answer arrived."""
        dyn = self.decoder.demand(batch)[0] if batch else 0.0
        return device_power(self.profile, dyn, ceiling=self.link.thermal_factor, limit_w=self.link.power_limit_w)[1]

    # ---- closed-loop clients -----------------------------------------------------------------------------------
    def _hold_ns(self) -> int | None:
        """The earliest arrival (device ns) of an announced request that has not come in yet."""
        holds = [s.first_ns if s.wave_ns is None else s.wave_ns + self.arrival_delay_ns
                 for s in self.sessions.values() if s.wave > 0]
        holds += [t + self.arrival_delay_ns for s in self.sessions.values() for t in s.expect.values()]
        return min(holds) if holds else None

    def _lapse_holds(self, now: int) -> None:
        for s in self.sessions.values():
            if s.wave > 0 and s.wave_ns is None and now - s.first_ns > WAVE_WAIT_S * 1e9 * self.clock.scale:
                log(f"closed-loop first wave incomplete after {WAVE_WAIT_S:g} s: {s.wave} request(s) missing; "
                    "starting without them", "WARNING")
                s.wave = 0
                self._place_wave(s, now)
            elif s.wave > 0 and s.wave_ns is not None and s.wave_ns + self.arrival_delay_ns <= now:
                # an announced wave the host did not deliver in time: placed when complete, like an unannounced one
                # (the engine has run nothing since, so only the idle gap before the wave grows)
                log(f"closed-loop first wave late: {s.wave} request(s) not in when the device clock reached them "
                    f"(host slower than the lead); placing the wave when it is complete", "WARNING")
                self.late_loop_requests += 1
                s.wave_ns, s.first_ns = None, now
                for m in s.members:
                    self._set_receipt(m, UNPLACED_NS - self.arrival_delay_ns)
            for k in [k for k, t in s.expect.items() if t + self.arrival_delay_ns <= now]:
                log(f"closed-loop request {k} after the first wave late (host too slow for the "
                    "lead)", "WARNING")
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
                log(f"closed-loop request {hint.seq} of {spec.session} came after its instant (host too slow for the "
                    "lead); counted from now", "WARNING")
                self.late_loop_requests += 1
                at = now + self.fresh_ns
            self._set_receipt(req, at)
        self.wake.set()

    def _set_receipt(self, req: EngineRequest, at: int) -> None:
        req.received_ns = at
        req.sim.arrival_ns = at + self.arrival_delay_ns

    def _loop_done(self, req: EngineRequest) -> bool:
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

    def _log_decode(self, it: Iteration) -> None:
        t0, g0 = self._tp_mark
        dt = (it.end_ns - t0) / 1e9
        if dt > 0:
            self.last_gen_throughput = (self.decoder.total_generated - g0) / dt
        self._tp_mark = (it.end_ns, self.decoder.total_generated)

    def _publish(self, c: "Computed") -> None:
        """Hand a computed iteration's tokens to the clients."""
        if "crash" in self.faults and self.warmup_iters is not None and self.decoder.forward_ct - self.warmup_iters >= self.crash_after:
            log("Scheduler hit an exception: RuntimeError: CUDA error: an illegal memory access was encountered "
                "(twin fault: crash)", "ERROR")
            self.link.release()
            os._exit(1)
        for rid, (count, finished) in c.counts.items():
            req = self.requests.get(rid)
            if req is None:
                continue
            prev = req.visible
            req.visible = count
            if req.visible > prev:
                req.snapshots.append(req.visible)
            if finished and not req.done:
                self._finish(req)
            if req.done or req.streaming:
                req.event.set()

    def _check_stops(self, req: EngineRequest, prev: int, n: int, end_ns: int) -> None:
        """Stop tokens / strings among tokens [prev, n) (checked when computed): finish there, cap the count."""
        ids = req.ids(n)
        for i in range(prev, len(ids)):
            if ids[i] in req.stop_ids:
                req.computed_cap = i + 1
                self.decoder.finish_now(req.sim, {"type": "stop", "matched": ids[i]})
                req.sim.finish_ns = end_ns
                return
        if req.stops:
            text = req.raw_text(n)
            start = max(0, req._ends[prev - 1] - max(len(x) for x in req.stops)) if prev > 0 else 0
            for s in req.stops:
                pos = text.find(s, start)
                if pos >= 0:
                    k = bisect.bisect_left(req._ends, pos + len(s))  # the token that completes the match
                    req.computed_cap = min(len(ids), k + 1)
                    req.stop_matched = s
                    self.decoder.finish_now(req.sim, {"type": "stop", "matched": s})
                    req.sim.finish_ns = end_ns
                    return

    def _finish(self, req: EngineRequest) -> None:
        req.done = True
        self.generation_tokens_total += req.visible
        if req.sim.finish_ns is not None:
            self.e2e_sum += (req.sim.finish_ns - req.received_ns) / 1e9
            self.e2e_count += 1

    # ---- requests ------------------------------------------------------------------------------------------
    def new_request(self, prompt_text: str | None, input_ids: list[int] | None, sp: dict, rid: str | None = None,
                    hint: LoopHint | None = None) -> EngineRequest:
        perf = self.profile.perf
        with self.lock:
            self.counter += 1
            n = self.counter
        prompt_tokens = len(input_ids) if input_ids is not None else count_tokens(prompt_text or "")
        key_text = prompt_text if prompt_text is not None else ",".join(map(str, (input_ids or [])[:64]))
        temperature = float(sp.get("temperature", 1.0) if sp.get("temperature") is not None else 1.0)
        salt = 0 if temperature <= 0 else stable_hash(self.seed, "sample", n)
        quality = prompt_quality(perf, key_text)
        ctx = context_quality(perf, prompt_tokens)
        max_new = sp.get("max_new_tokens")
        max_new = 128 if max_new is None else int(max_new)
        ctx_limit = self.context_length() - prompt_tokens
        max_new = max(0, min(max_new, ctx_limit))
        ignore_eos = bool(sp.get("ignore_eos", False))
        eos_at = 24 + stable_hash("eos", key_text, salt) % 489
        never = False
        if self.runaway_armed and "warmup" not in (rid or ""):  # warm-ups (startup, bench, pilot) are exempt
            self.runaway_armed = False
            never = True
            log("twin fault runaway: this request will never finish", "WARNING")
        if hint is not None and not rid:
            hint = None  # a closed-loop request must name itself (its rid) to be followed
        # a closed-loop request is seeded by its client-given id, not by the order in which the host delivered it
        req_seed = stable_hash(self.seed, "req", rid if hint is not None else n, key_text)
        sim = SimRequest(
            rid=rid or uuid.uuid4().hex, prompt_tokens=prompt_tokens, max_new_tokens=max_new, quality=quality,
            arrival_ns=UNPLACED_NS, seed=req_seed,
            ctx=ctx, ignore_eos=ignore_eos, eos_at=eos_at, never_finish=never, min_new_tokens=int(sp.get("min_new_tokens") or 0),
        )
        stops = sp.get("stop") or []
        if isinstance(stops, str):
            stops = [stops]
        req = EngineRequest(sim=sim, stream_key=stable_hash(key_text, salt), stops=[s for s in stops if s],
                             stop_ids=set(sp.get("stop_token_ids") or []), no_stop_trim=bool(sp.get("no_stop_trim")),
                             loop=hint)
        self.stamp(req)
        return req

    def context_length(self) -> int:
        return self.args.context_length or 131072

    def meta_info(self, req: EngineRequest, final: bool, completion: int | None = None) -> dict:
        sim = req.sim
        completion = req.visible if completion is None else completion
        meta: dict[str, Any] = {
            "id": sim.rid,
            "finish_reason": (sim.finish_reason if final else None),
            "prompt_tokens": sim.prompt_tokens,
            "completion_tokens": completion,
            "cached_tokens": 0,
            "weight_version": "default",
        }
        if self.version == "0.5.23":
            meta["reasoning_tokens"] = 0
            meta["num_retractions"] = 0
        if final:
            if sim.finish_ns is not None:
                meta["e2e_latency"] = (sim.finish_ns - req.received_ns) / 1e9
                # twin extras: device-clock ns of receipt and finish (wall = anchor + (ns - anchor) / scale)
                meta["twin_received_ns"], meta["twin_finish_ns"] = req.received_ns, sim.finish_ns
                meta["twin_first_token_ns"] = sim.first_token_ns  # for steady-state windows (harness.telemetry.steady)
            if not self.cfg.is_baseline:
                if self.version == "0.5.2":
                    meta["spec_verify_ct"] = sim.verify_ct
                elif sim.verify_ct > 0:
                    proposed = sim.verify_ct * (self.cfg.draft_tokens - 1)
                    meta.update({
                        "spec_accept_rate": sim.correct_drafts / proposed if proposed else 0.0,
                        "spec_accept_length": completion / sim.verify_ct,
                        "spec_num_correct_drafts": sim.correct_drafts,
                        "spec_num_proposed_drafts": proposed,
                        "spec_verify_ct": sim.verify_ct,
                        "spec_correct_drafts_histogram": list(sim.histogram),
                    })
            if self.version == "0.5.23" and self.args.enable_metrics and sim.finish_ns is not None:
                meta["queue_time"] = max(0.0, ((sim.first_token_ns or sim.finish_ns) - sim.arrival_ns) / 1e9)
                meta["first_token_latency"] = ((sim.first_token_ns or sim.finish_ns) - req.received_ns) / 1e9
                meta["decode_throughput"] = completion / max((sim.finish_ns - (sim.first_token_ns or req.received_ns)) / 1e9, 1e-9)
        return meta

    def abort(self, req: EngineRequest) -> None:
        with self.lock:
            self.decoder.abort(req.sim)

    def server_args(self) -> dict:
        a = self.args
        d = {k: v for k, v in vars(a).items()
             if not k.startswith("twin") and k not in ("emulate_version", "resolved_attention_backend")}
        d.update({
            "speculative_num_steps": None if self.cfg.is_baseline else self.cfg.steps,
            "speculative_eagle_topk": None if self.cfg.is_baseline else self.cfg.topk,
            "speculative_num_draft_tokens": None if self.cfg.is_baseline else self.cfg.draft_tokens,
            "max_running_requests": self.max_running,
            "mem_fraction_static": self.memory.get("mem_fraction"),
            "attention_backend": a.resolved_attention_backend,
            "served_model_name": self.model_id,
        })
        return d

    def server_info(self) -> dict:
        with self.lock:
            state = {
                **self.server_args(),
                "last_gen_throughput": self.last_gen_throughput,
                "memory_usage": {
                    "weight": round(self.profile.memory.weights_mb / 1024, 2),
                    "kvcache": round(self.memory.get("kv_cache_mb", 0) / 1024, 2),
                    "token_capacity": self.max_total_tokens(),
                    "graph": round(self.memory.get("extra_mb", 0) / 1024, 2),
                },
                "load": len(self.decoder.running) + len(self.decoder.waiting),
            }
            acc = self.decoder.accept_length()
            if acc is not None:
                state["avg_spec_accept_length"] = acc
            if self.record_step_time:
                state["step_time_dict"] = {k: list(v) for k, v in self.decoder.step_time_dict.items()}
        info = {
            **self.server_args(),
            "status": self.status,
            "max_total_num_tokens": self.max_total_tokens(),
            "max_req_input_len": self.context_length() - 5,
            "internal_states": [state],
            "version": self.version,
            "twin": True,
            "engine": "twin",
            "hardware": self.profile.hardware,
            "twin_seed": self.seed,
            "twin_launch_s": round(self.launch_s, 3),
            "twin_lead_ms": round(self.lead_ns / self.clock.scale / 1e6, 3),
            "twin_late_requests": self.late_loop_requests,
        }
        if self.version == "0.5.2":  # the top level echoes the launch flag; the scheduler's state has the resolved one
            info["attention_backend"] = self.args.attention_backend
        if self.version == "0.5.23":
            info["launch_command"] = "harness twin engine " + " ".join(sys.argv[1:])
            info["startup_time"] = round(self.launch_s, 3)
            info["frontend"] = "twin"
            info["kv_events"] = None
        return info

    def max_total_tokens(self) -> int:
        return int(self.memory.get("kv_cache_mb", 0) * 1024 * 1024 / KV_BYTES_PER_TOKEN)

    def flush_cache(self) -> tuple[bool, str]:
        with self.lock:
            if self.decoder.running or self.decoder.waiting or self.computed:
                return False, "Cache not flushed because there are pending requests. (twin)"
            self.decoder.reset_accept()
            return True, ("Cache flushed.\nPlease check backend logs for more details. "
                          "(When there are running or waiting requests, the operation will not be performed.)\n")

    def metrics(self) -> str:
        with self.lock:
            labels = f'model_name="{self.model_id}",engine_type="unified",tp_rank="0",pp_rank="0"'
            lines = [
                "# HELP sglang:num_running_reqs The number of running requests.", "# TYPE sglang:num_running_reqs gauge",
                f"sglang:num_running_reqs{{{labels}}} {len(self.decoder.running)}",
                "# TYPE sglang:num_queue_reqs gauge", f"sglang:num_queue_reqs{{{labels}}} {len(self.decoder.waiting)}",
                "# TYPE sglang:gen_throughput gauge", f"sglang:gen_throughput{{{labels}}} {self.last_gen_throughput}",
                "# TYPE sglang:spec_accept_length gauge",
                f"sglang:spec_accept_length{{{labels}}} {self.decoder.last_interval_accept or 0.0}",
                "# TYPE sglang:prompt_tokens_total counter", f'sglang:prompt_tokens_total{{model_name="{self.model_id}"}} {self.prompt_tokens_total}',
                "# TYPE sglang:generation_tokens_total counter",
                f'sglang:generation_tokens_total{{model_name="{self.model_id}"}} {self.generation_tokens_total}',
                "# TYPE sglang:e2e_request_latency_seconds summary",
                f'sglang:e2e_request_latency_seconds_sum{{model_name="{self.model_id}"}} {self.e2e_sum}',
                f'sglang:e2e_request_latency_seconds_count{{model_name="{self.model_id}"}} {self.e2e_count}',
            ]
            if self.version == "0.5.23" and not self.cfg.is_baseline:
                lines += ["# TYPE sglang:spec_verify_calls_total counter", f"sglang:spec_verify_calls_total{{{labels}}} {self.decoder.cum_ct}",
                          "# TYPE sglang:spec_num_draft_tokens gauge", f"sglang:spec_num_draft_tokens{{{labels}}} {self.cfg.draft_tokens}"]
        return "\n".join(lines) + "\n"


# ---- HTTP --------------------------------------------------------------------------------------------------------
def _err(status: int, message: str) -> Response:
    return Response(status, {"error": {"message": message}})


def build_router(eng: TwinEngine) -> Router:
    r = Router()
    v523 = eng.version == "0.5.23"

    def health(req: Request):
        if "slow-health" in eng.faults:
            time.sleep(float(os.environ.get("TWIN_SLOW_HEALTH_S", "5")))
        if eng.status != "Up":
            return Response(503, None, text="")
        return Response(200, None, text="")

    r.add("GET", "/health", health)
    r.add("GET", "/health_generate", health)
    if v523:
        r.add("GET", "/ready", lambda req: Response(200 if eng.status == "Up" else 503, None, text=""))

    def fault_500() -> Response | None:
        if "http500" in eng.faults:
            eng.http500_count += 1
            if eng.http500_count % eng.http500_every == 0:
                return _err(500, "Internal Server Error (twin fault: http500)")
        return None

    def admit(req: Request) -> dict | Response:
        """The gate of every generation route: warmed up, a JSON object body, then the http500 fault."""
        if eng.status != "Up":
            return _err(503, "server is starting")
        try:
            body = req.json()
        except json.JSONDecodeError as exc:
            return _err(400, f"invalid JSON: {exc.msg}")
        if not isinstance(body, dict):
            return _err(400, "request body must be a JSON object")
        return fault_500() or body

    def generate(req: Request):
        body = admit(req)
        if isinstance(body, Response):
            return body
        sp = body.get("sampling_params") or {}
        if not isinstance(sp, dict):
            return _err(400, "sampling_params must be an object")
        if v523:
            unknown = sorted(set(sp) - SAMPLING_KEYS_0523)
            if unknown:
                return _err(400, f"unknown field `{unknown[0]}` in sampling_params, expected one of "
                                 + ", ".join(f"`{k}`" for k in sorted(SAMPLING_KEYS_0523)))
        try:
            hint = parse_loop_hint(req.handler.headers)
        except ValueError as exc:
            return _err(400, str(exc))
        text, ids = body.get("text"), body.get("input_ids")
        if text is None and ids is None:
            return _err(400, "Either text or input_ids should be provided.")
        if eng.args.skip_tokenizer_init and ids is None:
            return _err(400, "input_ids must be provided with --skip-tokenizer-init")
        batch = isinstance(text, list) or (isinstance(ids, list) and ids and isinstance(ids[0], list))
        items: Any = (text if isinstance(text, list) else ids) if batch else [text if text is not None else ids]
        reqs = []
        for i, item in enumerate(items):
            rid = body.get("rid")
            rid = (rid[i] if isinstance(rid, list) else (f"{rid}-{i}" if rid and batch else rid))
            one_hint = None if batch else hint  # a closed loop is one request per call
            if isinstance(item, str):
                reqs.append(eng.new_request(item, None, sp, rid, one_hint))
            else:
                reqs.append(eng.new_request(None, list(item), sp, rid, one_hint))
        if body.get("stream") and not batch:
            reqs[0].streaming = True
        for q in reqs:
            eng.submit(q)
        with_text = not eng.args.skip_tokenizer_init
        if body.get("stream") and not batch:
            return Stream(_sse_generate(eng, reqs[0], with_text))
        outs = []
        for q in reqs:
            while not q.done:
                q.event.wait(0.5)
                q.event.clear()
            outs.append(_result(eng, q, with_text))
        return outs if batch else outs[0]

    r.add("POST,PUT", "/generate", generate)

    def info(req: Request) -> dict:
        return eng.server_info()

    r.add("GET", "/get_server_info", info)
    if v523:
        r.add("GET", "/server_info", info)

    def model_info(req: Request):
        out = {"model_path": eng.args.model_path, "tokenizer_path": eng.args.tokenizer_path or eng.args.model_path,
               "is_generation": True, "preferred_sampling_params": None, "weight_version": "default", "twin": True}
        if v523:
            out.update({"served_model_name": eng.model_id, "load_format": eng.args.load_format, "reasoning_parser": None})
        return out

    r.add("GET", "/get_model_info", model_info)
    if v523:
        r.add("GET", "/model_info", model_info)

    def flush(req: Request):
        ok, msg = eng.flush_cache()
        return Response(200 if ok else 400, None, text=msg)

    r.add("GET,POST", "/flush_cache", flush)

    def models(req: Request):
        return {"object": "list", "data": [{"id": eng.model_id, "object": "model", "created": int(eng.start_wall),
                                            "owned_by": "sglang-twin", "root": eng.model_id, "max_model_len": eng.context_length(),
                                            "twin": True}]}

    r.add("GET", "/v1/models", models)

    def openai(kind: str):
        def handler(req: Request):
            body = admit(req)
            if isinstance(body, Response):
                return body
            if kind == "chat":
                msgs = body.get("messages")
                if not isinstance(msgs, list) or not msgs:
                    return _err(400, "messages must be a non-empty list")
                prompt: Any = _chat_prompt(msgs)
            else:
                prompt = body.get("prompt")
                if isinstance(prompt, list):
                    prompt = prompt[0] if prompt else ""
                if not isinstance(prompt, str):
                    return _err(400, "prompt must be a string")
            max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
            sp = {"temperature": body.get("temperature", 1.0), "max_new_tokens": max_tokens if max_tokens is not None else eng.context_length(),
                  "stop": body.get("stop"), "ignore_eos": body.get("ignore_eos", False), "stop_token_ids": body.get("stop_token_ids"),
                  "min_new_tokens": body.get("min_tokens", 0)}
            q = eng.new_request(prompt, None, sp)
            q.streaming = bool(body.get("stream"))
            eng.submit(q)
            details = v523 and bool(body.get("return_spec_tokens_details"))
            if body.get("stream"):
                include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
                return Stream(_sse_openai(eng, q, kind, include_usage, details))
            while not q.done:
                q.event.wait(0.5)
                q.event.clear()
            return _openai_result(eng, q, kind, details)

        return handler

    r.add("POST", "/v1/chat/completions", openai("chat"))
    r.add("POST", "/v1/completions", openai("completion"))

    def metrics(req: Request):
        if not eng.args.enable_metrics:
            return _err(404, "metrics are disabled (launch with --enable-metrics)")
        return Response(200, None, text=eng.metrics(), content_type="text/plain; version=0.0.4")

    r.add("GET", "/metrics", metrics)
    return r


def _chat_prompt(msgs: list) -> str:
    parts = []
    for m in msgs:
        content = m.get("content") if isinstance(m, dict) else str(m)
        if isinstance(content, list):
            content = " ".join(str(c.get("text", "")) for c in content if isinstance(c, dict))
        parts.append(f"<|start_header_id|>{m.get('role', 'user') if isinstance(m, dict) else 'user'}<|end_header_id|>\n\n{content or ''}<|eot_id|>")
    return "".join(parts) + "<|start_header_id|>assistant<|end_header_id|>\n\n"


def _result(eng: TwinEngine, q: EngineRequest, with_text: bool) -> dict:
    out: dict = {}
    if with_text:
        out["text"] = q.text()
    out["output_ids"] = q.ids()
    out["meta_info"] = eng.meta_info(q, final=True)
    return out


def _sse(obj) -> str:
    return "data: " + (obj if isinstance(obj, str) else json.dumps(obj)) + "\n\n"


def _iter_counts(q: EngineRequest):
    """Yield (completion count, final) once per decode iteration that produced tokens (sglang's stream_interval 1)."""
    idx = 0
    while True:
        q.event.wait(0.5)
        q.event.clear()
        done = q.done
        snaps = q.snapshots
        end = len(snaps)
        while idx < end:
            n = snaps[idx]
            idx += 1
            if not (done and idx == end):
                yield n, False
        if done:
            yield q.visible, True
            return


def _sse_generate(eng: TwinEngine, q: EngineRequest, with_text: bool):
    sent_ids = 0
    cumulative_ids = eng.version == "0.5.23" and not getattr(eng.args, "incremental_streaming_output", False)
    incremental_text = eng.version == "0.5.23" and getattr(eng.args, "incremental_streaming_output", False)
    sent_text = 0
    try:
        for n, final in _iter_counts(q):
            ids = q.ids(n)
            chunk: dict = {}
            if with_text:
                text = q.text() if final else q.raw_text(n)
                chunk["text"] = text[sent_text:] if incremental_text else text
                sent_text = len(text)
            chunk["output_ids"] = ids if cumulative_ids else ids[sent_ids:]
            chunk["meta_info"] = eng.meta_info(q, final=final, completion=n)
            sent_ids = n
            yield _sse(chunk)
        yield _sse("[DONE]")
    except GeneratorExit:
        if not q.done:
            eng.abort(q)
        raise


def _finish_str(q: EngineRequest) -> str:
    fr = q.sim.finish_reason or {}
    return {"length": "length", "stop": "stop", "abort": "abort"}.get(fr.get("type", ""), "stop")


def _usage(q: EngineRequest) -> dict:
    return {"prompt_tokens": q.sim.prompt_tokens, "completion_tokens": q.visible, "total_tokens": q.sim.prompt_tokens + q.visible,
            "prompt_tokens_details": None, "reasoning_tokens": 0}


def _spec_details(eng: TwinEngine, q: EngineRequest) -> dict:
    meta = eng.meta_info(q, final=True)
    return {k: v for k, v in meta.items() if k.startswith("spec_")}


def _openai_result(eng: TwinEngine, q: EngineRequest, kind: str, details: bool) -> dict:
    fr = q.sim.finish_reason or {}
    matched = fr.get("matched") if fr.get("type") == "stop" else None
    text = q.text()
    if kind == "chat":
        choice = {"index": 0, "message": {"role": "assistant", "content": text, "reasoning_content": None, "tool_calls": None},
                  "logprobs": None, "finish_reason": _finish_str(q), "matched_stop": matched}
        obj = "chat.completion"
    else:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": _finish_str(q), "matched_stop": matched}
        obj = "text_completion"
    out = {"id": q.sim.rid, "object": obj, "created": int(time.time()), "model": eng.model_id, "choices": [choice],
           "usage": _usage(q), "metadata": {"weight_version": "default"}}
    if details:
        out["sglext"] = {"spec_tokens_details": _spec_details(eng, q)}
    return out


def _sse_openai(eng: TwinEngine, q: EngineRequest, kind: str, include_usage: bool, details: bool):
    sent_text = 0
    obj = "chat.completion.chunk" if kind == "chat" else "text_completion"
    created = int(time.time())
    first = True
    try:
        for n, final in _iter_counts(q):
            text = q.text() if final else q.raw_text(n)
            delta = text[sent_text:]
            sent_text = len(text)
            if kind == "chat":
                d = {"role": "assistant", "content": delta} if first else {"content": delta}
                choice = {"index": 0, "delta": d, "logprobs": None, "finish_reason": _finish_str(q) if final else None}
            else:
                choice = {"index": 0, "text": delta, "logprobs": None, "finish_reason": _finish_str(q) if final else None}
            chunk = {"id": q.sim.rid, "object": obj, "created": created, "model": eng.model_id, "choices": [choice]}
            if final and details:
                chunk["sglext"] = {"spec_tokens_details": _spec_details(eng, q)}
            first = False
            yield _sse(chunk)
        if include_usage:
            yield _sse({"id": q.sim.rid, "object": obj, "created": created, "model": eng.model_id, "choices": [], "usage": _usage(q)})
        yield _sse("[DONE]")
    except GeneratorExit:
        if not q.done:
            eng.abort(q)
        raise


# ---- launch ------------------------------------------------------------------------------------------------------
def _sleep_twin(clock: ScaledClock, seconds: float, stop: threading.Event | None = None) -> None:
    wall = clock.wall_seconds(seconds)
    if stop is not None:
        stop.wait(wall)
    else:
        time.sleep(wall)


def main(argv: list[str]) -> int:
    """Parse sglang flags, launch on the twin GPU, serve until SIGTERM; returns the exit code."""
    sys.setswitchinterval(0.0005)  # hand the GIL over quickly: wall latency is multiplied by the time scale
    version = ea.emulated_version(argv)
    try:
        parser = ea.build_parser(version)
    except SystemExit as exc:
        print(exc, file=sys.stderr)
        return 2
    if "-h" in argv or "--help" in argv:
        parser.print_help()
        return 0
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 2)
    try:
        choice = ea.resolve_spec(args)
        faults = ea.parse_faults(args, dict(os.environ))
    except ea.SpecRejected as exc:
        log(f"ValueError: {exc}", "ERROR")
        return 1
    for w in choice.warnings:
        log(w, "WARNING")
    cfg = choice.config
    log(f"server_args: model_path={args.model_path} speculative={cfg} dtype={args.dtype} "
        f"mem_fraction_static={args.mem_fraction_static} max_running_requests={args.max_running_requests} (twin engine, sglang {version})")

    engine_id = f"engine-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    link = DeviceLink(args.twin_gpu, engine_id)
    try:
        clock = ScaledClock.from_dict(link.get("/v1/clock"))
        profile = profile_from_dict(link.get("/v1/profile"))
        dev_info = link.get("/v1/info")
        if dev_info.get("power_limit_w") is not None:  # a power cap set on the device (harness sweep --power-caps)
            link.power_limit_w = float(dev_info["power_limit_w"])
    except (httpx.HTTPError, ValueError, KeyError) as exc:
        log(f"cannot reach the twin GPU at {args.twin_gpu}: {exc}", "ERROR")
        return 1
    cc = profile.device.compute_capability
    if version == "0.5.2":  # 0.5.2 validates the TensorRT-LLM backends against the GPU in ServerArgs.__post_init__
        try:
            ea.check_backend_hardware(args.attention_backend, cc)
        except ea.SpecRejected as exc:
            log(f"ValueError: {exc}", "ERROR")
            return 1
    args.resolved_attention_backend = ea.resolved_attention_backend(args.attention_backend, cfg, cc, version)
    log(f"Attention backend {'pinned' if args.attention_backend else 'not explicitly specified. Use'} "
        f"{args.resolved_attention_backend}{'' if args.attention_backend else ' backend by default'}.")

    graph_bs = ea.cuda_graph_max_bs(args) or min(args.max_running_requests or 16, 16)
    mem_fraction = args.mem_fraction_static if args.mem_fraction_static is not None else 0.65
    phases = launch_seconds(profile, cfg, graph_bs)
    scale = args.twin_launch_scale
    t_launch0 = clock.now_ns()
    stop = threading.Event()

    def on_signal(signum, frame):
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    log(f"Load weight begin. avail mem={dev_info.get('memory_total_mb', 0) / 1024:.2f} GB (twin GPU {dev_info.get('name')})")
    _sleep_twin(clock, (phases["imports"] + phases["weights"]) * scale, stop)
    if stop.is_set():
        return 0
    if not cfg.is_baseline and args.dtype == "auto":
        log("Capture cuda graph failed: RuntimeError: expected mat1 and mat2 to have the same dtype, but got: "
            "c10::BFloat16 != c10::Half (the EAGLE3 draft ships float16, the target bfloat16; pass --dtype float16)", "ERROR")
        return 1
    mem = memory_footprint_mb(profile, cfg, mem_fraction, graph_bs)
    if not mem["kv_ok"]:
        log("RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
            f"(static pool {mem['static_mb']:.0f} MB < weights {profile.memory.weights_mb:.0f} MB + minimum KV cache)", "ERROR")
        return 1
    want = mem["total_mb"] if "oom" not in faults else profile.device.memory_total_mb * 2
    status, body = link.lease(want)
    if status != 200:
        free = body.get("error", {}).get("memory_free_mb", 0.0)
        log("Capture cuda graph failed: torch.OutOfMemoryError: CUDA out of memory. "
            f"Tried to allocate {max(want - mem['static_mb'], 0):.0f} MiB. GPU 0 has a total capacity of "
            f"{profile.device.memory_total_mb / 1024:.2f} GiB of which {max(free - mem['static_mb'], 0):.0f} MiB is free "
            "after the static pool. "
            "Possible solutions: reduce --mem-fraction-static, --cuda-graph-max-bs or --max-running-requests (twin)", "ERROR")
        return 1
    seed = args.twin_seed if args.twin_seed is not None else stable_hash("launch", dev_info.get("seed", 0), body.get("launch_seq", 0)) % (2**31)
    if mem["capture_mb"] > 0 and "oom" not in faults:
        link.lease(mem["steady_mb"])  # the capture workspace goes back after CUDA-graph capture
    link.start()
    try:
        log(f"Memory pool end. KV cache {mem['kv_cache_mb']:.0f} MB, buffers {mem['extra_mb']:.0f} MB, total {mem['total_mb']:.0f} MB")
        if ea.oversized_tree(cfg):
            _sleep_twin(clock, 2.0 * scale, stop)
            log(f"Capture cuda graph failed: RuntimeError: selected index k out of range "
                f"(speculative_num_draft_tokens - 1 = {cfg.draft_tokens - 1} > tree candidates)", "ERROR")
            return 1
        _sleep_twin(clock, phases["cuda_graphs"] * scale, stop)
        if stop.is_set():
            return 0
        eng = TwinEngine(args, cfg, profile, clock, link, seed, faults, version, choice.warnings)
        eng.memory = {**mem, "mem_fraction": mem_fraction}
        try:
            server = make_server(args.host, args.port, build_router(eng), server_header="sglang-twin")
        except OSError as exc:
            log(f"cannot bind {args.host}:{args.port}: {exc}", "ERROR")
            return 1
        sched = threading.Thread(target=eng.run_scheduler, name="scheduler", daemon=True)
        sched.start()
        http = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        http.start()
        log(f"Uvicorn running on http://{args.host}:{args.port} (twin)")
        warm = eng.new_request("The capital city of France is", None, {"max_new_tokens": 8, "temperature": 0}, rid="twin-warmup")
        eng.submit(warm)
        while not warm.done and not stop.is_set():
            warm.event.wait(0.05)
        eng.warmup_iters = eng.decoder.forward_ct
        eng.launch_s = (clock.now_ns() - t_launch0) / 1e9
        eng.status = "Up"
        log(f"The server is fired up and ready to roll! (twin, launch {eng.launch_s:.1f} s on the twin clock)")
        while not stop.wait(0.2):
            if not sched.is_alive():
                log("scheduler thread died", "ERROR")
                return 1
        eng.status = "Stopping"
        eng.stop_event.set()
        server.shutdown()
        server.server_close()
        return 0
    finally:
        link.stop()
        link.release()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
