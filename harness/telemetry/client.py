"""The harness side of telemetry: the ``TelemetrySource`` protocol and ``TelemetryClient`` for the sidecar.

An unreachable sampler never turns into 0 J: ``window()`` returns an invalid window with ``sampler_unreachable``
and energy None; ``snapshot()`` and ``sample_at()`` return None and keep the error in ``last_error``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import httpx

from harness.core.clocks import wall_ns
from harness.core.errors import ServiceUnavailableError
from harness.core.http import http_client
from harness.telemetry.windows import (
    CLOCK_DISAGREEMENT,
    SAMPLE_AT_LOOKBACK,
    SAMPLER_UNREACHABLE,
    GpuSample,
    WindowStats,
    sample_near,
)

MAX_CLOCK_OFFSET_NS = 20_000_000  # beyond this (plus half the round trip) the two wall clocks disagree


@runtime_checkable
class TelemetrySource(Protocol):
    """What the harness needs from telemetry, whether a sidecar or an in-process sampler.

    ``snapshot``: the newest sample (None when there is none or the sampler is unreachable). ``window``: the
    aggregate over a wall-ns interval, first waiting up to ``wait_s`` (None: the source's default) for a sample
    after its end. ``sample_at``: the sample taken at or just before a wall-ns instant among the recent ones
    (``windows.sample_near``), else ``snapshot()``.
    """

    def snapshot(self) -> GpuSample | None: ...

    def window(self, start_ns: int, end_ns: int, wait_s: float | None = None) -> WindowStats: ...

    def sample_at(self, t_ns: int) -> GpuSample | None: ...

    def identity(self) -> dict[str, Any]: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class ClockOffset:
    """Sampler wall clock minus ours (``offset_ns``), measured over the best of several round trips."""

    offset_ns: int
    rtt_ns: int

    @property
    def agrees(self) -> bool:
        return abs(self.offset_ns) <= MAX_CLOCK_OFFSET_NS + self.rtt_ns // 2


def measure_clock_offset(
    url: str, rounds: int = 5, timeout_s: float = 2.0, client: httpx.Client | None = None
) -> ClockOffset:
    """NTP-style offset against ``GET /v1/now``: offset = server - (send + receive) / 2, from the shortest round trip."""
    own = client is None
    c = client or http_client(base_url=url, timeout=timeout_s)
    best: ClockOffset | None = None
    try:
        for _ in range(max(1, rounds)):
            t0 = wall_ns()
            r = c.get("/v1/now")
            t1 = wall_ns()
            r.raise_for_status()
            server = int(r.json()["wall_ns"])
            cand = ClockOffset(offset_ns=server - (t0 + t1) // 2, rtt_ns=t1 - t0)
            if best is None or cand.rtt_ns < best.rtt_ns:
                best = cand
    except (httpx.HTTPError, ValueError, KeyError) as exc:
        raise ServiceUnavailableError(
            f"sampler at {url} did not answer /v1/now: {exc}", fix="start `harness sampler serve` or fix the URL"
        ) from None
    finally:
        if own:
            c.close()
    assert best is not None
    return best


class TelemetryClient:
    """``TelemetrySource`` over HTTP to a ``harness sampler serve`` sidecar."""

    def __init__(self, url: str, timeout_s: float = 5.0, wait_s: float = 2.0) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self.wait_s = wait_s
        self.last_error: str | None = None
        self._http = http_client(base_url=self.url, timeout=timeout_s)
        self._offset: ClockOffset | None = None

    def _get(self, path: str, params: dict[str, Any] | None = None, timeout: float | None = None) -> Any:
        r = self._http.get(path, params=params, timeout=timeout or self.timeout_s)
        r.raise_for_status()
        return r.json()

    def clock_offset(self, refresh: bool = False) -> ClockOffset:
        if self._offset is None or refresh:
            self._offset = measure_clock_offset(self.url, client=self._http)
        return self._offset

    def snapshot(self) -> GpuSample | None:
        try:
            rec = self._get("/v1/latest")
            self.last_error = None
            return GpuSample.model_validate(rec)
        except (httpx.HTTPError, ValueError) as exc:
            self.last_error = f"{SAMPLER_UNREACHABLE}: {type(exc).__name__}: {exc}"
            return None

    def sample_at(self, t_ns: int) -> GpuSample | None:
        """The sample at or just before ``t_ns`` among the sidecar's recent ones (``GET /v1/samples``), else the latest."""
        latest = self.snapshot()
        if latest is None:
            return None
        params = {"since_seq": max(-1, latest.seq - SAMPLE_AT_LOOKBACK), "limit": SAMPLE_AT_LOOKBACK + 1}
        try:
            records = [GpuSample.model_validate(r) for r in self._get("/v1/samples", params).get("samples", [])]
        except (httpx.HTTPError, ValueError) as exc:  # the listing is an improvement; the latest sample is the fallback
            self.last_error = f"{SAMPLER_UNREACHABLE}: {type(exc).__name__}: {exc}"
            return latest
        return sample_near(records, t_ns) or latest

    def window(
        self, start_ns: int, end_ns: int, wait_s: float | None = None, edge_model: str | None = None
    ) -> WindowStats:
        wait = self.wait_s if wait_s is None else wait_s
        params: dict[str, Any] = {"start_ns": start_ns, "end_ns": end_ns, "wait_s": wait}
        if edge_model:
            params["edge_model"] = edge_model
        try:
            offset = self.clock_offset()
            data = self._get("/v1/window", params, timeout=self.timeout_s + wait)
            stats = WindowStats.model_validate(data)
        except (httpx.HTTPError, ValueError, ServiceUnavailableError) as exc:
            self.last_error = f"{SAMPLER_UNREACHABLE}: {type(exc).__name__}: {exc}"
            return WindowStats.invalid(start_ns, end_ns, SAMPLER_UNREACHABLE)
        self.last_error = None
        if not offset.agrees and CLOCK_DISAGREEMENT not in stats.reasons:
            stats.reasons.append(CLOCK_DISAGREEMENT)
            stats.valid = False
        return stats

    def mark(self, name: str) -> dict[str, Any] | None:
        """Stamp a named instant on the sampler's clock (``POST /v1/marks``); None when unreachable."""
        try:
            r = self._http.post("/v1/marks", json={"name": name, "wall_ns": wall_ns()})
            r.raise_for_status()
            return r.json()
        except httpx.HTTPError as exc:
            self.last_error = f"{SAMPLER_UNREACHABLE}: {exc}"
            return None

    def identity(self) -> dict[str, Any]:
        try:
            info = self._get("/v1/info")
        except (httpx.HTTPError, ValueError) as exc:
            self.last_error = f"{SAMPLER_UNREACHABLE}: {exc}"
            return {"sampler_url": self.url, "sampler_error": self.last_error}
        return {**(info.get("gpu") or {}), "sampler": "sidecar", "sampler_url": self.url, "probe": info.get("probe"),
                "rate_hz": info.get("rate_hz"), "sampler_run_id": info.get("run_id")}  # fmt: skip

    def wait_ready(self, timeout_s: float = 10.0) -> None:
        """Block until ``/-/ready``; raises ``ServiceUnavailableError`` naming the URL."""
        import time

        deadline = time.monotonic() + timeout_s
        last = ""
        while time.monotonic() < deadline:
            try:
                if self._http.get("/-/ready", timeout=1.0).status_code == 200:
                    return
                last = "not ready (no sample yet)"
            except httpx.HTTPError as exc:
                last = str(exc)
            time.sleep(0.05)
        raise ServiceUnavailableError(f"sampler at {self.url} not ready after {timeout_s:.0f} s: {last}",
                                      fix="check the sampler's log; start it with `harness sampler serve`")  # fmt: skip

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "TelemetryClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
