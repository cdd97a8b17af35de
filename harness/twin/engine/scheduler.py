"""The twin engine's core: a discrete-event continuous batch on the twin clock, running on a twin GPU device.

A scheduler thread wakes every millisecond or so of WALL time and runs every decode iteration whose start time has
passed on the twin clock (never one sleep per iteration), publishing tokens when an iteration's end time has passed.
Load changes go to the device as timed events (``DeviceLink``). The sglang and OpenAI APIs over it are in
``sglang_api`` / ``openai_api``, closed-loop clients in ``closed_loop``, the launch emulation in ``launch``.
"""

from __future__ import annotations

import argparse
import bisect
import os
import threading
import time
import uuid
from collections import deque
from typing import Any

from harness.core.clocks import ScaledClock
from harness.grid import SpecConfig
from harness.twin.engine.device_link import DeviceLink
from harness.twin.engine.latency import Latencies
from harness.twin.engine.log import log
from harness.twin.engine.loop_clients import UNPLACED_NS, ClosedLoops
from harness.twin.engine.loop_hint import LoopHint
from harness.twin.engine.request import Computed, EngineRequest
from harness.twin.engine.sglang_contract import context_length_error
from harness.twin.engine.tokens import count_tokens, stable_hash
from harness.twin.model import (
    CLIENT_TURNAROUND_MS,
    Decoder,
    Iteration,
    SimRequest,
    context_quality,
    device_power,
    prompt_quality,
)
from harness.twin.profile import TwinProfile

LEAD_MS = 3000.0
"""How far (wall ms) the engine's timeline may run ahead of the device clock (env ``TWIN_LEAD_MS``): the slack within
which host delays (a late scheduler thread, a slow activity report, a client's round trip) leave twin time untouched."""
KV_BYTES_PER_TOKEN = 32 * 1024  # Llama-3.2-1B: 16 layers x 8 KV heads x 64 dims x (K, V) x 2 bytes


class TwinEngine:
    """Server state: args, clock, decoder, requests, counters."""

    def __init__(
        self,
        args: argparse.Namespace,
        cfg: SpecConfig,
        profile: TwinProfile,
        clock: ScaledClock,
        link: DeviceLink,
        seed: int,
        faults: set[str],
        version: str,
        warnings: list[str],
    ) -> None:
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
        self.decoder = Decoder(
            profile, cfg, self.max_running, seed, start_ns=clock.now_ns(), log_interval=args.decode_log_interval
        )
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
        self.latencies = Latencies()  # /metrics' histograms (latency.py)
        self.last_gen_throughput = 0.0
        self._tp_mark = (clock.now_ns(), 0)
        self.memory: dict[str, Any] = {}
        self.launch_s = 0.0
        self.launch_phases: dict[str, float] = {}  # simulated launch phases, twin seconds (launch.py)
        self.graph_bs = 0  # the largest CUDA-graph batch size captured
        self.start_wall = time.time()
        self.lead_ns = int(float(os.environ.get("TWIN_LEAD_MS", str(LEAD_MS))) * 1e6 * clock.scale)
        self.loops = ClosedLoops(
            clock,
            self.lock,
            self.wake,
            arrival_delay_ns=int(profile.perf.request_overhead_ms * 0.75e6),
            turnaround_ns=int(CLIENT_TURNAROUND_MS * 1e6),
        )

    @property
    def model_id(self) -> str:
        """The served model name (``twin:<model path>`` unless ``--served-model-name``)."""
        return self.args.served_model_name or f"twin:{self.args.model_path}"

    # ---- scheduler -----------------------------------------------------------------------------------------
    def submit(self, req: EngineRequest) -> None:
        """Hand a stamped request to the decoder."""
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
        return self.lead_ns if self.loops.sessions else 0  # run ahead only while a closed-loop client is announced

    def _next_due_ns(self, now: int) -> int | None:
        """The device instant of the scheduler's next possible action (None: wait for a request)."""
        cands = []
        start = self.decoder.next_start_ns()
        if start is not None:
            cands.append(start - self._lead())
        if self.computed:
            head = self.computed[0]
            cands.append(head.it.end_ns - (self.lead_ns if self._early_upto() >= 0 else 0))
        hold = self.loops.hold_ns()
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
        self.loops.lapse(now)
        while True:
            start = self.decoder.next_start_ns()
            if start is None or start > self.decoder.now_ns:
                self.link.post(self.decoder.now_ns, False, 0.0, 0.0)  # idle from the last iteration's end
            hold = self.loops.hold_ns()
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
            if req.forward_entry_ns is None and sim.first_token_ns == it.end_ns:
                req.forward_entry_ns = it.start_ns  # admitted (prefilled) in this iteration
            if (req.stops or req.stop_ids) and not sim.finished and sim.generated > req.computed:
                self._check_stops(req, req.computed, sim.generated, it.end_ns)
            req.computed = min(sim.generated, req.computed_cap or sim.generated)
            counts[sim.rid] = (req.computed, sim.finished)
            if sim.finished:
                early = self.loops.done(req) or early
        self.computed.append(Computed(it, counts, early))
        self.link.post(it.start_ns, True, it.dyn_w, it.util)
        if it.decode and self.decoder.forward_ct % self.decoder.log_interval == 0:
            self._log_decode(it)

    def _clock_factor(self, batch: int) -> float:
        """The clock factor of the next iteration, from the model's power cap (and the device's thermal and SM clock
        lock ceilings): computed, not read back from the device, so it does not depend on when the device's answer
        arrived."""
        dyn = self.decoder.demand(batch)[0] if batch else 0.0
        ceiling = min(self.link.thermal_factor, self.link.lock_factor)
        return device_power(self.profile, dyn, ceiling=ceiling, limit_w=self.link.power_limit_w)[1]

    def _log_decode(self, it: Iteration) -> None:
        t0, g0 = self._tp_mark
        dt = (it.end_ns - t0) / 1e9
        if dt > 0:
            self.last_gen_throughput = (self.decoder.total_generated - g0) / dt
        self._tp_mark = (it.end_ns, self.decoder.total_generated)

    def _publish(self, c: Computed) -> None:
        """Hand a computed iteration's tokens to the clients."""
        if (
            "crash" in self.faults
            and self.warmup_iters is not None
            and self.decoder.forward_ct - self.warmup_iters >= self.crash_after
        ):
            log(
                "Scheduler hit an exception: RuntimeError: CUDA error: an illegal memory access was encountered "
                "(twin fault: crash)",
                "ERROR",
            )
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
            self.latencies.finished(req.received_ns, req.sim.first_token_ns, req.sim.finish_ns, req.visible)

    # ---- requests ------------------------------------------------------------------------------------------
    def new_request(
        self,
        prompt_text: str | None,
        input_ids: list[int] | None,
        sp: dict[str, Any],
        rid: str | None = None,
        hint: LoopHint | None = None,
    ) -> EngineRequest:
        """Build a request from sglang sampling params (``sp``), seeded and stamped (see ``ClosedLoops.stamp``)."""
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
            rid=rid or uuid.uuid4().hex,
            prompt_tokens=prompt_tokens,
            max_new_tokens=max_new,
            quality=quality,
            arrival_ns=UNPLACED_NS,
            seed=req_seed,
            ctx=ctx,
            ignore_eos=ignore_eos,
            eos_at=eos_at,
            never_finish=never,
            min_new_tokens=int(sp.get("min_new_tokens") or 0),
        )
        stops = sp.get("stop") or []
        if isinstance(stops, str):
            stops = [stops]
        req = EngineRequest(
            sim=sim,
            stream_key=stable_hash(key_text, salt),
            stops=[s for s in stops if s],
            stop_ids=set(sp.get("stop_token_ids") or []),
            no_stop_trim=bool(sp.get("no_stop_trim")),
            loop=hint,
        )
        self.loops.stamp(req)
        return req

    def context_length(self) -> int:
        """``--context-length`` or the model's 128 Ki tokens."""
        return self.args.context_length or 131072

    def context_refusal(self, prompt_tokens: int, max_new_tokens: Any) -> str | None:
        """sglang's refusal of a request whose prompt, or prompt plus ``max_new_tokens``, does not fit the context
        (its message), else None; 0.5.23 reserves the EAGLE draft slots of every request on top of its input."""
        cfg = self.cfg
        reserved = 0 if cfg.is_baseline else max(cfg.topk * cfg.steps, cfg.draft_tokens)
        return context_length_error(self.version, self.context_length(), prompt_tokens, max_new_tokens, reserved)

    def abort(self, req: EngineRequest) -> None:
        """Drop a request whose client went away."""
        with self.lock:
            self.decoder.abort(req.sim)

    def max_total_tokens(self) -> int:
        """KV-cache capacity in tokens."""
        return int(self.memory.get("kv_cache_mb", 0) * 1024 * 1024 / KV_BYTES_PER_TOKEN)

    def flush_cache(self) -> tuple[bool, str]:
        """sglang's /flush_cache: refused while requests are pending; (ok, message)."""
        with self.lock:
            if self.decoder.running or self.decoder.waiting or self.computed:
                return False, "Cache not flushed because there are pending requests. (twin)"
            self.decoder.reset_accept()
            return True, (
                "Cache flushed.\nPlease check backend logs for more details. "
                "(When there are running or waiting requests, the operation will not be performed.)\n"
            )
