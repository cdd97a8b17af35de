"""``harness pilot --suite terminalbench``: Harbor + Terminus 2 per pilot config, trials windowed on the sampler.

Per config the shared ``PilotRunner`` launches the server (batch 16), warms it up and calls ``run_config``, which runs
``harbor run`` once (one trial at a time, unique job name), reads every trial ``result.json`` (Harbor exits 0 even
when trials fail), asks the sampler for each trial's ``agent_execution`` window and returns ``PilotTrial`` records
with window-average telemetry. The runner then writes the shared outputs; this module prints the published table and
the stuck-call table and writes ``reports/terminalbench_trials.jsonl``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Iterator

from pydantic import BaseModel, ConfigDict, Field, field_validator
from rich.console import Console

from harness.core.errors import HarnessError
from harness.core.http import http_get
from harness.core.jsonl import write_json_atomic, write_jsonl_atomic
from harness.telemetry.windows import WindowStats
from pilots.options import PilotOptions
from pilots.runner import ConfigRun, PilotResult, PilotRunner
from pilots.telemetry import energy_from_window, window_for
from pilots.terminalbench.command import HarborRunSpec, ServerLimits, resolve_env
from pilots.terminalbench.harbor_install import (
    LOCAL_SANDBOX_IMPORT,
    check_local_sandbox_host,
    harbor_environ,
    harbor_version,
    resolve_harbor_bin,
)
from pilots.terminalbench.report import print_report
from pilots.terminalbench.results import TrialOutcome, job_window_ns, read_job
from pilots.terminalbench.tasks import TaskSource, resolve_tasks
from pilots.terminalbench.windows import DEFAULT_STUCK_FRACTION, call_profile, segment
from pilots.trial import PilotTrial

TWIN_FAILURE_NOTE = (
    "expected failure: the twin engine answers with filler text, not a model's reply, so Terminus 2 cannot parse "
    "any command and the task cannot be solved"
)


class TerminalBenchOptions(BaseModel):
    """Suite flags of ``harness pilot --suite terminalbench`` (after the common flags)."""

    model_config = ConfigDict(extra="forbid")

    harbor_bin: str | None = Field(
        default=None, description="Harbor executable (default .harbor-venv/bin/harbor or $HARBOR_BIN)."
    )
    dataset: str | None = Field(
        default=None, description="name@version (default terminal-bench-sample@2.0; fixture eagle-local-sample@1.0)."
    )
    tasks: list[str] = Field(
        default_factory=list, description="Task names/globs (default regex-log,log-summary-date-ranges)."
    )
    task_dir: Path | None = Field(default=None, description="A Harbor task folder or folder of tasks (harbor -p).")
    registry_path: Path | None = Field(default=None, description="A local registry.json (harbor --registry-path).")
    env: str | None = Field(
        default=None,
        description="Harbor environment: docker (default), local (this package's sandbox), or module:Class.",
    )
    agent_timeout_s: float = Field(default=900.0, gt=0, description="Agent timeout in world seconds (published 900).")
    max_turns: int | None = Field(default=None, ge=1, description="Terminus 2 max turns (default unlimited).")
    max_tokens: int = Field(default=4096, ge=1, description="max_tokens per LLM call (llm_call_kwargs).")
    stuck_fraction: float = Field(
        default=DEFAULT_STUCK_FRACTION, gt=0, le=1, description="Flag a call that takes this share of a trial."
    )
    harbor_tz: str | None = Field(
        default=None, description="TZ for the Harbor process (its job times are naive local time)."
    )
    keep_sandboxes: bool = Field(default=False, description="Keep the local sandbox roots after each trial.")

    @field_validator("tasks", mode="before")
    @classmethod
    def _split(cls, v: Any) -> Any:
        if isinstance(v, str):
            return [p for p in v.split(",") if p]
        return v


SUITE_OPTIONS = TerminalBenchOptions


def server_limits(server: Any) -> ServerLimits:
    """Context length and max input tokens from ``/get_server_info`` (``max_req_input_len``) and ``/v1/models``."""
    ctx, max_in, sources = None, None, []
    try:
        raw = server.client.server_info().raw or {}
        max_in = raw.get("max_req_input_len") or None
        ctx = raw.get("context_length") or None
        if max_in:
            sources.append("server_info.max_req_input_len")
    except Exception:  # noqa: BLE001 - best effort: an unknown limit falls back to /v1/models, then "unknown"
        pass
    if ctx is None:
        try:
            data = http_get(f"{server.base_url}/v1/models", timeout=10).json().get("data") or []
            ctx = data[0].get("max_model_len") if data else None
            if ctx:
                sources.append("v1_models.max_model_len")
        except Exception:  # noqa: BLE001 - best effort, as above
            pass
    return ServerLimits(context_length=ctx, max_input_tokens=max_in or ctx, source="+".join(sources) or "unknown")


def served_model(server: Any, fallback: str) -> str:
    try:
        models = server.client.models()
    except Exception:  # noqa: BLE001 - best effort: the configured model name is the fallback
        models = []
    return models[0] if models else fallback


class TerminalBenchPilot:
    """Holds the resolved suite settings; ``run_config`` is the per-config function handed to ``PilotRunner``."""

    def __init__(self, options: PilotOptions, extra: TerminalBenchOptions) -> None:
        self.options = options
        self.extra = extra
        self.run_dir = options.run_dir.resolve()
        self.harbor_bin = resolve_harbor_bin(extra.harbor_bin)
        self.harbor_version = harbor_version(self.harbor_bin)
        self.tasks: TaskSource = resolve_tasks(
            fixture=options.fixture,
            task_dir=extra.task_dir,
            registry_path=extra.registry_path,
            dataset=extra.dataset,
            tasks=extra.tasks or None,
            work_dir=self.run_dir / "harbor",
        )
        self.env = resolve_env(extra.env, fixture=options.fixture)
        if self.env == LOCAL_SANDBOX_IMPORT:
            check_local_sandbox_host()

    def suite_meta(self) -> dict[str, Any]:
        return {
            "harbor_bin": str(self.harbor_bin),
            "harbor_version": self.harbor_version,
            "agent": "terminus-2",
            "tasks": self.tasks.model_dump(),
            "environment": self.env or "docker",
            "agent_timeout_s": self.extra.agent_timeout_s,
            "harbor_agent_timeout_wall_s": self.agent_timeout_wall_s,
            "max_turns": self.extra.max_turns,
            "max_tokens": self.extra.max_tokens,
            "temperature": 0.0,
            "stuck_fraction": self.extra.stuck_fraction,
            "harbor_tz": self.extra.harbor_tz,
        }

    @property
    def agent_timeout_wall_s(self) -> float:
        """Harbor enforces its timeout on the wall clock; the twin runs ``time_scale`` times faster."""
        return self.extra.agent_timeout_s / self.options.time_scale

    def spec_for(self, run: ConfigRun, limits: ServerLimits, model: str) -> HarborRunSpec:
        job_name = f"{self.options.run_id}-{run.name}-{uuid.uuid4().hex[:6]}"
        max_in = limits.max_input_tokens or limits.context_length or 32768
        max_tokens = (
            self.extra.max_tokens if not limits.context_length else min(self.extra.max_tokens, limits.context_length)
        )
        env_kwargs: dict[str, Any] = {}
        if self.env == LOCAL_SANDBOX_IMPORT:
            env_kwargs = {"sandbox_base": str(self.run_dir / "harbor" / "sandboxes")}
            if self.extra.keep_sandboxes:
                env_kwargs["keep_root"] = True
        return HarborRunSpec(
            harbor_bin=str(self.harbor_bin),
            job_name=job_name,
            jobs_dir=str(self.run_dir / "harbor" / "jobs"),
            config_path=str(self.run_dir / "harbor" / f"{job_name}.config.json"),
            model=f"openai/{model}",
            api_base=f"{run.base_url.rstrip('/')}/v1",
            max_tokens=max_tokens,
            max_input_tokens=int(max_in),
            max_turns=self.extra.max_turns,
            agent_timeout_s=self.agent_timeout_wall_s,
            tasks=self.tasks,
            env=self.env,
            env_kwargs=env_kwargs,
            record_terminal_session=False if env_kwargs else None,
        )

    def harbor_deadline_s(self) -> float:
        n = max(1, len(self.tasks.tasks) or 10)
        return n * (self.agent_timeout_wall_s + 900.0) + 300.0

    def run_config(self, run: ConfigRun) -> list[PilotTrial]:
        limits = server_limits(run.server)
        model = served_model(run.server, self.options.target_model)
        spec = self.spec_for(run, limits, model)
        spec.write_config()
        log_path = self.run_dir / "logs" / f"harbor-{run.name}.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        argv = spec.argv()
        t0 = time.monotonic()
        job_dir = Path(spec.jobs_dir) / spec.job_name
        n_tasks = len(self.tasks.tasks) or None
        rc, error = _run_harbor(
            argv,
            log_path,
            env=harbor_environ(tz=self.extra.harbor_tz),
            cwd=self.run_dir,
            timeout_s=self.harbor_deadline_s(),
            progress=lambda elapsed: _progress_line(run.name, job_dir, n_tasks, elapsed, log_path),
        )
        harbor_wall_s = time.monotonic() - t0
        meta: dict[str, Any] = {
            "job_name": spec.job_name,
            "job_dir": str(job_dir),
            "argv": argv,
            "harbor_rc": rc,
            "harbor_error": error,
            "harbor_wall_s": harbor_wall_s,
            "log": str(log_path),
            "server_limits": limits.model_dump(),
            "served_model": model,
        }
        write_json_atomic(self.run_dir / "harbor" / f"{spec.job_name}.run.json", meta)
        try:
            job, outcomes = read_job(job_dir)
        except HarnessError as exc:
            job, outcomes = None, []
            meta["read_error"] = exc.message
        if not outcomes:
            why = "; ".join(
                x
                for x in (
                    error or f"harbor exited {rc} without trial results",
                    _log_tail(log_path),
                    meta.get("read_error"),
                )
                if x
            )
            return [
                run.trial(
                    name,
                    status="harbor_error",
                    note=why,
                    telemetry_mode="window_average",
                    record={"config": run.name, "task": name, "status": "harbor_error", "error": why, **meta},
                )
                for name in (self.tasks.tasks or ["(all)"])
            ]
        job_start, job_end, tz_how = (
            job_window_ns(job, outcomes, self.extra.harbor_tz) if job else (None, None, "missing")
        )
        windows = {w.trial_name: w for w in segment(outcomes, job_start_ns=job_start, job_end_ns=job_end)}
        trials = []
        for o in outcomes:
            trials.append(
                trial_from_outcome(
                    run,
                    o,
                    engine=self.options.engine,
                    time_scale=self.options.time_scale,
                    stuck_fraction=self.extra.stuck_fraction,
                    problems=windows[o.trial_name].problems,
                    meta=meta | {"job_time_zone": tz_how},
                )
            )
        return trials


def trial_from_outcome(
    run: ConfigRun,
    o: TrialOutcome,
    *,
    engine: str,
    time_scale: float,
    stuck_fraction: float,
    problems: list[str] | None = None,
    meta: dict[str, Any] | None = None,
) -> PilotTrial:
    """One Harbor trial as a ``PilotTrial``: its ``agent_execution`` window on the sampler, world-second duration,
    tokens, per-call profile, and the full record (window-average telemetry, published pilot semantics)."""
    window: WindowStats | None = None
    if o.agent_start_ns is not None and o.agent_end_ns is not None and o.agent_end_ns > o.agent_start_ns:
        window = window_for(run.telemetry, o.agent_start_ns, o.agent_end_ns)
    energy, power = energy_from_window(window)
    dur = window.duration_s if window is not None and window.valid else None
    elapsed = float(dur) if dur else (o.agent_wall_s * time_scale if o.agent_wall_s is not None else None)
    prof = call_profile(o, time_scale=time_scale, trial_s=elapsed, stuck_fraction=stuck_fraction)
    note = TWIN_FAILURE_NOTE if engine == "twin" and not o.success else ""
    record = {
        "config": run.name,
        "task": o.task_name,
        "trial_name": o.trial_name,
        "status": o.status,
        "success": o.success,
        "reward": o.reward,
        "exception_type": o.exception_type,
        "exception_message": o.exception_message,
        "timed_out": o.timed_out,
        "agent_start_ns": o.agent_start_ns,
        "agent_end_ns": o.agent_end_ns,
        "duration_s": elapsed,
        "agent_wall_s": o.agent_wall_s,
        "time_scale": time_scale,
        "output_tokens": o.n_output_tokens,
        "input_tokens": o.n_input_tokens,
        "cache_tokens": o.n_cache_tokens,
        "output_tokens_per_s": (o.n_output_tokens / elapsed) if o.n_output_tokens and elapsed else None,
        "energy_joules": energy,
        "avg_power_watts": power,
        "avg_temp_c": window.avg_temp_c if window else None,
        "avg_util_pct": window.avg_util_pct if window else None,
        "window_valid": window is not None and window.valid,
        "window_reasons": list(window.reasons) if window else [],
        "window_problems": list(problems or []),
        "n_episodes": o.n_episodes,
        "n_steps": o.n_steps,
        "summarization_count": o.summarization_count,
        "calls": prof.model_dump(),
        "stuck_call": prof.stuck,
        "expected_failure": note or None,
        "harbor": dict(meta or {}) | {"trial_dir": o.trial_dir},
    }
    return run.trial(
        o.task_name,
        status=o.status,
        success=o.success,
        start_ns=o.agent_start_ns,
        end_ns=o.agent_end_ns,
        elapsed_s=elapsed,
        prompt_tokens=o.n_input_tokens,
        completion_tokens=o.n_output_tokens,
        energy_joules=energy,
        avg_power_watts=power,
        window=window,
        telemetry_mode="window_average",
        note=note or (o.exception_type or ""),
        record=record,
    )


PROGRESS_EVERY_S = 30.0


def _progress_line(config: str, job_dir: Path, n_tasks: int | None, elapsed_s: float, log_path: Path) -> None:
    """One line on stderr while Harbor runs: trials finished so far (their ``result.json``), time, where the log is."""
    done = len(list(job_dir.glob("*/result.json"))) if job_dir.is_dir() else 0
    of = f"/{n_tasks}" if n_tasks else ""
    print(
        f"[terminalbench] {config}: {done}{of} trials finished, {elapsed_s / 60:.1f} min (harbor log: {log_path})",
        file=sys.stderr,
        flush=True,
    )


@contextlib.contextmanager
def _terminate_stops_harbor() -> Iterator[None]:
    """While Harbor runs, SIGTERM and SIGHUP unwind like Ctrl-C (so its process group is stopped, never orphaned:
    it runs in a session of its own, where a terminal's or a container's stop does not reach it)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def _raise(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    old = {sig: signal.signal(sig, _raise) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


def _run_harbor(
    argv: list[str],
    log_path: Path,
    *,
    env: dict[str, str],
    cwd: Path,
    timeout_s: float,
    progress: Callable[[float], None] | None = None,
) -> tuple[int | None, str | None]:
    """Run Harbor to completion (its own process group, stopped on timeout, Ctrl-C, SIGTERM or SIGHUP); ``progress``
    is called every ``PROGRESS_EVERY_S`` with the seconds so far. (exit code, error text)."""
    cwd.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        log.write(("$ " + " ".join(argv) + "\n").encode())
        log.flush()
        proc = subprocess.Popen(
            argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=str(cwd),
            start_new_session=True,
        )
        try:
            with _terminate_stops_harbor():
                rc = _wait_reporting(proc, timeout_s, progress)
        except subprocess.TimeoutExpired:
            _stop_group(proc)
            return None, f"harbor did not finish within {timeout_s:.0f} s and was stopped"
        except BaseException:
            _stop_group(proc)
            raise
        _stop_group(proc)  # leftovers of Harbor's process group (e.g. sandbox holders after a crash)
    return rc, None if rc == 0 else f"harbor exited {rc} (bad configuration?); see {log_path}"


def _wait_reporting(proc: subprocess.Popen, timeout_s: float, progress: Callable[[float], None] | None) -> int:
    """``proc.wait`` for at most ``timeout_s``, calling ``progress`` with the seconds so far every
    ``PROGRESS_EVERY_S``; ``subprocess.TimeoutExpired`` past it."""
    t0 = time.monotonic()
    while True:
        left = t0 + timeout_s - time.monotonic()
        if left <= 0:
            raise subprocess.TimeoutExpired(proc.args, timeout_s)
        try:
            return proc.wait(timeout=min(left, PROGRESS_EVERY_S))
        except subprocess.TimeoutExpired:
            if progress is not None and time.monotonic() - t0 < timeout_s:
                progress(time.monotonic() - t0)


def _log_tail(path: Path, lines: int = 3) -> str:
    """The last non-empty lines of Harbor's log (its own error message, e.g. "Docker daemon is not running")."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    tail = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("$ ")][-lines:]
    return " | ".join(tail)


def _stop_group(proc: subprocess.Popen) -> None:
    if proc.poll() is not None:  # Harbor is gone: kill whatever is left in its process group, if anything
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        return
    for sig, wait in ((signal.SIGTERM, 15), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue
        break
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _finalize(pilot: TerminalBenchPilot, result: PilotResult) -> None:
    """Put the per-config accept length (filled by the runner) into each record and write the suite's trial file."""
    for t in result.trials:
        t.record["accept_length"] = t.accept_length
        t.record["accept_length_source"] = t.accept_length_source
    write_jsonl_atomic(result.run_dir / "reports" / "terminalbench_trials.jsonl", [t.record for t in result.trials])


def run(options: PilotOptions, extra: TerminalBenchOptions | list[str] | None = None) -> PilotResult:
    """Run the pilot and print its tables; returns the shared ``PilotResult``."""
    extra = extra if isinstance(extra, TerminalBenchOptions) else TerminalBenchOptions()
    console = Console(emoji=False)
    pilot = TerminalBenchPilot(options, extra)
    runner = PilotRunner(options, suite_meta=pilot.suite_meta(), console=console)
    result = runner.run(pilot.run_config, finalize=lambda r: _finalize(pilot, r))
    print_report(result, console, engine=options.engine)
    if result.trials and all(t.status == "harbor_error" for t in result.trials):
        raise HarborRunError(
            f"Harbor ran no trial in any config ({result.trials[0].record.get('error')})",
            fix="Harbor's docker environment needs a Docker daemon and the task images; offline use --fixture, or "
            "--env local with --task-dir/--registry-path (outputs were still written to " + str(result.run_dir) + ")",
        )
    return result


class HarborRunError(HarnessError):
    """Harbor started no trial at all (a configuration or environment problem, not a task failure): like a server
    that failed to launch, exit 5 (7 is a missing optional extra)."""

    exit_code = 5
