"""The twin engine's link to the twin GPU: clock, profile, memory lease, load reports as timed events."""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import httpx

from harness.core.http import http_client
from harness.twin.engine.log import log


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
        self.http = http_client(base_url=self.url, timeout=5.0, trust_env=False)
        self.clock_factor = 1.0
        self.thermal_factor = 1.0
        self.power_limit_w: float | None = (
            None  # the device's limit in force (a set power cap), from /v1/info and replies
        )
        self.lock_factor = 1.0  # the device's SM clock lock / max SM clock (1: unlocked), from /v1/info and replies
        self.max_sm_clock_mhz = 0.0
        self._last: tuple[bool, float, float] | None = (False, 0.0, 0.0)  # a new lease starts idle
        self._queue: list[dict[str, Any]] = []
        self._cv = threading.Condition()
        self._stop = False
        self._thread: threading.Thread | None = None

    def get(self, path: str) -> dict[str, Any]:
        """GET a device route's JSON (raises ``httpx.HTTPError`` on failure or a non-2xx answer)."""
        r = self.http.get(path)
        r.raise_for_status()
        return r.json()

    def note_lock(self, locked_mhz: float | None, max_mhz: float | None = None) -> None:
        """The device's SM clock lock (None: unlocked) as a clock ceiling (``max_mhz``: the board's, else the last)."""
        self.max_sm_clock_mhz = float(max_mhz or self.max_sm_clock_mhz)
        top = self.max_sm_clock_mhz
        self.lock_factor = 1.0 if locked_mhz is None or not top else min(1.0, float(locked_mhz) / top)

    def lease(self, memory_mb: float, lease_s: float = 10.0) -> tuple[int, dict[str, Any]]:
        """Reserve (or resize) this engine's memory: (HTTP status, answer); 507 when it does not fit."""
        r = self.http.post(
            "/v1/engines",
            json={"engine_id": self.engine_id, "memory_mb": memory_mb, "lease_s": lease_s, "pid": os.getpid()},
        )
        return r.status_code, r.json()

    def release(self) -> None:
        """Give the lease back (best effort: the device also expires it)."""
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
        """Start the reporter thread (sends queued events and the lease heartbeat)."""
        self._thread = threading.Thread(target=self._loop, name="device-reporter", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the reporter thread."""
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
                    if "sm_clock_locked_mhz" in body:
                        self.note_lock(body["sm_clock_locked_mhz"])
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
