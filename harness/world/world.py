"""The world a run needs: a GPU (real or twin), a sampler watching it, a launcher for servers, and the world's clock.

``open_world(engine="twin")`` with no URLs starts ``harness twin gpu`` and ``harness sampler serve --probe twin`` as
child processes on free ports and stops them by PID on exit. With URLs it connects to running services. With
``engine="sglang"`` and no sampler URL the sampler runs in-process on NVML.
"""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path
from typing import Any, Protocol

import httpx

from harness.core.clocks import ScaledClock
from harness.core.errors import ServiceUnavailableError, UsageError
from harness.core.http import http_client
from harness.engine import proc as procs
from harness.engine.launch import EngineLauncher
from harness.engine.model_pair import footprint_mb
from harness.engine.spec import EngineSpec
from harness.telemetry.client import TelemetrySource
from harness.world.engine_gpu import check_sampler
from harness.world.engine_gpu import identity as engine_gpu_identity
from harness.world.engine_gpu import resolve as resolve_engine_gpu

SERVICE_START_TIMEOUT_S = 60.0


def _get_json(url: str, timeout: float = 5.0) -> dict[str, Any]:
    with http_client(timeout=timeout, trust_env=False) as http:
        resp = http.get(url)
        resp.raise_for_status()
        return resp.json()


def _wait_http(
    url: str, proc: Any | None, log: Path | None, what: str, timeout_s: float = SERVICE_START_TIMEOUT_S
) -> None:
    """Poll ``url`` until it answers 200; a dead child process or the timeout raises ServiceUnavailableError."""
    deadline = time.monotonic() + timeout_s
    while True:
        if proc is not None and proc.poll() is not None:
            tail = procs.log_tail(log) if log else ""
            raise ServiceUnavailableError(
                f"{what} exited with code {proc.returncode} while starting:\n{tail}", fix=f"see {log}"
            )
        try:
            with http_client(timeout=2.0, trust_env=False) as http:
                if http.get(url).status_code == 200:
                    return
        except httpx.HTTPError:
            pass
        if time.monotonic() >= deadline:
            raise ServiceUnavailableError(
                f"{what} did not answer at {url} within {timeout_s:g} s",
                fix="check the URL and that the service is running",
            )
        time.sleep(0.1)


class World:
    """A run's world: ``telemetry`` (a TelemetrySource), ``launcher``, ``clock``, ``hardware``, ``power_limit_w``."""

    def __init__(
        self,
        *,
        engine: str,
        telemetry: TelemetrySource,
        launcher: EngineLauncher,
        clock: ScaledClock,
        hardware: str,
        power_limit_w: float | None,
        twin_gpu_url: str | None,
        sampler_url: str | None,
        gpu_identity: dict[str, Any],
        children: list[tuple[str, Any]],
        run_dir: Path | None = None,
        sampler_rate_hz: float = 10.0,
        gpu_index: int | str = 0,
    ) -> None:
        self.engine = engine
        self.telemetry = telemetry
        self.launcher = launcher
        self.clock = clock
        self.hardware = hardware
        self.power_limit_w = power_limit_w
        self.twin_gpu_url = twin_gpu_url
        self.sampler_url = sampler_url
        self.gpu_identity = gpu_identity
        self._children = children
        self.run_dir = run_dir
        self.sampler_rate_hz = sampler_rate_hz
        self.gpu_index = gpu_index
        """The GPU NVML users open: the engine's UUID on a GPU box (``harness.world.engine_gpu``), else an index."""
        self.sampler_restarts = 0
        launcher.memory.read = self.gpu_memory  # every launch waits for a stopped server's memory, as read here
        spec = launcher.spec
        launcher.memory.footprint = lambda: footprint_mb(spec.model_path, spec.draft_model_path)  # its slack

    def gpu_memory(self) -> tuple[float | None, float | None]:
        """The GPU's memory (used, total MB) as the sampler sees it now (the sampler in use, after a restart too)."""
        sample = self.telemetry.snapshot()
        return getattr(sample, "memory_used_mb", None), getattr(sample, "memory_total_mb", None)

    @property
    def spec(self) -> EngineSpec:
        return self.launcher.spec

    @property
    def child_pids(self) -> dict[str, int]:
        return {name: p.pid for name, p in self._children}

    def identity(self) -> dict[str, Any]:
        """Engine and GPU identity for manifests (versions, URLs, power limit, clock)."""
        return {
            "engine": self.engine,
            "sglang_version": self.spec.sglang_version,
            "model_path": self.spec.model_path,
            "draft_model_path": self.spec.draft_model_path,
            "dtype": self.spec.dtype,
            "hardware": self.hardware,
            "power_limit_w": self.power_limit_w,
            "gpu": self.gpu_identity,
            "twin_gpu_url": self.twin_gpu_url,
            "sampler_url": self.sampler_url,
            "clock": self.clock.to_dict(),
            "started_services": sorted(self.child_pids),
        }

    @property
    def can_restart_sampler(self) -> bool:
        """The sampler is this world's own: a child process it started, or the in-process NVML sampler."""
        return "sampler" in self.child_pids or (self.engine != "twin" and self.sampler_url is None)

    def check(self) -> Any:
        """The first lost service (``harness.world.health.ServiceProblem``) or None."""
        from harness.world.health import check_world

        return check_world(self)

    def restart_sampler(self) -> None:
        """Replace this world's own sampler (a dead child, or the in-process one) with a fresh one and reconnect."""
        if not self.can_restart_sampler:
            raise ServiceUnavailableError(
                "the sampler was not started by the harness, so it cannot restart it",
                fix="restart it yourself, then continue with --resume",
            )
        try:
            self.telemetry.close()
        except Exception:  # noqa: BLE001 - the old one is gone or going
            pass
        if "sampler" in self.child_pids:
            index = next(i for i, (name, _p) in enumerate(self._children) if name == "sampler")
            procs.stop(self._children[index][1], timeout_s=5.0)
            assert self.run_dir is not None and self.twin_gpu_url is not None
            url, p = _start_sampler(self.run_dir, self.twin_gpu_url, self.sampler_rate_hz)
            self._children[index] = ("sampler", p)
            self.sampler_url = url
        self.telemetry = _open_telemetry(self.sampler_url, self.gpu_index, self.sampler_rate_hz, self.engine)
        self.sampler_restarts += 1

    def close(self) -> None:
        try:
            self.telemetry.close()
        except Exception:  # noqa: BLE001 - closing must not hide the run's own error
            pass
        for _name, p in reversed(self._children):
            procs.stop(p, timeout_s=10.0)
        self._children = []

    def __enter__(self) -> "World":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _harness_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "harness", *args]


def _spawn_service(args: list[str], log: Path, health_path: str, what: str, ready: str) -> tuple[str, Any]:
    """Start ``harness <args> --port 0``, learn the port it bound from its ready line (``ready``: a regex whose group
    is the URL), wait until ``health_path`` answers; stop it if it never does. The service binds the port itself, so
    no other process can take it between a probe and the bind (a free-port probe lost that race under load)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    start = log.stat().st_size if log.exists() else 0  # a restarted service appends to the same log
    p = procs.spawn(_harness_cmd(*args, "--port", "0"), log)
    try:
        url = _wait_announced(p, log, start, re.compile(ready), what)
        _wait_http(f"{url}{health_path}", p, log, what)
    except BaseException:
        procs.stop(p, 10.0)
        raise
    return url, p


def _wait_announced(
    proc: Any, log: Path, start: int, ready: re.Pattern[str], what: str, timeout_s: float = SERVICE_START_TIMEOUT_S
) -> str:
    """The URL a starting service announces in its log (after byte ``start``); its death or the timeout raises."""
    deadline = time.monotonic() + timeout_s
    while True:
        with open(log, "rb") as fh:
            fh.seek(start)
            found = ready.search(fh.read().decode(errors="replace"))
        if found:
            return found.group(1)
        if proc.poll() is not None:
            raise ServiceUnavailableError(
                f"{what} exited with code {proc.returncode} while starting:\n{procs.log_tail(log)}", fix=f"see {log}"
            )
        if time.monotonic() >= deadline:
            raise ServiceUnavailableError(
                f"{what} did not say where it listens within {timeout_s:g} s", fix=f"see {log}"
            )
        time.sleep(0.05)


def _start_twin_gpu(
    run_dir: Path, time_scale: float, seed: int, profile: str | None, index: int = 0
) -> tuple[str, Any]:
    args = ["twin", "gpu", "--time-scale", f"{time_scale:g}", "--seed", str(seed)] + (
        ["--profile", profile] if profile else []
    )
    args += ["--index", str(index)] if index else []
    ready = r'"url": "(http://[^"]+)"'  # the device's JSON ready line
    return _spawn_service(args, run_dir / "logs" / "twin-gpu.log", "/health", "the twin GPU", ready)


TWIN_MAX_RATE_HZ = 50.0


def twin_sampler_rate_hz(rate_hz: float, time_scale: float) -> float:
    """Sampling rate for a twin world's own sampler: faster at high time scales so the sample period in twin time
    stays short (10 Hz at scale 20 would be one sample per 2 twin seconds, too coarse for ~5 s bs-16 windows: the
    edge interpolation then misses ~3 % of the energy). ``rate_hz`` up to scale 4, capped at 50 Hz (0.4 twin s at 20)."""
    return max(rate_hz, min(TWIN_MAX_RATE_HZ, rate_hz * time_scale / 4.0))


def _start_sampler(run_dir: Path, twin_gpu_url: str, rate_hz: float) -> tuple[str, Any]:
    args = [
        "sampler",
        "serve",
        "--probe",
        "twin",
        "--twin-url",
        twin_gpu_url,
        "--rate-hz",
        f"{rate_hz:g}",
        "--log",
        str(run_dir / "sampler"),
    ]
    ready = r"sampler listening on (http://\S+)"
    return _spawn_service(args, run_dir / "logs" / "sampler.log", "/-/healthy", "the sampler", ready)


def _check_service(url: str, path: str, what: str, flag: str) -> dict[str, Any]:
    try:
        return _get_json(url.rstrip("/") + path)
    except (httpx.HTTPError, ValueError) as exc:
        raise ServiceUnavailableError(
            f"{what} at {url} is unreachable ({exc.__class__.__name__}: {exc})", fix=f"start it or fix {flag}"
        ) from None


class WorldChoice(Protocol):
    """What a command's options say about its world (the engine block, ``harness.engine.options.EngineOptions``;
    serve's session options have the same names)."""

    @property
    def engine(self) -> str: ...
    @property
    def sampler_url(self) -> str | None: ...
    @property
    def twin_gpu_url(self) -> str | None: ...
    @property
    def time_scale(self) -> float: ...
    @property
    def seed(self) -> int: ...
    @property
    def twin_profile(self) -> str | None: ...


def check_twin_profile_use(options: WorldChoice) -> None:
    """``--twin-profile`` picks the profile of the twin GPU the harness starts itself: refused with another engine
    and with ``--twin-gpu`` (that device runs its own profile)."""
    if options.twin_profile is None:
        return
    if options.engine != "twin":
        raise UsageError("--twin-profile only applies to --engine twin", fix="drop --twin-profile or use --engine twin")
    if options.twin_gpu_url is not None:
        raise UsageError(
            f"--twin-profile {options.twin_profile} cannot apply to the running twin GPU at --twin-gpu "
            f"{options.twin_gpu_url}: that device has its own profile (harness twin gpu --profile)",
            fix="drop --twin-profile, or drop --twin-gpu (and --sampler-url) to let the harness start a twin GPU "
            "with that profile",
        )


def open_world_for(options: WorldChoice, run_dir: str | Path, *, spec: EngineSpec, **more: Any) -> "World":
    """The one way a command opens its world from its options: ``open_world`` with the block's engine, services,
    time scale, seed and twin profile; ``more``: timeouts, the GPU index, a profile (a command's own, e.g. serve's
    profile derived from ``--twin-profile``), a hardware label."""
    check_twin_profile_use(options)
    more.setdefault("profile", options.twin_profile)
    return open_world(
        options.engine,
        sampler_url=options.sampler_url,
        twin_gpu_url=options.twin_gpu_url,
        time_scale=options.time_scale,
        seed=options.seed,
        run_dir=run_dir,
        spec=spec,
        **more,
    )


def open_world(
    engine: str = "twin",
    sampler_url: str | None = None,
    twin_gpu_url: str | None = None,
    time_scale: float = 1.0,
    seed: int = 0,
    run_dir: str | Path = "results/world",
    *,
    spec: EngineSpec | None = None,
    launch_timeout_s: float = 900.0,
    request_timeout_s: float = 300.0,
    stop_timeout_s: float = 60.0,
    rate_hz: float = 10.0,
    gpu_index: int = 0,
    profile: str | None = None,
    hardware: str | None = None,
) -> World:
    """Open the world for ``engine`` (see module doc); close it (or use ``with``) to stop what it started."""
    from harness.runs.rows import cpu_hardware_label, hardware_label

    if engine not in ("twin", "sglang", "vllm"):
        raise UsageError(f"unknown engine {engine!r}", fix="use --engine twin, sglang or vllm")
    run_dir = Path(run_dir)
    if spec is None:  # no caller's choice: the sglang installed for the server's interpreter (auto), as the sweep
        spec = EngineSpec.build(engine)  # type: ignore[arg-type]
    spec = spec.model_copy(update={"kind": engine})
    children: list[tuple[str, Any]] = []
    telemetry = None
    try:
        if engine == "twin":
            if twin_gpu_url is None and sampler_url is not None:
                raise UsageError(
                    "--engine twin with --sampler-url also needs --twin-gpu URL (the device the sampler watches)",
                    fix="pass --twin-gpu, or neither URL to let the harness start both",
                )
            if twin_gpu_url is None:
                twin_gpu_url, p = _start_twin_gpu(run_dir, time_scale, seed, profile, gpu_index)
                children.append(("twin-gpu", p))
            twin_gpu_url = twin_gpu_url.rstrip("/")
            info = _check_service(twin_gpu_url, "/v1/info", "the twin GPU", "--twin-gpu")
            clock = ScaledClock.from_dict(_check_service(twin_gpu_url, "/v1/clock", "the twin GPU", "--twin-gpu"))
            if sampler_url is None:
                rate_hz = twin_sampler_rate_hz(rate_hz, time_scale)
                sampler_url, p = _start_sampler(run_dir, twin_gpu_url, rate_hz)
                children.append(("sampler", p))
            spec = spec.model_copy(update={"twin_gpu_url": twin_gpu_url})
            gpu_identity = {
                k: info.get(k)
                for k in ("name", "uuid", "driver_version", "profile", "memory_total_mb", "seed", "index")
            }
            hw = hardware or info.get("hardware") or hardware_label(None, info.get("profile"))
            power_limit = info.get("power_limit_w")
        else:
            clock = ScaledClock.starting_now(1.0)
            gpu_identity = {}
            hw = hardware or ""
            power_limit = None
        engine_gpu, why_not = None, None
        if engine != "twin" and spec.device == "gpu":  # NVML's index is not CUDA's: the server's GPU by UUID
            engine_gpu, why_not = resolve_engine_gpu(spec, required=sampler_url is None)
        probe_gpu: int | str = engine_gpu.uuid if engine_gpu is not None else gpu_index
        telemetry = _open_telemetry(sampler_url, probe_gpu, rate_hz, engine, spec.device)
        try:
            ident = dict(telemetry.identity() or {})
        except Exception:  # noqa: BLE001 - identity is informative only
            ident = {}
        sample = telemetry.snapshot()
        if engine != "twin":  # a real engine (sglang or vLLM) on the NVML GPU
            check_sampler(engine_gpu, ident, sampler_url)
            gpu_identity = {**ident, **engine_gpu_identity(engine_gpu, why_not)}
            name = ident.get("gpu_name") or ident.get("name") or (getattr(sample, "name", None) if sample else None)
            hw = hw or (cpu_hardware_label(name) if spec.device == "cpu" else hardware_label(name))
            power_limit = getattr(sample, "power_limit_w", None) if sample else None
        launcher = EngineLauncher(
            spec,
            run_dir,
            launch_timeout_s=launch_timeout_s,
            stop_timeout_s=stop_timeout_s,
            request_timeout_s=request_timeout_s,
        )
        return World(
            engine=engine,
            telemetry=telemetry,
            launcher=launcher,
            clock=clock,
            hardware=hw,
            power_limit_w=power_limit,
            twin_gpu_url=twin_gpu_url,
            sampler_url=sampler_url,
            gpu_identity={**gpu_identity, "sampler": ident},
            children=children,
            run_dir=run_dir,
            sampler_rate_hz=rate_hz,
            gpu_index=probe_gpu,
        )
    except BaseException:
        if telemetry is not None:
            telemetry.close()
        for _name, p in reversed(children):
            procs.stop(p, 10.0)
        raise


def _open_telemetry(
    sampler_url: str | None, gpu_index: int | str, rate_hz: float, engine: str, device: str = "gpu"
) -> Any:
    if sampler_url is not None:
        _check_service(sampler_url, "/-/healthy", "the sampler", "--sampler-url")
        from harness.telemetry.client import TelemetryClient

        client = TelemetryClient(sampler_url.rstrip("/"))
        try:
            client.wait_ready(timeout_s=SERVICE_START_TIMEOUT_S)
        except BaseException:
            client.close()
            raise
        return client
    if engine == "twin":
        raise UsageError("no sampler for the twin world", fix="pass --sampler-url or let the harness start one")
    from harness.telemetry.probes import NvmlProbe, Probe
    from harness.telemetry.sampler import InProcessSampler

    probe: Probe
    if device == "cpu":  # the engine computes on this host's CPU: RAPL energy where the kernel exposes it
        from harness.telemetry.rapl_probe import RaplProbe

        probe = RaplProbe()
        if probe.unavailable:  # nothing to sample: rows get null energy and the reason
            from harness.telemetry.host_source import NoEnergySource

            return NoEnergySource(probe)
    else:
        probe = NvmlProbe(gpu_index)
    sampler = InProcessSampler(probe, rate_hz=rate_hz)
    try:
        sampler.wait_ready(timeout_s=SERVICE_START_TIMEOUT_S)  # the world reads the GPU's name and limit next
    except BaseException:
        sampler.close()
        raise
    return sampler
