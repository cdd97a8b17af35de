"""The synthetic workload of one cell and its measurement (the published protocol, plus per-request accounting).

1. warm-up: ``batch_size`` requests at concurrency ``batch_size``;
2. pre-window snapshot (the honest pre-decision state);
3. window start (wall ns), ``max(16, batch_size)`` requests (or ``num_prompts``) at concurrency ``batch_size`` cycling
   the fixed prompts, ``output_tokens`` each, ``ignore_eos``, temperature 0; window end; after-snapshot;
4. server counters: accept length (``avg_spec_accept_length``, 1.0 when absent) and the 20th percentile of the
   step-time samples for ``str(batch_size)`` that were added during this cell (the dict is never reset);
   speed = accept length / step time, else tokens / elapsed / batch size (``wall_clock``).

Energy and power come from the sampler window: avg power = energy / window duration (device clock). Elapsed time
for throughput is measured on the world's clock (twin time on the twin).

Window edges (``window_source``): when every measured request reports server-side receive/finish instants (the
twin's ``twin_received_ns``/``twin_finish_ns``, or sglang's ``request_received_ts``/``request_finished_ts`` with
``--enable-metrics``), the window is [first receive, last finish] (``server``), so the client's own HTTP round trips
at the edges are outside it (on the twin they last ``time_scale`` times longer in twin time); ``wall_clock_s`` uses
the same edges. Otherwise (real sglang 0.5.2) it is the client's [release of the workers, last response] (``client``).
The after-snapshot is the last sample taken at or before the window end: the state the config left the GPU in, not
whichever sample is newest when the harness gets round to asking (by then the GPU has idled for a client round trip,
``time_scale`` times longer on the twin, and NVML's trailing utilization has decayed).
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from importlib import resources
from pathlib import Path
from typing import Callable, Protocol, Sequence

import numpy as np
from pydantic import BaseModel, Field

from harness.core.clocks import ScaledClock, mono_ns, wall_ns
from harness.core.errors import DataError, MissingFileError
from harness.engine.sglang_client import EngineClient, EngineRequestError, GenerateResult
from harness.runs.plan import measured_requests
from harness.telemetry.client import TelemetrySource
from harness.telemetry.steady import RequestSpan, WindowEnergy, min_requests, steady_edges, tokens_in, window_energy
from harness.telemetry.windows import GpuSample, WindowStats

STEP_TIME_PERCENTILE = 20.0


class ServerLike(Protocol):
    client: EngineClient
    batch_size: int

    def alive(self) -> bool: ...


def load_prompts(path: str | Path | None = None) -> list[str]:
    """The prompts of ``path`` (a JSON list, or an object with ``prompts``), default the packaged sweep prompts."""
    try:
        if path is None:
            text = resources.files("harness").joinpath("data/sweep_prompts.json").read_text()
        else:
            p = Path(path)
            if not p.exists():
                raise MissingFileError(f"prompts file not found: {p}", fix="pass an existing JSON file to --prompts")
            text = p.read_text()
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataError(
            f"prompts file {path} is not valid JSON: {exc.msg}", fix='a JSON list of strings, or {"prompts": [...]}'
        ) from None
    prompts = data.get("prompts") if isinstance(data, dict) else data
    if not isinstance(prompts, list) or not prompts or not all(isinstance(x, str) and x for x in prompts):
        raise DataError(
            f"prompts file {path or 'sweep_prompts.json'} holds no list of non-empty strings",
            fix='a JSON list of strings, or {"prompts": [...]}',
        )
    return prompts


class BenchSettings(BaseModel):
    """How one cell is driven."""

    output_tokens: int = Field(512, ge=1)
    num_prompts: int | None = Field(None, ge=1)
    """Measured requests; None = max(16, batch size) (published)."""
    prompts: list[str] = Field(default_factory=load_prompts)
    request_timeout_s: float = Field(300.0, gt=0)
    warmup: bool = True
    stream: bool = True
    temperature: float = 0.0
    ignore_eos: bool = True
    window_wait_s: float = 5.0

    num_prompts_by_bs: dict[int, int] = Field(default_factory=dict)
    """Measured requests per batch size sized by the band probe (``--min-window``); over the published count."""

    def n_requests(self, batch_size: int) -> int:
        return measured_requests(batch_size, self.num_prompts, self.num_prompts_by_bs)


class CellError(Exception):
    """The cell could not be measured (a request failed, the server died, timed out, answered HTTP 500)."""

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.message = message
        self.kind = kind


class CellResult(BaseModel):
    """What one cell measured; ``harness.sweep.runner`` turns it into a row."""

    batch_size: int
    n_requests: int
    total_output_tokens: int
    accept_length: float
    accept_length_source: str
    speed_tok_s: float | None
    speed_source: str
    step_time_s: float | None
    step_time_samples: int
    wall_clock_s: float
    wall_clock_tok_s: float | None
    window_start_ns: int
    window_end_ns: int
    energy_joules: float | None
    avg_power_watts: float | None
    joules_per_token: float | None
    window: WindowStats
    window_source: str = "client"
    """``server`` (edges from the server's receive/finish stamps) or ``client`` (the harness's own clock)."""
    client_wall_clock_s: float | None = None
    """The client-measured window on the world clock (equal to ``wall_clock_s`` when the source is ``client``)."""
    pre: GpuSample | None
    after: GpuSample | None
    req_accept_length_mean: float | None
    req_accept_length_p50: float | None
    req_latency_mean_s: float | None
    req_latency_p50_s: float | None
    req_latency_p95_s: float | None
    attention_backend: str | None = None
    """The attention backend the server resolved (its server info), the kernel the cell really ran."""
    server_version: str | None = None
    """The sglang version the server reports (its server info)."""
    overlap_schedule: bool | None = None
    """Whether the server ran the overlap scheduler, as its server info says (None: it does not say)."""
    measured: WindowEnergy | None = None
    """The measured window's energy (kind ``measured``)."""
    steady: WindowEnergy | None = None
    """The steady-state window (kind ``steady``), or None with ``steady_reason`` saying why it is missing."""
    steady_reason: str | None = None


def closed_loop_headers(
    session: str, total: int, concurrency: int, seq: int, next_batch: tuple[str, int, int] | None = None
) -> dict[str, str]:
    """The twin's closed-loop hints: this client sends ``total`` requests at ``concurrency`` (``session``), this one
    being the ``seq``-th (0-based; each after the first wave goes out when a slot frees), and starts ``next_batch``
    (session, total, concurrency) right after this one. The twin engine then gives the k-th request after the first
    wave the k-th slot freed in twin time (finish + the modelled client turnaround) instead of whenever and in whatever
    order the busy host delivered it, and holds its batch for it (docs/twin.md, "Load immunity"). Real sglang ignores
    unknown headers."""
    headers = {"X-Twin-Loop": f"{session} {total} {concurrency}", "X-Twin-Seq": str(seq)}
    if next_batch is not None:
        headers["X-Twin-Next"] = " ".join(str(x) for x in next_batch)
    return headers


def new_session(tag: str) -> str:
    """A unique closed-loop session id for one call of ``run_requests``."""
    return f"{tag}-{uuid.uuid4().hex[:8]}"


def run_requests(
    client: EngineClient,
    prompts: Sequence[str],
    n: int,
    concurrency: int,
    settings: BenchSettings,
    tag: str,
    on_start: Callable[[], None] | None = None,
    session: str | None = None,
    next_batch: tuple[str, int, int] | None = None,
) -> list[GenerateResult]:
    """``n`` requests cycling ``prompts`` at ``concurrency``; the first failure stops new ones and is raised.

    The first ``concurrency`` workers are started and parked at a gate before ``on_start`` runs (it marks the
    window start), so thread start-up is not inside the measured window. Every request carries the closed-loop
    hints (``closed_loop_headers``) that let the twin engine place it in twin time regardless of host delays.
    """
    stop = threading.Event()
    gate = threading.Event()
    armed = threading.Semaphore(0)
    errors: list[EngineRequestError] = []
    session = session or new_session(tag)

    def one(i: int) -> GenerateResult | None:
        if i < concurrency:
            armed.release()
        gate.wait()
        if stop.is_set():
            return None
        rid = f"{tag}-{i}"
        headers = closed_loop_headers(session, n, concurrency, i, next_batch)
        try:
            return client.generate(
                prompts[i % len(prompts)],
                max_new_tokens=settings.output_tokens,
                temperature=settings.temperature,
                ignore_eos=settings.ignore_eos,
                stream=settings.stream,
                rid=rid,
                timeout=settings.request_timeout_s,
                headers=headers,
            )
        except EngineRequestError as exc:
            errors.append(exc)
            stop.set()
            return None

    pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix=f"req-{tag}")
    try:
        futures = [pool.submit(one, i) for i in range(n)]
        for _ in range(min(n, concurrency)):
            armed.acquire(timeout=10.0)
        if on_start is not None:
            on_start()
        gate.set()
        results = [f.result() for f in futures]
    except BaseException:  # interrupted (Ctrl-C, SIGTERM): queue nothing more; stopping the server ends in-flight ones
        stop.set()
        gate.set()
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown()
    if errors:
        first = next((e for e in errors if e.kind == "timeout"), errors[0])
        raise CellError(first.message, first.kind)
    return [r for r in results if r is not None]


def new_samples(before: dict[str, list[float]], after: dict[str, list[float]], key: str) -> list[float]:
    """Step-time samples under ``key`` added between two reads (lists only grow; the dict is never reset)."""
    old = before.get(key, [])
    new = after.get(key, [])
    return list(new[len(old) :]) if len(new) >= len(old) else list(new)


def _pct(xs: Sequence[float], q: float) -> float | None:
    return float(np.percentile(np.asarray(xs, dtype=float), q)) if len(xs) else None


def _mean(xs: Sequence[float]) -> float | None:
    return float(np.mean(xs)) if len(xs) else None


SERVER_EDGE_TOLERANCE_NS = 2_000_000_000
"""How far (wall ns) server edges may lie outside the client's window before they are distrusted (clock mismatch).
The twin engine may answer a closed-loop client before its device clock reaches the finish (docs/twin.md)."""


def server_window(
    results: Sequence[GenerateResult], clock: ScaledClock, client_start_ns: int, client_end_ns: int
) -> tuple[int, int, float] | None:
    """(start wall ns, end wall ns, elapsed world seconds) of [first receive, last finish], or None.

    None unless every request reports both stamps on one clock and the edges sit inside the client's window (within
    ``SERVER_EDGE_TOLERANCE_NS``). Twin device-clock ns map to wall ns with the world clock's anchor and scale;
    elapsed seconds are then exact twin seconds (the device's own clock).
    """
    if not results or any(r.server_received_ns is None or r.server_finish_ns is None for r in results):
        return None
    clocks = {r.server_clock for r in results}
    if len(clocks) != 1:
        return None
    first = min(int(r.server_received_ns or 0) for r in results)
    last = max(int(r.server_finish_ns or 0) for r in results)
    if last <= first:
        return None
    if clocks == {"twin_device"}:
        anchor, scale = clock.anchor_wall_ns, clock.scale
        start = anchor + int(round((first - anchor) / scale))
        end = anchor + int(round((last - anchor) / scale))
        elapsed = (last - first) / 1e9
    elif clocks == {"wall"}:
        start, end = first, last
        elapsed = (last - first) / 1e9 * clock.scale
    else:
        return None
    tol = SERVER_EDGE_TOLERANCE_NS
    if start < client_start_ns - tol or end > client_end_ns + tol or end <= start:
        return None
    return start, end, elapsed


def request_spans(
    results: Sequence[GenerateResult], clock: ScaledClock
) -> tuple[list[RequestSpan], str] | tuple[None, str]:
    """Each request's (first token, finish, tokens) in wall ns: server stamps when every request has them on one
    clock, else the client's (streaming only: its first chunk); (None, why) when neither is complete."""
    clocks = {r.server_clock for r in results}
    if (
        results
        and len(clocks) == 1
        and all(r.server_first_token_ns is not None and r.server_finish_ns is not None for r in results)
    ):
        kind = clocks.pop()

        def to_wall(ns: int) -> int:
            if kind == "twin_device":
                return clock.anchor_wall_ns + int(round((ns - clock.anchor_wall_ns) / clock.scale))
            return ns

        return [
            RequestSpan(
                first_token_ns=to_wall(int(r.server_first_token_ns or 0)),
                finish_ns=to_wall(int(r.server_finish_ns or 0)),
                tokens=r.completion_tokens,
            )
            for r in results
        ], "server"
    if results and all(r.ttft_s is not None and r.client_sent_wall_ns is not None for r in results):
        return [
            RequestSpan(
                first_token_ns=int(r.client_sent_wall_ns or 0) + int((r.ttft_s or 0.0) * 1e9),
                finish_ns=int(r.client_sent_wall_ns or 0) + int(r.client_latency_s * 1e9),
                tokens=r.completion_tokens,
            )
            for r in results
        ], "client"
    return None, "no first-token instants (server stamps or a streamed first chunk) for every request"


def steady_window(
    results: Sequence[GenerateResult], batch_size: int, telemetry: TelemetrySource, clock: ScaledClock
) -> tuple[WindowEnergy | None, str | None]:
    """The steady-state window of a cell, or (None, why not)."""
    spans, source = request_spans(results, clock)
    if spans is None:
        return None, source
    edges = steady_edges([s.first_token_ns for s in spans], batch_size)
    if edges is None:
        return None, (
            f"empty steady-state window: {len(spans)} requests at batch size {batch_size} "
            f"(needs at least {min_requests(batch_size)})"
        )
    w = telemetry.window(*edges)
    return window_energy("steady", w, tokens_in(spans, *edges), *edges, source=source), None


def run_cell(
    server: ServerLike, batch_size: int, settings: BenchSettings, telemetry: TelemetrySource, clock: ScaledClock
) -> CellResult:
    """Measure one cell on a ready server (see the module doc); raises CellError when it cannot."""
    client = server.client
    try:
        return _run_cell(client, server, batch_size, settings, telemetry, clock)
    except (CellError, EngineRequestError) as exc:
        if _died(server, wait_s=2.0 if exc.kind in ("connection", "protocol") else 0.0):
            raise CellError(
                f"engine exited with code {getattr(server, 'returncode', None)} during the measurement ({exc.message})",
                "crash",
            ) from None
        raise CellError(exc.message, exc.kind) from None


def _died(server: ServerLike, wait_s: float) -> bool:
    """Whether the server process is gone; a broken connection gives a dying process ``wait_s`` to exit."""
    deadline = time.monotonic() + wait_s
    while server.alive():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def _run_cell(
    client: EngineClient,
    server: ServerLike,
    batch_size: int,
    settings: BenchSettings,
    telemetry: TelemetrySource,
    clock: ScaledClock,
) -> CellResult:
    key = str(batch_size)
    info0 = client.server_info()
    n = settings.n_requests(batch_size)
    measured = new_session(f"bench-bs{batch_size}")
    if settings.warmup:  # the measured batch follows the warm-up (announced, so the twin needs no host timing)
        run_requests(
            client,
            settings.prompts,
            batch_size,
            batch_size,
            settings,
            f"warmup-bs{batch_size}",
            next_batch=(measured, n, batch_size),
        )
    pre = telemetry.snapshot()
    start: dict[str, int] = {}

    def mark_start() -> None:
        start["wall"], start["mono"] = wall_ns(), mono_ns()

    results = run_requests(
        client, settings.prompts, n, batch_size, settings, f"bench-bs{batch_size}", mark_start, session=measured
    )
    m1, w1 = mono_ns(), wall_ns()
    client_elapsed = clock.elapsed_s(start["mono"], m1)
    edges = server_window(results, clock, start["wall"], w1)
    if edges is not None:
        w0, w1, elapsed = edges
        source = "server"
    else:
        w0, elapsed, source = start["wall"], client_elapsed, "client"
    ahead_s = (w1 - wall_ns()) / 1e9
    if 0 < ahead_s <= SERVER_EDGE_TOLERANCE_NS / 1e9:  # a twin answered before its device clock got there
        time.sleep(ahead_s)
    window = telemetry.window(w0, w1)
    after = telemetry.sample_at(w1)
    info1 = client.server_info()

    total = sum(r.completion_tokens for r in results)
    samples = new_samples(info0.step_time_dict, info1.step_time_dict, key)
    step_time = _pct(samples, STEP_TIME_PERCENTILE)
    req_accept = [r.accept_length for r in results if r.accept_length]
    weighted = [(r.completion_tokens, r.accept_length) for r in results if r.accept_length]
    # token-weighted mean = all tokens / all verify steps, the same definition as the server's counter
    req_mean = sum(c for c, _ in weighted) / sum(c / a for c, a in weighted) if weighted else None
    if info1.avg_spec_accept_length is not None:
        accept, accept_src = info1.avg_spec_accept_length, "server_info"
    elif req_mean is not None:  # the server's average is null until its next decode log line after the flush
        accept, accept_src = req_mean, "per_request"
    else:
        accept, accept_src = 1.0, "default"
    speed: float | None
    if step_time and step_time > 0:
        speed, speed_src = accept / step_time, "step_time"
    else:
        speed = total / elapsed / batch_size if elapsed > 0 else None
        speed_src, step_time = "wall_clock", None

    steady, steady_reason = steady_window(results, batch_size, telemetry, clock)
    measured_energy = window_energy("measured", window, float(total), w0, w1, source=source)
    energy, duration = window.energy_j, window.duration_s
    avg_power = energy / duration if energy is not None and duration else None
    latencies = [r.e2e_latency_s if r.e2e_latency_s is not None else r.client_latency_s for r in results]
    return CellResult(
        batch_size=batch_size,
        n_requests=len(results),
        total_output_tokens=total,
        accept_length=accept,
        accept_length_source=accept_src,
        speed_tok_s=speed,
        speed_source=speed_src,
        step_time_s=step_time,
        step_time_samples=len(samples),
        wall_clock_s=elapsed,
        wall_clock_tok_s=total / elapsed if elapsed > 0 else None,
        window_start_ns=w0,
        window_end_ns=w1,
        energy_joules=energy,
        avg_power_watts=avg_power,
        joules_per_token=energy / total if energy is not None and total else None,
        window=window,
        window_source=source,
        client_wall_clock_s=client_elapsed,
        pre=pre,
        after=after,
        attention_backend=info1.attention_backend,
        server_version=info1.version,
        overlap_schedule=info1.overlap_schedule,
        req_accept_length_mean=req_mean,
        req_accept_length_p50=_pct(req_accept, 50),
        req_latency_mean_s=_mean(latencies),
        req_latency_p50_s=_pct(latencies, 50),
        req_latency_p95_s=_pct(latencies, 95),
        measured=measured_energy,
        steady=steady,
        steady_reason=steady_reason,
    )
