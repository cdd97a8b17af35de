"""The twin's performance and power model: pure functions of a profile, plus the continuous-batch decoder.

- Acceptance: EAGLE's draft tree. At depth d the draft's top-1 guess is right with probability
  a_d = accept_first * accept_decay^(d-1) * quality; lower ranks share the rest geometrically (``rank_share``).
  The tree keeps the ``topk`` most probable nodes per depth (beam) and verifies the ``draft_tokens - 1`` most
  probable nodes overall; the accept length is 1 (bonus token) + the depth of the longest verified prefix of the
  target's path. ``quality`` is a per-prompt factor (content predictability, from a stable hash of the prompt)
  times a context factor that falls toward ``long_context_floor`` beyond the draft head's training context.
- Step time (ms): target verification of batch x draft tokens (memory-bound floor + per-token compute, steeper above
  a knee) + drafting (steps x (fixed + per-token x batch x topk)) + overhead; the compute-bound shares stretch by
  1/clock_factor when the device slows its clocks.
- Power: each phase has its own dynamic power (W above idle at full clocks); a step's demand is their time-weighted
  mean. The device turns demand into power and a clock factor (``device.cap_clock_factor``).
- Memory: static pool (mem fraction x total) + context + CUDA-graph activations + speculative buffers that grow
  with batch size, topk and draft tokens.
- ``Decoder``: a discrete-event continuous batch (admission, prefill, one draft+verify round per iteration, per
  request seeded acceptance, sglang's 40-iteration accept-length folding and step-time logging). The engine drives it
  on the twin clock; calibration drives it in-process with a virtual device.
"""

from __future__ import annotations

import heapq
import math
import random
from collections import defaultdict, deque
from dataclasses import dataclass, field
from functools import lru_cache

from harness.grid import SpecConfig
from harness.twin.device.gpu import cap_clock_factor
from harness.twin.engine.tokens import EOS_ID, stable_hash
from harness.twin.profile import PerfParams, TwinProfile

DECODE_LOG_INTERVAL = 40
CLIENT_TURNAROUND_MS = 3.5
"""A closed-loop client's gap between a response and its next request, measured for the harness's bench against
the twin engine at time scale 1 (server-side receive minus previous finish: 2.4-4.8 ms, mean 3.5)."""


# ---- acceptance ----------------------------------------------------------------------------------------------
def depth_accept(perf: PerfParams, depth: int, quality: float, topk: int = 2) -> float:
    chain = perf.chain_depth_factor if topk == 1 and depth >= 2 else 1.0
    return min(
        0.995,
        max(0.0, perf.accept_first * perf.accept_decay ** ((depth - 1) ** perf.accept_decay_power) * quality * chain),
    )


def rank_prob(a: float, rank: int, share: float, ctx: float = 1.0) -> float:
    """P(the target's token is the draft's rank-th guess). Beyond the training context (ctx < 1) the whole
    distribution degrades: lower ranks lose mass too, the rest falls outside the tree."""
    return a if rank == 1 else (1.0 - a) * share * (1.0 - share) ** (rank - 2) * ctx


@lru_cache(maxsize=4096)
def _tree(
    steps: int,
    topk: int,
    draft_tokens: int,
    q: float,
    ctx: float,
    a1: float,
    decay: float,
    power: float,
    share: float,
    chain: float = 1.0,
) -> tuple[tuple[tuple[int, ...], float], ...]:
    beam: list[tuple[tuple[int, ...], float]] = [((), 1.0)]
    candidates: list[tuple[tuple[int, ...], float]] = []
    for d in range(1, steps + 1):
        f = chain if topk == 1 and d >= 2 else 1.0
        a = min(0.995, max(0.0, a1 * decay ** ((d - 1) ** power) * q * ctx * f))
        children = [(path + (r,), p * rank_prob(a, r, share, ctx)) for path, p in beam for r in range(1, topk + 1)]
        candidates += children
        beam = heapq.nlargest(topk, children, key=lambda c: (c[1], -len(c[0])))
    return tuple(heapq.nlargest(max(draft_tokens - 1, 0), candidates, key=lambda c: (c[1], -len(c[0]))))


def draft_tree(
    perf: PerfParams, cfg: SpecConfig, quality: float, ctx: float = 1.0
) -> tuple[tuple[tuple[int, ...], float], ...]:
    """The verified nodes (rank path, probability of being the target's prefix) of one draft round."""
    if cfg.is_baseline:
        return ()
    return _tree(
        cfg.steps,
        cfg.topk,
        cfg.draft_tokens,
        round(quality, 4),
        round(ctx, 4),
        perf.accept_first,
        perf.accept_decay,
        perf.accept_decay_power,
        perf.rank_share,
        perf.chain_depth_factor,
    )


def expected_accept_length(perf: PerfParams, cfg: SpecConfig, quality: float = 1.0, ctx: float = 1.0) -> float:
    """Expected tokens per verify step (bonus included) for a prompt quality and a context factor."""
    return 1.0 + sum(p for _, p in draft_tree(perf, cfg, quality, ctx))


class AcceptSampler:
    """Samples accepted tokens of one verify step for one request (seeded by the caller's RNG)."""

    def __init__(self, perf: PerfParams, cfg: SpecConfig, quality: float, ctx: float = 1.0) -> None:
        self.cfg = cfg
        self.nodes = {path for path, _ in draft_tree(perf, cfg, quality, ctx)}
        self.a = [depth_accept(perf, d, quality * ctx, cfg.topk) for d in range(1, cfg.steps + 1)]
        self.share = perf.rank_share
        self.ctx = ctx

    def sample(self, rng: random.Random) -> int:
        """Tokens emitted by one verify (1 + accepted drafts)."""
        path: tuple[int, ...] = ()
        for a in self.a:
            u = rng.random()
            if u < a:
                r = 1
            elif u >= a + (1.0 - a) * self.ctx:
                return len(path) + 1  # outside the draft's candidates altogether: the bonus token only
            else:
                r = 2
                while rng.random() > self.share and r < 64:
                    r += 1
            path = path + (r,)
            if path not in self.nodes:
                break
        else:
            return len(path) + 1
        return len(path)


_CONTENT_CLASSES: tuple[tuple[float, tuple[str, ...]], ...] = (
    (
        1.0,
        (
            "code",
            "python",
            "function",
            "server",
            "api",
            "class ",
            "def ",
            "import",
            "sql",
            "json",
            "regex",
            "script",
            "bash",
            "program",
            "patch",
            "diff",
            "```",
        ),
    ),
    (0.5, ("solve", "step-by-step", "equation", "prove", "calculate", "x^2", "math", "derive")),
    (0.0, ("wikipedia", "history", "president", "explain", "describe", "summar")),
    (-1.0, ("blog", "story", "poem", "travel", "imagine", "creative", "novel", "essay")),
)


def content_score(prompt: str) -> float:
    """Predictability class of a prompt's continuation: code +1, math +0.5, encyclopedic 0, creative prose -1."""
    low = prompt.lower()
    scores = [score for score, words in _CONTENT_CLASSES if any(w in low for w in words)]
    return sum(scores) / len(scores) if scores else 0.0


def prompt_quality(perf: PerfParams, prompt: str) -> float:
    """Per-prompt draft quality: 1 + spread x content class, plus a small stable per-text jitter."""
    u = (stable_hash("prompt-quality", prompt) % 20001) / 10000.0 - 1.0
    return max(0.2, 1.0 + perf.prompt_quality_spread * content_score(prompt) + 0.02 * u)


def context_quality(perf: PerfParams, context_tokens: int) -> float:
    """1 within the draft head's training context, falling toward ``long_context_floor`` beyond it."""
    over = context_tokens - perf.long_context_tokens
    if over <= 0:
        return 1.0
    return perf.long_context_floor + (1.0 - perf.long_context_floor) * math.exp(-over / perf.long_context_scale_tokens)


# ---- step time and power -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class StepCost:
    fixed_ms: float
    compute_ms: float
    dyn_w: float
    util: float

    def ms(self, clock_factor: float = 1.0) -> float:
        return self.fixed_ms + self.compute_ms / max(clock_factor, 1e-3)


def target_ms(perf: PerfParams, tokens: float) -> float:
    return (
        perf.target_mem_ms
        + perf.target_ms_per_token * tokens
        + perf.target_ms_per_token_above_knee * max(0.0, tokens - perf.target_knee_tokens)
    )


def step_cost(profile: TwinProfile, cfg: SpecConfig, batch: int) -> StepCost:
    """One decode iteration of ``batch`` running requests at full clocks."""
    perf, pw = profile.perf, profile.power
    if cfg.is_baseline:
        tokens = batch
        tgt, draft, ov = target_ms(perf, tokens), 0.0, perf.baseline_overhead_ms
    else:
        tokens = batch * cfg.draft_tokens
        tgt = target_ms(perf, tokens)
        draft = cfg.steps * (perf.draft_step_ms + perf.draft_ms_per_token * batch * cfg.topk)
        candidates = cfg.topk + (cfg.steps - 1) * cfg.topk * cfg.topk
        ov = perf.spec_overhead_ms + batch * (perf.spec_overhead_ms_per_req + perf.tree_ms_per_candidate * candidates)
    total = tgt + draft + ov
    p_tgt = pw.target_w + pw.target_w_per_token * pw.target_w_token_sat * (
        1.0 - math.exp(-tokens / pw.target_w_token_sat)
    )
    dyn = (tgt * p_tgt + draft * pw.draft_w + ov * pw.overhead_w) / total
    util = (tgt * pw.util_target + draft * pw.util_draft + ov * pw.util_overhead) / total
    compute = tgt * perf.stretch_target + draft * perf.stretch_draft
    return StepCost(fixed_ms=total - compute, compute_ms=compute, dyn_w=dyn, util=util)


def prefill_ms(perf: PerfParams, tokens: int) -> float:
    return perf.prefill_fixed_ms + perf.prefill_ms_per_token * tokens


def base_power_w(profile: TwinProfile) -> float:
    """Idle power of a GPU that holds one engine."""
    return profile.device.idle_power_w + profile.device.engine_loaded_power_w


def device_power(
    profile: TwinProfile, dyn_w: float, base_w: float | None = None, ceiling: float = 1.0, limit_w: float | None = None
) -> tuple[float, float]:
    """(power W, clock factor) the device settles at for a dynamic demand (``ceiling``: thermal slowdown, 1 = none;
    ``limit_w``: the power limit in force, default the profile's)."""
    d = profile.device
    base = base_power_w(profile) if base_w is None else base_w
    cap_w = (d.power_limit_w if limit_w is None else limit_w) * (1 + d.cap_overshoot_frac)
    f = max(d.min_clock_factor, cap_clock_factor(base, dyn_w, cap_w, d.dvfs_exponent, ceiling))
    return base + dyn_w * f**d.dvfs_exponent, f


# ---- memory and launch ---------------------------------------------------------------------------------------
def memory_footprint_mb(profile: TwinProfile, cfg: SpecConfig, mem_fraction: float, graph_bs: int) -> dict:
    """The engine's memory: static pool + buffers outside it; ``fits`` says whether the device can hold it."""
    m, d = profile.memory, profile.device
    static = mem_fraction * d.memory_total_mb
    extra = m.context_mb + m.graph_mb_per_bs * graph_bs
    if not cfg.is_baseline:
        slots = graph_bs * (cfg.draft_tokens + cfg.steps * cfg.topk)
        capture = m.capture_slot_mb * slots + m.tree_node_mb * graph_bs * cfg.draft_tokens * cfg.steps * cfg.topk
        extra += m.spec_slot_mb * slots + capture
    else:
        capture = 0.0
    available = d.memory_total_mb - d.memory_reserved_mb - d.memory_base_used_mb
    return {
        "static_mb": static,
        "kv_cache_mb": static - m.weights_mb,
        "extra_mb": extra,
        "total_mb": static + extra,
        "capture_mb": capture,  # tree-mask workspace of graph capture: needed to launch, released after capture
        "steady_mb": static + extra - capture,
        "available_mb": available,
        "fits": static + extra <= available,
        "kv_ok": static - m.weights_mb >= m.min_kv_mb,
    }


def launch_seconds(profile: TwinProfile, cfg: SpecConfig, graph_bs: int) -> dict:
    """Simulated launch phases (twin seconds): imports, weights, CUDA-graph capture (target + draft)."""
    p = profile.perf
    draft_nodes = 0 if cfg.is_baseline else cfg.steps * cfg.topk + cfg.draft_tokens
    return {
        "imports": p.launch_import_s,
        "weights": p.launch_weights_s * (1.0 if cfg.is_baseline else 1.15),
        "cuda_graphs": p.launch_graph_s_per_bs * graph_bs
        + p.launch_draft_graph_s_per_node * draft_nodes * math.sqrt(graph_bs),
    }


# ---- the continuous batch ------------------------------------------------------------------------------------
@dataclass
class SimRequest:
    rid: str
    prompt_tokens: int
    max_new_tokens: int
    quality: float
    arrival_ns: int
    seed: int
    ctx: float = 1.0
    ignore_eos: bool = True
    eos_at: int | None = None
    never_finish: bool = False
    min_new_tokens: int = 0
    # state
    generated: int = 0
    verify_ct: int = 0
    correct_drafts: int = 0
    histogram: list[int] = field(default_factory=list)
    first_token_ns: int | None = None
    finish_ns: int | None = None
    finish_reason: dict | None = None
    aborted: bool = False

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None


@dataclass
class Iteration:
    start_ns: int
    end_ns: int
    batch: int
    admitted: int
    decode: bool
    dyn_w: float
    util: float
    finished: list[SimRequest]
    touched: list[SimRequest]


class Decoder:
    """sglang-like scheduler state for one engine; advance it with ``run_iteration`` on a twin clock."""

    def __init__(
        self,
        profile: TwinProfile,
        cfg: SpecConfig,
        max_running: int,
        seed: int,
        start_ns: int,
        log_interval: int = DECODE_LOG_INTERVAL,
        nominal_launch: bool = False,
    ) -> None:
        """``nominal_launch`` pins the per-launch speed and power factors to 1 (the population median): calibration
        fits the typical launch, not the few seeds it happens to simulate."""
        self.profile = profile
        self.cfg = cfg
        self.max_running = max(1, max_running)
        self.log_interval = log_interval
        rng = random.Random(stable_hash("launch", seed))
        self.step_factor = 1.0 if nominal_launch else math.exp(rng.gauss(0.0, profile.perf.launch_spread))
        self.power_factor = 1.0 if nominal_launch else math.exp(rng.gauss(0.0, profile.power.power_spread))
        self.jitter_rng = random.Random(stable_hash("jitter", seed))
        self.waiting: deque[SimRequest] = deque()
        self.running: list[SimRequest] = []
        self.now_ns = start_ns
        self.forward_ct = 0
        self.last_log_ns = start_ns
        self.int_tokens = 0
        self.int_ct = 0
        self.cum_tokens = 0
        self.cum_ct = 0
        self.spec_drafts_total = 0
        """Monotonic (never reset): request-verify steps, as vLLM's ``spec_decode_num_drafts`` counts them."""
        self.accepted_per_pos: list[int] = [0] * max(self.cfg.steps, 0)
        """Monotonic: verify steps whose i-th drafted token was accepted (vLLM's ``num_accepted_tokens_per_pos``)."""
        self.last_interval_accept: float | None = None
        self.step_time_dict: dict[str, list[float]] = defaultdict(list)
        self.total_generated = 0
        self._costs: dict[int, StepCost] = {}
        self._samplers: dict[tuple[float, float], AcceptSampler] = {}

    # scheduling ---------------------------------------------------------------------------------------------
    def submit(self, req: SimRequest) -> None:
        self.waiting.append(req)

    def abort(self, req: SimRequest) -> None:
        req.aborted = True

    def idle(self) -> bool:
        return not self.running and not self.waiting

    def next_start_ns(self) -> int | None:
        if self.running:
            return self.now_ns
        if self.waiting:
            return max(self.now_ns, min(r.arrival_ns for r in self.waiting))
        return None

    def cost(self, batch: int) -> StepCost:
        c = self._costs.get(batch)
        if c is None:
            c = self._costs[batch] = step_cost(self.profile, self.cfg, batch)
        return c

    def demand(self, batch: int) -> tuple[float, float]:
        """(dynamic W at full clocks, utilization) of a decode iteration at this batch size (0 when idle)."""
        if batch <= 0:
            return 0.0, 0.0
        c = self.cost(batch)
        return c.dyn_w * self.power_factor, c.util

    def _sampler(self, quality: float, ctx: float) -> AcceptSampler:
        key = (round(quality, 4), round(ctx, 4))
        s = self._samplers.get(key)
        if s is None:
            s = self._samplers[key] = AcceptSampler(self.profile.perf, self.cfg, *key)
        return s

    def accept_length(self) -> float | None:
        """``avg_spec_accept_length``: cumulative tokens per request-verify, folded every 40 iterations."""
        if self.cfg.is_baseline or self.cum_ct == 0:
            return None
        return self.cum_tokens / self.cum_ct

    def reset_accept(self) -> None:
        """``/flush_cache``: the accept counters (and forward count) reset; step_time_dict does not."""
        self.cum_tokens = self.cum_ct = self.int_tokens = self.int_ct = 0
        self.forward_ct = 0
        self.last_interval_accept = None

    def _finish(self, req: SimRequest, end_ns: int, reason: dict) -> None:
        req.finish_reason = reason
        req.finish_ns = end_ns

    def run_iteration(self, clock_factor: float = 1.0) -> Iteration:
        """Run the next iteration (call only when ``next_start_ns()`` is not None)."""
        start = self.next_start_ns()
        assert start is not None
        perf = self.profile.perf
        for r in [r for r in self.running if r.aborted]:
            self.running.remove(r)
            self._finish(r, start, {"type": "abort", "message": "request aborted by the client"})
        decoding = list(self.running)
        admitted: list[SimRequest] = []
        pending: deque[SimRequest] = deque()
        while self.waiting:
            r = self.waiting.popleft()
            if r.aborted:
                continue
            if r.arrival_ns <= start and len(decoding) + len(admitted) < self.max_running:
                admitted.append(r)
            else:
                pending.append(r)
        self.waiting = pending
        batch = len(decoding)
        ms = 0.0
        if admitted:
            ms += prefill_ms(perf, sum(r.prompt_tokens for r in admitted))
        if batch:
            ms += self.cost(batch).ms(clock_factor)
        jitter = math.exp(self.jitter_rng.gauss(0.0, perf.step_jitter)) if perf.step_jitter > 0 else 1.0
        end = start + int(ms * self.step_factor * jitter * 1e6)
        finished: list[SimRequest] = []
        spec = not self.cfg.is_baseline
        if batch:
            tokens_sum = 0
            for r in decoding:
                n = self._sampler(r.quality, r.ctx).sample(r.rng) if spec else 1
                tokens_sum += n
                if spec:
                    r.verify_ct += 1
                    r.correct_drafts += n - 1
                    if len(r.histogram) < self.cfg.steps + 1:
                        r.histogram.extend([0] * (self.cfg.steps + 1 - len(r.histogram)))
                    r.histogram[n - 1] += 1
                    self.spec_drafts_total += 1
                    for pos in range(min(n - 1, len(self.accepted_per_pos))):
                        self.accepted_per_pos[pos] += 1
                self._emit(r, n, end, finished)
            self.forward_ct += 1
            if spec:
                self.int_tokens += tokens_sum
                self.int_ct += batch
            if self.forward_ct % self.log_interval == 0:
                if spec and self.int_ct:
                    self.last_interval_accept = self.int_tokens / self.int_ct
                    self.cum_tokens += self.int_tokens
                    self.cum_ct += self.int_ct
                    self.int_tokens = self.int_ct = 0
                self.step_time_dict[str(batch)].append((end - self.last_log_ns) / 1e9 / self.log_interval)
                self.last_log_ns = end
        for r in admitted:  # prefill yields the first token
            r.first_token_ns = end
            self._emit(r, 1, end, finished)
            if not r.finished:
                self.running.append(r)
        for r in finished:
            if r in self.running:
                self.running.remove(r)
        self.now_ns = end
        dyn, util = (
            self.demand(batch)
            if batch
            else (self.profile.power.prefill_w * self.power_factor, self.profile.power.util_target)
        )
        return Iteration(start, end, batch, len(admitted), bool(batch), dyn, util, finished, decoding + admitted)

    def _emit(self, r: SimRequest, n: int, end: int, finished: list[SimRequest]) -> None:
        if r.never_finish:
            r.generated += n
            self.total_generated += n
            return
        take = min(n, r.max_new_tokens - r.generated)
        reason = None
        if (
            not r.ignore_eos
            and r.eos_at is not None
            and r.generated + take >= r.eos_at
            and r.eos_at >= max(r.min_new_tokens, 1)
        ):
            take = max(0, r.eos_at - r.generated)
            reason = {"type": "stop", "matched": EOS_ID}
        elif r.generated + take >= r.max_new_tokens:
            reason = {"type": "length", "length": r.max_new_tokens}
        r.generated += take
        self.total_generated += take
        if reason:
            self._finish(r, end, reason)
            finished.append(r)

    def finish_now(self, r: SimRequest, reason: dict) -> None:
        """Finish a running request outside the model (a stop string matched by the engine)."""
        if not r.finished:
            self._finish(r, r.finish_ns or self.now_ns, reason)
            if r in self.running:
                self.running.remove(r)


# ---- virtual device: the pure model of one cell ----------------------------------------------------------------
@dataclass
class CellSim:
    """What the published protocol measures for one cell, computed in-process."""

    accept_length: float
    step_times_s: list[float]
    step_time_p20_s: float | None
    speed_tok_s: float
    wall_s: float
    tokens: int
    energy_j: float
    avg_power_w: float
    joules_per_token: float
    utilization: float
    capped_tail_frac: float | None = None
    """Share of the last ``tail_s`` device seconds of the measured decoding spent at the power cap (the chance that
    a snapshot taken then reads the cap's clock-event bit); None without ``tail_s``."""


def percentile(values: list[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default), q in [0, 100]."""
    v = sorted(values)
    if not v:
        raise ValueError("empty")
    pos = (len(v) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def simulate_cell(
    profile: TwinProfile,
    cfg: SpecConfig,
    batch_size: int,
    prompts: list[str],
    max_new_tokens: int = 512,
    num_requests: int | None = None,
    seed: int = 0,
    client_gap_ms: float = CLIENT_TURNAROUND_MS,
    nominal_launch: bool = False,
    tail_s: float = 0.0,
) -> CellSim:
    """The published protocol on the pure model: warm-up of bs requests, then max(16, bs) measured requests at
    concurrency bs, energy and wall time over the measured phase, accept length and p20 step time from the
    server's counters (warm-up included, as in the reference). ``client_gap_ms``: the client's turnaround between a
    response and its next request; ``nominal_launch``: see ``Decoder``; ``tail_s``: see ``CellSim.capped_tail_frac``."""
    from harness.twin.engine.tokens import count_tokens

    perf = profile.perf
    base = base_power_w(profile)
    n_meas = num_requests if num_requests is not None else max(16, batch_size)
    dec = Decoder(profile, cfg, batch_size, seed, start_ns=0, nominal_launch=nominal_launch)
    t = int(60e9)  # the server has been up (and idle) for a while
    counter = 0

    def make(at_ns: int) -> SimRequest:
        nonlocal counter
        text = prompts[counter % len(prompts)]
        counter += 1
        q = prompt_quality(perf, text)
        return SimRequest(
            rid=str(counter),
            prompt_tokens=count_tokens(text),
            max_new_tokens=max_new_tokens,
            quality=q,
            arrival_ns=at_ns + int(perf.request_overhead_ms * 1e6),
            seed=stable_hash(seed, "req", counter),
        )

    capped: list[tuple[int, int]] = []  # (start, end) ns of capped iterations of the current phase
    last_decode_ns = 0  # end of the current phase's last iteration

    def run_phase(n: int, t0: int) -> tuple[int, float, int]:
        capped.clear()
        energy = 0.0
        tokens = 0
        now = t0
        started = 0
        inflight = 0
        for _ in range(min(batch_size, n)):
            dec.submit(make(now))
            started += 1
            inflight += 1
        while inflight:
            nxt = dec.next_start_ns()
            assert nxt is not None
            if nxt > now:
                energy += base * (nxt - now) / 1e9
            _, f = device_power(profile, dec.demand(len(dec.running))[0] if dec.running else 0.0)
            it = dec.run_iteration(f)
            power, f_it = device_power(profile, it.dyn_w)
            energy += power * (it.end_ns - it.start_ns) / 1e9
            if f_it < 0.999:
                capped.append((it.start_ns, it.end_ns))
            now = it.end_ns
            for r in it.finished:
                tokens += r.generated
                inflight -= 1
                if started < n:
                    dec.submit(make(now + int(client_gap_ms * 1e6)))
                    started += 1
                    inflight += 1
        nonlocal last_decode_ns
        last_decode_ns = now
        # the response reaches the client after detokenize/HTTP
        end = now + int(perf.request_overhead_ms * 0.25e6)
        energy += base * (end - now) / 1e9
        return end, energy, tokens

    t, _, _ = run_phase(batch_size, t)
    t += int(5e6)
    t0 = t
    t1, energy, tokens = run_phase(n_meas, t0)
    wall = (t1 - t0) / 1e9
    acc = dec.accept_length() or 1.0
    st = dec.step_time_dict.get(str(batch_size), [])
    p20 = percentile(st, 20) if st else None
    speed = acc / p20 if p20 else tokens / wall / batch_size
    avg_p = energy / wall
    tail = None
    if tail_s > 0:
        lo = last_decode_ns - int(tail_s * 1e9)
        tail = sum(max(0, e - max(s, lo)) for s, e in capped if e > lo) / (tail_s * 1e9)
    return CellSim(
        acc, st, p20, speed, wall, tokens, energy, avg_p, energy / tokens, avg_p / profile.device.power_limit_w, tail
    )
