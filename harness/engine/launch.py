"""Start one inference server per config (and batch size), wait until it is ready, stop it; the mem-fraction ladder.

Readiness is ``GET /health`` == 200 (sglang and vLLM alike), polled until ``launch_timeout_s``; a process that dies ends the wait at once.
A failed launch raises ``ServerLaunchError`` (an ``EngineLaunchError``) carrying the log tail and whether the log
says the server ran out of memory.
"""

from __future__ import annotations

import re
import subprocess
import threading
import time
from pathlib import Path
from typing import Callable, Sequence

from pydantic import BaseModel

from harness.core.clocks import wall_ns
from harness.core.errors import EngineLaunchError
from harness.core.http import http_client
from harness.engine import proc as procs
from harness.engine.memory_release import MemoryRelease
from harness.engine.sglang_argv import build_argv, engine_env
from harness.engine.sglang_client import EngineClient
from harness.engine.spec import EngineSpec
from harness.grid import SpecConfig

DEFAULT_MEM_FRACTIONS: tuple[float, ...] = (0.65, 0.55)
PORT_IN_USE = re.compile(r"address already in use|errno 98", re.I)
OOM_PATTERN = re.compile(
    r"out of memory|outofmemory|not enough memory|cuda error: out of memory|insufficient memory", re.I
)


class ServerLaunchError(EngineLaunchError):
    """A server that did not become ready: it exited, ran out of memory, or timed out."""

    def __init__(
        self,
        message: str,
        *,
        oom: bool = False,
        log_tail: str = "",
        log_path: str | None = None,
        returncode: int | None = None,
        fix: str | None = None,
    ) -> None:
        super().__init__(message, fix=fix)
        self.oom = oom
        self.log_tail = log_tail
        self.log_path = log_path
        self.returncode = returncode


class LaunchAttempt(BaseModel):
    """One rung of the ladder: the mem fraction tried, and the error if it failed."""

    mem_fraction: float
    ok: bool
    error: str | None = None
    oom: bool = False
    launch_s: float | None = None
    log_path: str | None = None


class LadderExhausted(ServerLaunchError):
    """Every mem fraction of the ladder failed to launch."""

    def __init__(self, message: str, attempts: list[LaunchAttempt], last: ServerLaunchError) -> None:
        super().__init__(
            message,
            oom=last.oom,
            log_tail=last.log_tail,
            log_path=last.log_path,
            returncode=last.returncode,
            fix=last.fix,
        )
        self.attempts = attempts


def is_oom(text: str) -> bool:
    return bool(OOM_PATTERN.search(text or ""))


def first_error_line(tail: str) -> str:
    """The most telling line of a log tail: an out-of-memory or error line, else the last line."""
    lines = [ln.strip() for ln in tail.splitlines() if ln.strip()]
    for pattern in (OOM_PATTERN, re.compile(r"error|exception|traceback", re.I)):
        hits = [ln for ln in lines if pattern.search(ln)]
        if hits:
            return hits[-1][:300]
    return lines[-1][:300] if lines else ""


class RunningServer:
    """A ready server: its process, URL, client and log. Use as a context manager or call ``stop()``."""

    def __init__(
        self,
        proc: subprocess.Popen,
        *,
        port: int,
        host: str,
        client: EngineClient,
        log_path: Path,
        config: SpecConfig,
        batch_size: int,
        mem_fraction: float,
        launch_s: float,
        argv: list[str],
        stop_timeout_s: float,
        twin_gpu_url: str | None = None,
        on_stop: Callable[[], None] | None = None,
    ) -> None:
        self.proc = proc
        self.port = port
        self.base_url = f"http://{host}:{port}"
        self.client = client
        self.log_path = log_path
        self.config = config
        self.batch_size = batch_size
        self.mem_fraction = mem_fraction
        self.launch_s = launch_s
        self.argv = argv
        self.stop_timeout_s = stop_timeout_s
        self.twin_gpu_url = twin_gpu_url
        self.released: list[str] = []
        self._on_stop = on_stop

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    @property
    def returncode(self) -> int | None:
        return self.proc.poll()

    def log_tail(self, lines: int = 25) -> str:
        return procs.log_tail(self.log_path, lines)

    def stop(self) -> int | None:
        """Stop the process group, then release what the server held on a twin device (a server killed with
        ``kill -9`` or crashed never released its memory lease itself)."""
        self.client.close()
        code = procs.stop(self.proc, self.stop_timeout_s)
        if self.twin_gpu_url:
            self.released += release_twin_leases(self.twin_gpu_url, self.pid)
        on_stop, self._on_stop = self._on_stop, None
        if on_stop is not None:  # once: the launcher's memory gate learns the server is gone
            on_stop()
        return code

    def __enter__(self) -> "RunningServer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def release_twin_leases(twin_gpu_url: str, pid: int, timeout_s: float = 2.0) -> list[str]:
    """Ask the twin device to drop every memory lease of process ``pid``; the released lease ids ([] when none, or
    when the device does not answer: then its own lease expiry is the fallback)."""
    import httpx

    try:
        with http_client(timeout=timeout_s, trust_env=False) as http:
            r = http.delete(f"{twin_gpu_url.rstrip('/')}/v1/engines", params={"pid": pid})
            return list(r.json().get("released") or []) if r.status_code == 200 else []
    except (httpx.HTTPError, ValueError):
        return []


def make_client(spec: EngineSpec, base_url: str, request_timeout_s: float = 300.0) -> EngineClient:
    """The client of ``spec``'s API: ``EngineClient`` (sglang) or ``VllmClient`` (vLLM, or the twin emulating it)."""
    if spec.api == "vllm":
        from harness.engine.vllm_client import VllmClient

        return VllmClient(base_url, spec.vllm_version, model=spec.model_path, request_timeout=request_timeout_s)
    return EngineClient(base_url, spec.sglang_version, request_timeout=request_timeout_s)


class EngineLauncher:
    """Launches servers of one ``EngineSpec``; logs go under ``run_dir/logs`` unless a path is given."""

    def __init__(
        self,
        spec: EngineSpec,
        run_dir: str | Path,
        *,
        launch_timeout_s: float = 900.0,
        stop_timeout_s: float = 60.0,
        request_timeout_s: float = 300.0,
        poll_s: float | None = None,
        memory: MemoryRelease | None = None,
    ) -> None:
        self.spec = spec
        self.memory = memory or MemoryRelease()
        """The gate every launch passes: it waits for a stopped server's memory (``harness.engine.memory_release``)."""
        self.run_dir = Path(run_dir)
        self.launch_timeout_s = launch_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self.request_timeout_s = request_timeout_s
        self.poll_s = poll_s if poll_s is not None else (0.2 if spec.kind == "twin" else 2.0)
        self.launches = 0

    def launch(
        self,
        config: SpecConfig,
        batch_size: int,
        mem_fraction: float,
        port: int | None = None,
        log_path: str | Path | None = None,
        *,
        seed: int | None = None,
        cancel: threading.Event | None = None,
    ) -> RunningServer:
        """Start a server and wait for ``/health``; raise ``ServerLaunchError`` with the log tail on failure (also when
        ``cancel`` is set during the wait: the half-started server is stopped)."""
        for attempt in range(3):
            try:
                return self._launch_once(config, batch_size, mem_fraction, port, log_path, seed, cancel)
            except ServerLaunchError as exc:
                # a free port taken between the probe and the server's bind: pick another one
                if port is not None or attempt == 2 or not PORT_IN_USE.search(exc.log_tail):
                    raise
        raise AssertionError("unreachable")

    def _launch_once(
        self,
        config: SpecConfig,
        batch_size: int,
        mem_fraction: float,
        port: int | None,
        log_path: str | Path | None,
        seed: int | None,
        cancel: threading.Event | None = None,
    ) -> RunningServer:
        port = port or procs.free_port(self.spec.host)
        spec = (
            self.spec if seed is None or self.spec.kind != "twin" else self.spec.model_copy(update={"twin_seed": seed})
        )
        argv = build_argv(spec, config, batch_size, mem_fraction, port)
        log = Path(log_path) if log_path else self.run_dir / "logs" / f"engine-{port}-{wall_ns()}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "ab") as f:
            f.write(f"# harness: launching {' '.join(argv)}\n".encode())
        level = self.memory.before_launch()
        self.launches += 1
        t0 = time.monotonic()
        try:
            proc = procs.spawn(argv, log, env=engine_env(spec))
        except BaseException:
            self.memory.stopped(level)
            raise
        client = make_client(spec, f"http://{self.spec.host}:{port}", self.request_timeout_s)
        try:
            self._wait_ready(proc, client, log, t0, cancel)
        except BaseException:
            client.close()
            procs.stop(proc, self.stop_timeout_s)
            if spec.kind == "twin" and spec.twin_gpu_url:
                release_twin_leases(spec.twin_gpu_url, proc.pid)
            self.memory.stopped(level)
            raise
        return RunningServer(
            proc,
            port=port,
            host=self.spec.host,
            client=client,
            log_path=log,
            config=config,
            batch_size=batch_size,
            mem_fraction=mem_fraction,
            launch_s=time.monotonic() - t0,
            argv=argv,
            stop_timeout_s=self.stop_timeout_s,
            twin_gpu_url=spec.twin_gpu_url if spec.kind == "twin" else None,
            on_stop=lambda: self.memory.stopped(level),
        )

    def _wait_ready(
        self, proc: subprocess.Popen, client: EngineClient, log: Path, t0: float, cancel: threading.Event | None = None
    ) -> None:
        deadline = t0 + self.launch_timeout_s
        while True:
            if cancel is not None and cancel.is_set():
                raise ServerLaunchError(
                    "launch cancelled", log_path=str(log), fix="nothing to fix: the caller stopped it"
                )
            code = proc.poll()
            if code is not None:
                tail = procs.log_tail(log)
                oom = is_oom(tail)
                what = "ran out of GPU memory" if oom else f"exited with code {code}"
                raise ServerLaunchError(
                    f"server {what} during launch: {first_error_line(tail)}",
                    oom=oom,
                    log_tail=tail,
                    log_path=str(log),
                    returncode=code,
                    fix="lower --mem-fractions or the batch size" if oom else f"see the server log {log}",
                )
            if client.health(timeout=min(5.0, max(0.5, self.poll_s * 5))):
                return
            if time.monotonic() >= deadline:
                tail = procs.log_tail(log)
                raise ServerLaunchError(
                    f"server not ready within --launch-timeout {self.launch_timeout_s:g} s",
                    log_tail=tail,
                    log_path=str(log),
                    fix="raise --launch-timeout (first sglang starts compile kernels) or read the log",
                )
            if cancel is not None:
                cancel.wait(self.poll_s)
            else:
                time.sleep(self.poll_s)

    def launch_with_ladder(
        self,
        config: SpecConfig,
        batch_size: int,
        mem_fractions: Sequence[float] = DEFAULT_MEM_FRACTIONS,
        *,
        log_stem: str | Path | None = None,
        seed: int | None = None,
    ) -> tuple[RunningServer, list[LaunchAttempt]]:
        """Try each mem fraction in turn; return the server and every attempt, or raise ``LadderExhausted``."""
        attempts: list[LaunchAttempt] = []
        last: ServerLaunchError | None = None
        for mf in mem_fractions:
            log = Path(f"{log_stem}.mf{mf:g}.log") if log_stem else None
            try:
                server = self.launch(config, batch_size, mf, log_path=log, seed=seed)
            except ServerLaunchError as exc:
                last = exc
                attempts.append(
                    LaunchAttempt(mem_fraction=mf, ok=False, error=exc.message, oom=exc.oom, log_path=exc.log_path)
                )
                continue
            attempts.append(
                LaunchAttempt(mem_fraction=mf, ok=True, launch_s=server.launch_s, log_path=str(server.log_path))
            )
            return server, attempts
        assert last is not None, "empty mem-fraction ladder"
        tried = ", ".join(f"{a.mem_fraction:g}" for a in attempts)
        raise LadderExhausted(f"launch failed at every mem fraction ({tried}): {last.message}", attempts, last)
