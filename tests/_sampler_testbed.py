"""A twin testbed for validating the sampler: start a twin GPU device and sampler processes, drive load on the
device, read its exact energy. Used by the telemetry tests and ``benchmarks/sampler_*.py``.

Every process is started by PID and stopped by that PID (terminate, then kill).
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

import httpx

from harness.core.errors import ServiceUnavailableError


class Service:
    """A child process whose stdout's first matching line announces its URL; the rest of stdout goes to a log."""

    def __init__(self, argv: list[str], log_path: Path, env: dict[str, str] | None = None) -> None:
        self.argv = argv
        self.log_path = log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log: IO[bytes] = open(log_path, "ab")
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=self._log, env={**os.environ, **(env or {})})
        self.url: str | None = None

    @property
    def pid(self) -> int:
        return self.proc.pid

    def wait_url(self, timeout_s: float = 30.0) -> str:
        """Read stdout until a line carries the URL (a JSON ``url`` key or ``listening on URL``)."""
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout_s
        buf = b""
        while time.monotonic() < deadline:
            if self.proc.poll() is not None and not buf:
                break
            ready, _, _ = select.select([self.proc.stdout], [], [], 0.1)
            if not ready:
                continue
            chunk = os.read(self.proc.stdout.fileno(), 4096)
            if not chunk:
                break
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                self._log.write(line + b"\n")
                url = _url_of(line.decode(errors="replace"))
                if url:
                    self.url = url
                    threading.Thread(target=self._drain, args=(buf,), daemon=True).start()
                    return url
        self._log.flush()
        tail = self.log_path.read_text(errors="replace")[-2000:]
        self.stop()
        raise ServiceUnavailableError(f"{' '.join(self.argv[:4])} did not announce its URL within {timeout_s:.0f} s:\n{tail}",
                                      fix="see the log " + str(self.log_path))  # fmt: skip

    def _drain(self, pending: bytes) -> None:
        assert self.proc.stdout is not None
        try:
            self._log.write(pending)
            for chunk in iter(lambda: os.read(self.proc.stdout.fileno(), 4096), b""):  # type: ignore[union-attr]
                self._log.write(chunk)
                self._log.flush()
        except (OSError, ValueError):
            pass

    def kill9(self) -> None:
        """SIGKILL by PID (fault injection) and reap."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        try:
            self._log.flush()
        except ValueError:
            pass

    def __enter__(self) -> "Service":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _url_of(line: str) -> str | None:
    line = line.strip()
    if line.startswith("{"):
        try:
            obj = json.loads(line)
        except ValueError:
            return None
        return obj.get("url") if isinstance(obj, dict) else None
    if "listening on " in line:
        return line.split("listening on ", 1)[1].split()[0]
    return None


def harness_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "harness", *args]


def start_twin_gpu(log_dir: Path, time_scale: float = 1.0, seed: int = 0, env: dict[str, str] | None = None) -> Service:
    svc = Service(
        harness_argv("twin", "gpu", "--port", "0", "--time-scale", str(time_scale), "--seed", str(seed)),
        log_dir / "twin-gpu.log",
        env,
    )
    svc.wait_url()
    return svc


def start_sampler(twin_url: str, log_dir: Path | None, run_dir: Path, rate_hz: float = 10.0, port: int = 0,
                  env: dict[str, str] | None = None) -> Service:  # fmt: skip
    argv = harness_argv(
        "sampler", "serve", "--probe", "twin", "--twin-url", twin_url, "--rate-hz", str(rate_hz), "--port", str(port)
    )
    if log_dir is not None:
        argv += ["--log", str(log_dir)]
    svc = Service(argv, run_dir / "sampler.log", env)
    svc.wait_url()
    return svc


class TwinLoad:
    """Drives load on a twin GPU device as one engine would, and reads its exact energy."""

    def __init__(self, url: str, engine_id: str = "telemetry-load", memory_mb: float = 2000.0) -> None:
        self.url = url
        self.engine_id = engine_id
        self.http = httpx.Client(base_url=url, timeout=10.0)
        r = self.http.post("/v1/engines", json={"engine_id": engine_id, "memory_mb": memory_mb, "lease_s": 60.0})
        r.raise_for_status()

    def set(self, busy: bool, dynamic_power_w: float = 0.0, util: float = 0.0) -> None:
        r = self.http.post(
            f"/v1/engines/{self.engine_id}/activity",
            json={"busy": busy, "dynamic_power_w": dynamic_power_w, "util": util},
        )
        r.raise_for_status()

    def truth(self, start_ns: int, end_ns: int) -> float:
        r = self.http.get("/truth/energy", params={"start_ns": start_ns, "end_ns": end_ns})
        r.raise_for_status()
        return float(r.json()["energy_j"])

    def fault(self, **body: Any) -> dict:
        r = self.http.post("/v1/faults", json=body)
        r.raise_for_status()
        return r.json()

    def close(self) -> None:
        try:
            self.http.delete(f"/v1/engines/{self.engine_id}")
        except httpx.HTTPError:
            pass
        self.http.close()


class RandomLoad:
    """A background thread that changes the device's load at random instants (uniform 0.3-2 device seconds apart)."""

    def __init__(self, load: TwinLoad, time_scale: float, seed: int = 0) -> None:
        import random

        self.load, self.scale, self.rng = load, time_scale, random.Random(seed)
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, name="random-load", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            busy = self.rng.random() < 0.7
            self.load.set(
                busy, self.rng.uniform(15.0, 75.0) if busy else 0.0, self.rng.uniform(0.5, 1.0) if busy else 0.0
            )
            self._stop.wait(self.rng.uniform(0.3, 2.0) / self.scale)

    def __enter__(self) -> "RandomLoad":
        self._t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._t.join(timeout=5)


def measure_windows(source: Any, load: TwinLoad, *, scenario: str, device_s: float, count: int, time_scale: float,
                    seed: int = 0, edge_models: tuple[str, ...] = ()) -> list[dict[str, Any]]:  # fmt: skip
    """Measure ``count`` windows of ``device_s`` device seconds and compare each with the device's exact energy.

    ``scenario``: ``random`` (load changes at random instants, windows at random offsets) or ``edge`` (the harness
    pattern: the load starts right after the window opens and stops right before it closes). ``source`` is a
    ``TelemetryClient`` or ``InProcessSampler``; ``edge_models`` re-aggregates each window with those edge models too.
    """
    import random

    from harness.core.clocks import wall_ns

    rng = random.Random(seed)
    wall_len = device_s / time_scale
    results: list[dict[str, Any]] = []
    ctx = RandomLoad(load, time_scale, seed) if scenario == "random" else None
    if ctx:
        ctx.__enter__()
    try:
        for i in range(count):
            if scenario == "random":
                time.sleep(rng.uniform(0.0, 0.3) / time_scale + 0.02)
                t0 = wall_ns()
                time.sleep(wall_len)
                t1 = wall_ns()
            elif scenario == "edge":
                load.set(False)
                time.sleep(rng.uniform(0.15, 0.35) / time_scale + 0.02)
                t0 = wall_ns()
                load.set(True, rng.uniform(30.0, 75.0), rng.uniform(0.6, 1.0))
                time.sleep(max(0.0, wall_len - 0.004))
                load.set(False)
                t1 = wall_ns()
            else:
                raise ValueError(f"unknown scenario {scenario!r}")
            w = source.window(t0, t1)
            truth = load.truth(t0, t1)
            row = {"scenario": scenario, "i": i, "device_s": device_s, "time_scale": time_scale, "wall_s": (t1 - t0) / 1e9,
                   "duration_s": w.duration_s, "truth_j": truth, "energy_j": w.energy_j, "valid": w.valid, "reasons": w.reasons,
                   "rel_err": (w.energy_j - truth) / truth if w.energy_j is not None and truth > 0 else None}  # fmt: skip
            for model in edge_models:
                alt = source.window(t0, t1, edge_model=model)
                row[f"rel_err_{model}"] = (
                    (alt.energy_j - truth) / truth if alt.energy_j is not None and truth > 0 else None
                )
            results.append(row)
    finally:
        if ctx:
            ctx.__exit__(None, None, None)
        load.set(False)
    return results
