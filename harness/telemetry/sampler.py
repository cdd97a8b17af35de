"""The sampling loop (``SamplerCore``) shared by the sidecar service and ``InProcessSampler``.

The loop runs on monotonic deadlines (``harness.telemetry.ticker``): ``next += period`` after each sample, so it
never drifts; a sample that ends past the next deadline skips the missed ticks and counts them as overruns.

A probe whose device answers for past instants (``HistoryProbe``: the twin GPU) is also asked for the instants a late
loop missed, so a host stall makes the samples late, not missing; each such reading is dated by the device
(``stamp="device"``) and the call's latency does not blur it. NVML readings are stamped by the call (``"call"``).
"""

from __future__ import annotations

import os
import threading
import uuid as uuidlib
from pathlib import Path
from typing import Any

from harness.core.clocks import mono_ns, wall_ns
from harness.core.errors import ServiceUnavailableError, UsageError
from harness.telemetry.probes import Probe, call_stamp, has_history, probe_timing
from harness.telemetry.store import SampleStore
from harness.telemetry.ticker import run_ticks
from harness.telemetry.windows import SAMPLE_AT_LOOKBACK, GpuSample, WindowStats, sample_near

MIN_RATE_HZ, MAX_RATE_HZ = 0.1, 200.0
MAX_BACKFILL = 1200
"""The most missed instants one late tick reads back from a ``HistoryProbe`` (two minutes at 10 Hz)."""


class SamplerCore:
    """Owns a probe, a store and the loop thread; all queries are served from the store (never the probe)."""

    def __init__(
        self, probe: Probe, rate_hz: float = 10.0, log_dir: str | Path | None = None, retention_s: float = 3600.0
    ) -> None:
        if not MIN_RATE_HZ <= rate_hz <= MAX_RATE_HZ:
            raise UsageError(
                f"--rate-hz {rate_hz} out of range", fix=f"use {MIN_RATE_HZ}..{MAX_RATE_HZ} (10 is the default)"
            )
        self.probe = probe
        self.rate_hz = float(rate_hz)
        self.period_s = 1.0 / self.rate_hz
        self.run_id = uuidlib.uuid4().hex[:16]
        self.store = SampleStore(log_dir, retention_s=retention_s)
        self.samples_total = 0
        self.errors_total = 0
        self.error_samples_total = 0
        self.overruns_total = 0
        self.backfilled_total = 0
        self.loop_errors_total = 0
        self.last_loop_error: str | None = None
        self.last_sample_wall_ns: int | None = None
        self.last_latency_ms: float | None = None
        self.started_wall_ns = wall_ns()
        self._identity: dict[str, Any] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> "SamplerCore":
        """Read the probe's identity, open the store (gap + start records) and start the loop thread."""
        try:
            self._identity = self.probe.identity()
        except Exception as exc:  # noqa: BLE001 - identity is informative; the loop records read errors itself
            self._identity = {"backend": self.probe.kind, "identity_error": str(exc)}
        self.store.open(
            self.run_id,
            {"probe": self.probe.kind, "rate_hz": self.rate_hz, "pid": os.getpid(), "identity": self._identity},
        )
        self._thread = threading.Thread(target=self._loop, name="sampler-loop", daemon=True)
        self._thread.start()
        return self

    def idle(self, seconds: float) -> bool:
        """Sleep up to ``seconds``; returns at once (True) when the loop is stopped."""
        return self._stop.wait(seconds)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
        self.store.close()
        self.probe.close()

    def _loop(self) -> None:
        def overrun(missed: int) -> None:
            self.overruns_total += missed

        def error(exc: Exception) -> None:
            self.loop_errors_total += 1
            self.last_loop_error = f"{type(exc).__name__}: {exc}"

        run_ticks(self.period_s, self._stop, self.sample_once, overrun, error)

    def sample_once(self) -> GpuSample:
        """Read the probe once (with a ``HistoryProbe``, also the instants missed since the last sample), stamp the
        readings, store them; returns the newest. Never raises for probe failures."""
        if has_history(self.probe):
            return self._sample_with_history()
        try:
            reading, t_wall, t_mono, latency_ms = probe_timing(self.probe)
        except Exception as exc:  # noqa: BLE001 - a probe bug must not kill the loop
            reading, t_wall, t_mono, latency_ms = (
                {"errors": [f"probe_exception: {type(exc).__name__}: {exc}"]},
                wall_ns(),
                mono_ns(),
                None,
            )
        return self._store(reading, t_wall, t_mono, latency_ms, "call")

    def _missed_instants(self, now_mono: int) -> list[int]:
        """Monotonic instants that split the time since the last sample into periods (none when on time)."""
        last = self.store.latest(usable=False)
        if last is None or last.kind != "sample" or last.run_id != self.run_id:
            return []
        span = now_mono - last.t_mono_ns
        n = int(span / (self.period_s * 1e9) + 0.5) - 1
        if n < 1:
            return []
        step = span / (n + 1)
        return [last.t_mono_ns + int(round(step * j)) for j in range(max(1, n + 1 - MAX_BACKFILL), n + 1)]

    def _sample_with_history(self) -> GpuSample:
        now_mono, now_wall = mono_ns(), wall_ns()
        instants = [*self._missed_instants(now_mono), now_mono]
        walls = [now_wall - (now_mono - m) for m in instants]
        try:
            dated, readings = self.probe.read_at(walls)  # type: ignore[attr-defined]  # has_history checked it
        except Exception as exc:  # noqa: BLE001 - a probe bug must not kill the loop
            dated, readings = False, [{"errors": [f"probe_exception: {type(exc).__name__}: {exc}"]}]
        end_mono, end_wall = mono_ns(), wall_ns()
        latency_ms = (end_mono - now_mono) / 1e6
        if not dated:  # one reading of the call's moment, stamped by the call as NVML's are
            reading = readings[-1]
            return self._store(
                reading, *call_stamp(reading, now_wall, now_mono, end_wall, end_mono), latency_ms, "call"
            )
        self.backfilled_total += len(instants) - 1
        sample = None
        for reading, t_wall, t_mono in zip(readings, walls, instants):
            reading.pop("read_wall_ns", None)
            reading.pop("read_mono_ns", None)
            sample = self._store(reading, t_wall, t_mono, latency_ms, "device")
        assert sample is not None  # one reading per instant, at least now
        return sample

    def _store(
        self, reading: dict[str, Any], t_wall: int, t_mono: int, latency_ms: float | None, stamp: str
    ) -> GpuSample:
        """Build the sample of one reading (a malformed one keeps its stamps and the error) and append it."""
        device_ns = reading.pop("device_ns", None)
        errors = list(reading.pop("errors", None) or [])
        common = {
            "kind": "sample",
            "run_id": self.run_id,
            "seq": self.store.next_seq(),
            "t_wall_ns": t_wall,
            "t_mono_ns": t_mono,
            "probe_latency_ms": latency_ms,
            "stamp": stamp,
        }
        try:
            sample = GpuSample(
                **common, device_ns=int(device_ns) if device_ns is not None else t_wall, errors=errors, **reading
            )
        except ValueError as exc:  # malformed probe values: keep the timestamps and the error
            sample = GpuSample(**common, errors=[*errors, f"bad_probe_values: {str(exc)[:200]}"])
        self.store.append(sample)
        self.samples_total += 1
        if sample.errors:
            self.error_samples_total += 1
            self.errors_total += len(sample.errors)
        self.last_sample_wall_ns = sample.t_wall_ns
        self.last_latency_ms = latency_ms
        return sample

    # -- queries ---------------------------------------------------------------------------------------------------

    def window(self, start_ns: int, end_ns: int, wait_s: float = 0.0, edge_model: str = "step") -> WindowStats:
        """Window stats; first waits up to ``wait_s`` for a usable sample at or after ``end_ns``."""
        if wait_s > 0 and end_ns > start_ns:
            self.store.wait_for_sample_after(end_ns, wait_s)
        return self.store.window(start_ns, end_ns, self.period_s, edge_model)

    def latest(self) -> GpuSample | None:
        """The newest sample, failed reads included (their fields are None and ``errors`` says why)."""
        return self.store.latest(usable=False)

    def ready(self) -> bool:
        """A sample of this sampler's own life carried a reading (a restarted sampler reloads its predecessor's
        samples into the ring: those say nothing about whether this one reads the GPU, and a window opened before its
        first own sample would bracket the restart)."""
        latest = self.store.latest(usable=True)
        return latest is not None and latest.run_id == self.run_id

    def healthy(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def identity(self) -> dict[str, Any]:
        """The identity read at start, updated with what the probe learnt since (its ``capabilities()``, e.g. which
        power source NVML answers) and the live name/uuid/driver of the newest usable sample. Never calls the GPU."""
        latest = self.store.latest(usable=True)
        ident = dict(self._identity)
        capabilities = getattr(self.probe, "capabilities", None)
        if capabilities is not None:
            ident.update(capabilities())
        if latest is not None:  # the live identity (a UUID change shows here)
            ident.update(
                {k: getattr(latest, k) for k in ("name", "uuid", "driver_version") if getattr(latest, k) is not None}
            )
        return ident

    def info(self) -> dict[str, Any]:
        return {
            "probe": self.probe.kind,
            "rate_hz": self.rate_hz,
            "period_s": self.period_s,
            "run_id": self.run_id,
            "pid": os.getpid(),
            "started_wall_ns": self.started_wall_ns,
            "log_dir": str(self.store.log_dir) if self.store.log_dir else None,
            "previous_run": self.store.previous_run,
            "log_errors_total": self.store.log_errors_total,
            "last_log_error": self.store.last_log_error,
            "loop_errors_total": self.loop_errors_total,
            "last_loop_error": self.last_loop_error,
            "gpu": self.identity(),
            "time_namespace_offsets": _timens_offsets(),
        }

    def mark(self, name: str, client_wall_ns: int | None) -> dict[str, Any]:
        latest = self.store.latest(usable=False)
        mark = {
            "name": name,
            "wall_ns": client_wall_ns,
            "sampler_wall_ns": wall_ns(),
            "sampler_mono_ns": mono_ns(),
            "run_id": self.run_id,
            "last_seq": latest.seq if latest else None,
        }
        self.store.add_mark(mark)
        return mark


def _timens_offsets() -> str | None:
    """This process's time-namespace offsets (Linux); non-zero monotonic offsets mean its CLOCK_MONOTONIC differs
    from the host's, so monotonic stamps from another namespace are not comparable (wall stamps still are)."""
    try:
        return Path("/proc/self/timens_offsets").read_text().strip() or None
    except OSError:
        return None


class InProcessSampler:
    """A ``TelemetrySource`` that samples in a thread of this process (no sidecar); same aggregation code."""

    def __init__(self, probe: Probe, rate_hz: float = 10.0, log_dir: str | Path | None = None, retention_s: float = 3600.0,
                 wait_s: float | None = None) -> None:  # fmt: skip
        self.core = SamplerCore(probe, rate_hz, log_dir, retention_s).start()
        self.wait_s = wait_s if wait_s is not None else max(1.0, 5 * self.core.period_s)

    def snapshot(self) -> GpuSample | None:
        return self.core.latest()

    def sample_at(self, t_ns: int) -> GpuSample | None:
        """The sample at or just before ``t_ns`` among the store's recent records, else the latest."""
        latest = self.snapshot()
        if latest is None:
            return None
        recent = self.core.store.since(max(-1, latest.seq - SAMPLE_AT_LOOKBACK), SAMPLE_AT_LOOKBACK + 1)
        return sample_near(recent, t_ns) or latest

    def wait_ready(self, timeout_s: float = 10.0) -> None:
        """Block until a sample carried a reading; raises ``ServiceUnavailableError`` with the last probe errors."""
        deadline = mono_ns() + int(timeout_s * 1e9)
        while not self.core.ready():
            if mono_ns() >= deadline:
                latest = self.core.latest()
                errors = "; ".join(latest.errors) if latest is not None and latest.errors else "no sample yet"
                raise ServiceUnavailableError(f"the {self.core.probe.kind} probe gave no reading within {timeout_s:.0f} s: {errors}",
                                              fix="check the GPU with nvidia-smi (or the twin device)")  # fmt: skip
            self.core.idle(0.01)

    def window(self, start_ns: int, end_ns: int, wait_s: float | None = None, edge_model: str = "step") -> WindowStats:
        """Waits up to ``wait_s`` (default ``self.wait_s``) for a sample after ``end_ns``, then aggregates."""
        return self.core.window(
            start_ns, end_ns, wait_s=self.wait_s if wait_s is None else wait_s, edge_model=edge_model
        )

    def identity(self) -> dict[str, Any]:
        return {**self.core.identity(), "sampler": "in-process", "rate_hz": self.core.rate_hz}

    def close(self) -> None:
        self.core.stop()

    def __enter__(self) -> "InProcessSampler":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
