"""Client load for the front (tests and ``benchmarks/serve_band.py``): closed-loop sessions and timed arrivals over
``/v1/completions``; every request's wall start/end, output tokens and status is kept."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import httpx


@dataclass(frozen=True)
class Done:
    """One finished request: wall seconds (``time.monotonic``), completion tokens, HTTP status (0 = no answer)."""

    start_s: float
    end_s: float
    tokens: int
    status: int
    error: str | None = None
    ttft_s: float | None = None
    """Wall seconds from sending to the first token (streamed requests only)."""

    @property
    def ok(self) -> bool:
        return self.status == 200


@dataclass
class Recorder:
    done: list[Done] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, d: Done) -> None:
        with self.lock:
            self.done.append(d)

    def snapshot(self) -> list[Done]:
        with self.lock:
            return list(self.done)


def one_request(http: httpx.Client, prompt: str, max_tokens: int, rec: Recorder, stream: bool = False) -> Done:
    t0 = time.monotonic()
    body = {"model": "default", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True}
    if stream:
        d = _streamed(http, body, t0)
        rec.add(d)
        return d
    try:
        r = http.post("/v1/completions", json=body)
        tokens = int(((r.json() or {}).get("usage") or {}).get("completion_tokens") or 0) if r.status_code == 200 else 0
        d = Done(t0, time.monotonic(), tokens, r.status_code, None if r.status_code == 200 else r.text[:200])
    except (httpx.HTTPError, ValueError) as exc:
        d = Done(t0, time.monotonic(), 0, 0, f"{type(exc).__name__}: {exc}")
    rec.add(d)
    return d


def _streamed(http: httpx.Client, body: dict, t0: float) -> Done:
    """One SSE completion: time to the first text chunk; tokens from the usage chunk, else one per text chunk."""
    body = {**body, "stream": True, "stream_options": {"include_usage": True}}
    ttft, chunks, usage, err = None, 0, None, None
    try:
        with http.stream("POST", "/v1/completions", json=body) as r:
            if r.status_code != 200:
                r.read()
                return Done(t0, time.monotonic(), 0, r.status_code, r.text[:200])
            for line in r.iter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                obj = json.loads(line[6:])
                if obj.get("error"):
                    err = str(obj["error"])[:200]
                if (obj.get("usage") or {}).get("completion_tokens") is not None:
                    usage = int(obj["usage"]["completion_tokens"])
                if any(c.get("text") for c in obj.get("choices") or []):
                    chunks += 1
                    ttft = ttft if ttft is not None else time.monotonic() - t0
    except (httpx.HTTPError, ValueError) as exc:
        return Done(t0, time.monotonic(), 0, 0, f"{type(exc).__name__}: {exc}", ttft)
    tokens = usage if usage is not None else chunks
    return Done(t0, time.monotonic(), tokens, 0 if err else 200, err, ttft)


def client(url: str, timeout_s: float = 120.0) -> httpx.Client:
    return httpx.Client(
        base_url=url,
        timeout=timeout_s,
        trust_env=False,
        limits=httpx.Limits(max_connections=256, max_keepalive_connections=64),
    )


class ClosedLoop:
    """``sessions`` threads each sending one request after the other until ``stop()``; ``think_s`` (wall) between."""

    def __init__(
        self,
        url: str,
        sessions: int,
        max_tokens: int,
        prompts: Sequence[str],
        rec: Recorder,
        think_s: Sequence[float] = (0.0,),
    ) -> None:
        self.url, self.max_tokens, self.prompts, self.rec, self.think_s = (
            url,
            max_tokens,
            list(prompts),
            rec,
            list(think_s),
        )
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(sessions)]

    def _run(self, i: int) -> None:
        with client(self.url) as http:
            n = 0
            while not self._stop.is_set():
                one_request(http, self.prompts[(i + n) % len(self.prompts)], self.max_tokens, self.rec)
                self._stop.wait(self.think_s[(i + n) % len(self.think_s)])
                n += 1

    def start(self) -> "ClosedLoop":
        for t in self._threads:
            t.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=60)


def replay(
    url: str,
    arrivals_s: Sequence[float],
    max_tokens: Sequence[int],
    prompts: Sequence[str],
    rec: Recorder,
    stream: bool = False,
) -> None:
    """Send request i at ``arrivals_s[i]`` wall seconds from now (one thread per request; prompt and max_tokens
    ``i`` modulo their lengths; ``stream``: SSE, so the time to first token is kept), wait for all."""
    threads: list[threading.Thread] = []
    t0 = time.monotonic()
    with client(url) as http:
        for i, at in enumerate(arrivals_s):
            delay = t0 + at - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            t = threading.Thread(
                target=one_request,
                args=(http, prompts[i % len(prompts)], max_tokens[i % len(max_tokens)], rec, stream),
                daemon=True,
            )
            t.start()
            threads.append(t)
        for t in threads:
            t.join(timeout=300)
