"""Client load for the front (tests and ``benchmarks/serve_band.py``): closed-loop sessions and timed arrivals over
``/v1/completions``; every request's wall start/end, output tokens and status is kept."""

from __future__ import annotations

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


def one_request(http: httpx.Client, prompt: str, max_tokens: int, rec: Recorder) -> Done:
    t0 = time.monotonic()
    body = {"model": "default", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True}
    try:
        r = http.post("/v1/completions", json=body)
        tokens = int(((r.json() or {}).get("usage") or {}).get("completion_tokens") or 0) if r.status_code == 200 else 0
        d = Done(t0, time.monotonic(), tokens, r.status_code, None if r.status_code == 200 else r.text[:200])
    except (httpx.HTTPError, ValueError) as exc:
        d = Done(t0, time.monotonic(), 0, 0, f"{type(exc).__name__}: {exc}")
    rec.add(d)
    return d


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
    url: str, arrivals_s: Sequence[float], max_tokens: Sequence[int], prompts: Sequence[str], rec: Recorder
) -> None:
    """Send request i at ``arrivals_s[i]`` wall seconds from now (one thread per request), wait for all."""
    threads: list[threading.Thread] = []
    t0 = time.monotonic()
    with client(url) as http:
        for i, at in enumerate(arrivals_s):
            delay = t0 + at - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            t = threading.Thread(
                target=one_request,
                args=(http, prompts[i % len(prompts)], max_tokens[i % len(max_tokens)], rec),
                daemon=True,
            )
            t.start()
            threads.append(t)
        for t in threads:
            t.join(timeout=300)
