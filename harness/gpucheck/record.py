"""The check's recording: the project's ``NvmlProbe`` read on the project's sampling grid (``run_ticks`` with
``probe_timing`` stamps, records in the sample-log format), ``nvidia-smi`` polled beside it, and per-window energy by
three routes: the energy counter, the trapezoid of the probe's instant power, the trapezoid of nvidia-smi's power."""

from __future__ import annotations

import shutil
import statistics
import subprocess
import threading
import time
from typing import Any

from harness.telemetry.probes import Probe, probe_timing
from harness.telemetry.ticker import run_ticks

SMI_FIELDS = ("power.draw", "power.draw.instant")


class Recorder:
    """Samples ``probe`` at ``rate_hz`` into ``records`` (dicts: t_wall_ns, t_mono_ns, probe_latency_ms + reading)."""

    def __init__(self, probe: Probe, rate_hz: float = 10.0) -> None:
        self.probe, self.period_s = probe, 1.0 / rate_hz
        self.records: list[dict[str, Any]] = []
        self.overruns = 0
        self.loop_errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="gpu-check-sampler", daemon=True)

    def _tick(self) -> None:
        reading, t_wall, t_mono, latency_ms = probe_timing(self.probe)
        self.records.append(
            {"kind": "sample", "t_wall_ns": t_wall, "t_mono_ns": t_mono, "probe_latency_ms": latency_ms, **reading}
        )

    def _loop(self) -> None:
        def overrun(missed: int) -> None:
            self.overruns += missed

        run_ticks(
            self.period_s,
            self._stop,
            self._tick,
            overrun,
            lambda exc: self.loop_errors.append(f"{type(exc).__name__}: {exc}"),
        )

    def start(self) -> "Recorder":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5.0)

    def period_stats(self) -> dict[str, Any]:
        """The sample period actually achieved (monotonic stamps), the overruns and read latency."""
        ts = [r["t_mono_ns"] for r in self.records]
        gaps = [(b - a) / 1e6 for a, b in zip(ts, ts[1:])]
        lat = sorted(r["probe_latency_ms"] for r in self.records if r.get("probe_latency_ms") is not None)
        return {
            "requested_ms": round(self.period_s * 1e3, 3), "samples": len(ts),
            "median_ms": round(statistics.median(gaps), 3) if gaps else None, "max_ms": round(max(gaps), 3) if gaps else None,
            "overruns": self.overruns, "loop_errors": self.loop_errors[:5],
            "read_latency_p50_ms": round(lat[len(lat) // 2], 3) if lat else None,
            "read_latency_p99_ms": round(lat[min(len(lat) - 1, int(0.99 * len(lat)))], 3) if lat else None,
            "errors_seen": sorted({e for r in self.records for e in r.get("errors") or []})[:10],
        }  # fmt: skip


class SmiPoller:
    """Polls ``nvidia-smi --query-gpu`` (its own NVML client) every ``period_s``; samples stamped at the call midpoint."""

    def __init__(self, gpu_index: int, period_s: float = 0.5, exe: str | None = None) -> None:
        self.exe = exe or shutil.which("nvidia-smi")
        self.gpu_index, self.period_s = gpu_index, period_s
        self.samples: list[dict[str, Any]] = []
        self.error: str | None = None if self.exe else "nvidia-smi is not on PATH"
        self.fields = list(SMI_FIELDS)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="gpu-check-smi", daemon=True)

    def _query(self) -> list[str] | None:
        assert self.exe is not None
        r = subprocess.run([self.exe, f"--query-gpu={','.join(self.fields)}", "--format=csv,noheader,nounits", "-i", str(self.gpu_index)],
                           capture_output=True, text=True, timeout=10)  # fmt: skip
        if r.returncode != 0 and len(self.fields) > 1:  # an older driver without power.draw.instant
            self.fields = self.fields[:1]
            return None
        if r.returncode != 0:
            self.error = f"nvidia-smi exit {r.returncode}: {(r.stderr or r.stdout).strip()[:300]}"
            return None
        return [x.strip() for x in r.stdout.strip().splitlines()[0].split(",")]

    def _loop(self) -> None:
        while not self._stop.is_set() and self.error is None:
            t0 = time.time_ns()
            try:
                vals = self._query()
            except (OSError, subprocess.SubprocessError) as exc:
                self.error = f"nvidia-smi: {type(exc).__name__}: {exc}"
                break
            t1 = time.time_ns()
            if vals is not None:
                rec: dict[str, Any] = {"t_wall_ns": (t0 + t1) // 2, "call_ms": round((t1 - t0) / 1e6, 1)}
                for name, v in zip(self.fields, vals):
                    rec[name] = _num(v)
                self.samples.append(rec)
            self._stop.wait(max(0.0, self.period_s - (t1 - t0) / 1e9))

    def start(self) -> "SmiPoller":
        if self.exe:
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=15.0)


def _num(v: str) -> float | None:
    try:
        return float(v)
    except ValueError:
        return None  # "[N/A]", "[Not Supported]"


def _interp(points: list[tuple[int, float]], t: int) -> float | None:
    """Linear value at ``t`` from (t, v) points sorted by t; None outside them."""
    if not points or t < points[0][0] or t > points[-1][0]:
        return None
    for (ta, va), (tb, vb) in zip(points, points[1:]):
        if ta <= t <= tb:
            return va if tb == ta else va + (vb - va) * (t - ta) / (tb - ta)
    return points[-1][1]


def trapezoid_j(points: list[tuple[int, float]], start_ns: int, end_ns: int) -> float | None:
    """Energy (J) of a power curve (t wall ns, W) over [start, end], clipped at the edges by interpolation."""
    a, b = _interp(points, start_ns), _interp(points, end_ns)
    if a is None or b is None:
        return None
    inner = [(start_ns, a), *[(t, v) for t, v in points if start_ns < t < end_ns], (end_ns, b)]
    return sum((tb - ta) / 1e9 * (va + vb) / 2 for (ta, va), (tb, vb) in zip(inner, inner[1:]))


def rel(x: float | None, ref: float | None) -> float | None:
    return None if x is None or not ref else round((x - ref) / ref, 5)


def window(records: list[dict[str, Any]], smi: list[dict[str, Any]], start_ns: int, end_ns: int) -> dict[str, Any]:
    """One window: energy by the counter (linear at the edges), by the probe's power trapezoid and by nvidia-smi's
    power.draw (and power.draw.instant) trapezoid; their relative errors vs the counter; stats of the samples inside."""
    counter = [(r["t_wall_ns"], r["energy_mj"] / 1000.0) for r in records if r.get("energy_mj") is not None]
    e0, e1 = _interp(counter, start_ns), _interp(counter, end_ns)
    counter_j = e1 - e0 if e0 is not None and e1 is not None else None
    power = [(r["t_wall_ns"], float(r["power_w"])) for r in records if r.get("power_w") is not None]
    inside = [r for r in records if start_ns <= r["t_wall_ns"] <= end_ns]
    seconds = (end_ns - start_ns) / 1e9
    out: dict[str, Any] = {"seconds": round(seconds, 3), "samples": len(inside), "energy_counter_j": _r(counter_j),
                           "energy_power_integral_j": _r(trapezoid_j(power, start_ns, end_ns))}  # fmt: skip
    out["err_integral_vs_counter"] = rel(out["energy_power_integral_j"], counter_j)
    for field in SMI_FIELDS:
        pts = [(s["t_wall_ns"], s[field]) for s in smi if s.get(field) is not None]
        key = "energy_smi_" + field.replace(".", "_") + "_j"
        out[key] = _r(trapezoid_j(pts, start_ns, end_ns)) if pts else None
        out["err_smi_" + field.replace(".", "_") + "_vs_counter"] = rel(out[key], counter_j)
    out["avg_power_w"] = _r(counter_j / seconds) if counter_j is not None and seconds > 0 else None
    pw = [float(r["power_w"]) for r in inside if r.get("power_w") is not None]
    out["max_power_w"] = _r(max(pw)) if pw else None
    for key, field in (
        ("avg_util_pct", "utilization_pct"),
        ("avg_sm_clock_mhz", "sm_clock_mhz"),
        ("avg_temp_c", "temperature_c"),
    ):
        vals = [float(r[field]) for r in inside if r.get(field) is not None]
        out[key] = _r(sum(vals) / len(vals)) if vals else None
    bits = 0
    for r in inside:
        bits |= int(r.get("clock_event_reasons") or 0)
    out["clock_event_reasons_or"] = bits
    out["power_limit_w"] = inside[-1].get("power_limit_w") if inside else None
    return out


def _r(x: float | None, nd: int = 3) -> float | None:
    return None if x is None else round(x, nd)
