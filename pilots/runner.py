"""The pilot runner: one fresh server per pilot config, the suite's per-config function, the shared outputs.

A pilot run opens the world (``harness.world.world.open_world_for``), then for each selected config launches a fresh server
at the published batch size (16), warms it up, and hands a ``ConfigRun`` to the suite's per-config function, which
returns ``PilotTrial`` records (one per task or instance). The runner fills in the per-config accept length where a
trial has none, then writes ``RUN_DIR``:

- ``manifest.json``: options, world identity, engine versions, configs, suite metadata, start/end, status;
- ``telemetry/<config>.jsonl``: one suite record per trial; ``telemetry/config_summaries.jsonl``: one per config;
- ``reports/merged.jsonl``: ``{config, task_id, record, evaluation}`` per trial;
- ``dataset_rows.jsonl``: dataset rows with the published pilot semantics (``pilots.trial.trial_row``).
"""

from __future__ import annotations

import socket
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from harness.core.clocks import WALL_CLOCK, ScaledClock, mono_ns
from harness.core.errors import HarnessError
from harness.core.jsonl import JsonlAppender, write_jsonl_atomic
from harness.engine.launch import RunningServer
from harness.engine.spec import EngineSpec
from harness.grid import SpecConfig
from harness.runs.manifest import PilotManifest
from harness.runs.measurement import finite
from harness.runs.rows import PILOT_ROWS
from harness.telemetry.client import TelemetrySource
from harness.world.world import World, open_world_for
from pilots.options import PilotOptions
from pilots.telemetry import Measured, measure
from pilots.trial import PilotTrial, trial_row


@dataclass
class ConfigRun:
    """What a suite's per-config function gets: one running server and the world's telemetry and clock."""

    name: str
    config: SpecConfig
    server: RunningServer
    telemetry: TelemetrySource
    clock: ScaledClock
    options: PilotOptions
    run_dir: Path
    launch_s: float | None = None
    world: World | None = None

    @property
    def base_url(self) -> str:
        return str(self.server.base_url)

    def measure(self, fn: Callable[[], Any]) -> Measured:
        return measure(self.telemetry, self.clock, fn)

    def trial(self, task_id: str, **kw: Any) -> PilotTrial:
        """A ``PilotTrial`` pre-filled with this config's identity."""
        return PilotTrial(
            suite=self.options.suite,
            config_name=self.name,
            steps=self.config.steps,
            topk=self.config.topk,
            num_draft_tokens=self.config.draft_tokens,
            task_id=task_id,
            **kw,
        )


PerConfigFn = Callable[[ConfigRun], list[PilotTrial]]


@dataclass
class ConfigOutcome:
    name: str
    config: SpecConfig
    trials: list[PilotTrial] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)


@dataclass
class PilotResult:
    run_dir: Path
    outcomes: list[ConfigOutcome]
    rows: list[dict[str, Any]]
    manifest: PilotManifest

    @property
    def trials(self) -> list[PilotTrial]:
        return [t for o in self.outcomes for t in o.trials]


def server_stats(server: RunningServer) -> dict[str, Any]:
    """``avg_spec_accept_length`` (server lifetime, warm-up included) and the raw server info, best effort."""
    try:
        info = server.client.server_info()
    except Exception as exc:  # noqa: BLE001 - best effort: the error is recorded in the stats instead
        return {"avg_spec_accept_length": None, "server_info_error": f"{type(exc).__name__}: {exc}"}
    return {
        "avg_spec_accept_length": finite(info.avg_spec_accept_length),
        "server_info": info.model_dump(mode="json"),
        "attention_backend": info.attention_backend,
    }


def warm_up(server: RunningServer) -> dict[str, Any]:
    """The published pilot warm-up: one short deterministic request."""
    t0 = time.monotonic()
    res = server.client.generate(
        "Return the single word READY.",
        max_new_tokens=8,
        temperature=0.0,
        ignore_eos=False,
        rid=f"pilot-warmup-{mono_ns()}",
    )
    return {"warmup_s": time.monotonic() - t0, "warmup_completion_tokens": getattr(res, "completion_tokens", None)}


def _engine_spec(options: PilotOptions, twin_gpu_url: str | None) -> EngineSpec:
    return options.engine_spec(
        twin_gpu_url=twin_gpu_url,
        twin_seed=options.seed if options.engine == "twin" else None,
        twin_faults=tuple(options.twin_faults),
    )


def _open_world(options: PilotOptions, run_dir: Path) -> World:
    return open_world_for(
        options,
        run_dir,
        spec=_engine_spec(options, options.twin_gpu_url),
        launch_timeout_s=options.launch_timeout,
        request_timeout_s=options.request_timeout,
    )


class PilotRunner:
    """Runs a suite's per-config function against a fresh server per config and writes every shared output."""

    def __init__(self, options: PilotOptions, *, suite_meta: dict[str, Any] | None = None, console: Any = None) -> None:
        self.options = options
        self.suite_meta = dict(suite_meta or {})
        self.run_dir = options.run_dir
        self.console = console
        self.configs = options.selected_configs()

    def _log(self, text: str) -> None:
        if self.console is not None:
            self.console.print(text, highlight=False)

    def run(self, per_config: PerConfigFn, *, finalize: Callable[[PilotResult], None] | None = None) -> PilotResult:
        """Open the world, run every config, write the outputs; ``finalize`` may add evaluations before reports."""
        requested = self.options.sglang_version
        version = EngineSpec.build(self.options.engine, sglang_version=requested).sglang_version
        self.options = o = self.options.model_copy(update={"sglang_version": version})  # before anything is written
        rd = self.run_dir
        rd.mkdir(parents=True, exist_ok=True)
        manifest = PilotManifest(
            suite=o.suite,
            run_id=o.run_id,
            options=o.model_dump(mode="json"),
            sglang_version=version,
            sglang_version_requested=requested,
            configs={n: c.as_list() for n, c in self.configs.items()},
            server_batch_size=o.server_batch_size,
            effective_concurrency=1,
            suite_meta=self.suite_meta,
            host=socket.gethostname(),
        )
        manifest.save(rd)
        try:
            return self._run(per_config, finalize, manifest)
        except BaseException as exc:
            manifest.failed(f"{type(exc).__name__}: {exc}")
            manifest.save(rd)
            raise

    def _run(
        self, per_config: PerConfigFn, finalize: Callable[[PilotResult], None] | None, manifest: PilotManifest
    ) -> PilotResult:
        o = self.options
        rd = self.run_dir
        outcomes: list[ConfigOutcome] = []
        with ExitStack() as stack:
            world = stack.enter_context(_open_world(o, rd))
            manifest.record_world(world, best_effort=True)
            manifest.save(rd)
            clock = getattr(world, "clock", None) or WALL_CLOCK
            with JsonlAppender(rd / "telemetry" / "config_summaries.jsonl") as summaries:
                for name, cfg in self.configs.items():
                    outcome = self._run_config(world, clock, name, cfg, per_config)
                    summaries.append(outcome.summary)
                    outcomes.append(outcome)
        rows: list[dict[str, Any]] = []
        for oc in outcomes:
            for t in oc.trials:
                rows.append(
                    trial_row(
                        t,
                        hardware=str(manifest.hardware or "unknown_gpu"),
                        index=len(rows),
                        run_id=o.run_id,
                        pilot_server_batch_size=o.server_batch_size,
                        mem_fraction=o.mem_fraction,
                        launch_s=finite(oc.summary.get("launch_s")),
                        sglang_version=o.sglang_version,
                        time_scale=o.time_scale,
                        power_limit_w=finite(manifest.power_limit_w),
                        engine={"kind": o.engine, "version": o.sglang_version},
                        attention_backend=oc.summary.get("attention_backend"),
                    )
                )
        result = PilotResult(rd, outcomes, rows, manifest)
        if finalize is not None:
            finalize(result)
        write_jsonl_atomic(
            rd / "reports" / "merged.jsonl",
            [
                {
                    "suite": o.suite,
                    "config": t.config_name,
                    "task_id": t.task_id,
                    "record": t.record,
                    "evaluation": t.evaluation,
                }
                for t in result.trials
            ],
        )
        write_jsonl_atomic(rd / PILOT_ROWS, result.rows)
        manifest.outputs = _listing(rd)
        manifest.finished()
        manifest.save(rd)
        return result

    def _run_config(
        self, world: World, clock: ScaledClock, name: str, cfg: SpecConfig, per_config: PerConfigFn
    ) -> ConfigOutcome:
        o = self.options
        outcome = ConfigOutcome(name, cfg)
        summary: dict[str, Any] = {
            "config": name,
            "steps": cfg.steps,
            "topk": cfg.topk,
            "num_draft_tokens": cfg.draft_tokens,
            "server_batch_size": o.server_batch_size,
            "effective_concurrency": 1,
            "error": None,
        }
        log_path = self.run_dir / "logs" / f"server-{name}.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        t0 = mono_ns()
        self._log(f"[bold]{o.suite}[/] config [cyan]{name}[/] {cfg}: launching server for batch {o.server_batch_size}")
        try:
            server = world.launcher.launch(cfg, o.server_batch_size, o.mem_fraction, log_path=log_path)
        except HarnessError as exc:
            summary.update(status="server_start_error", error=exc.message, launch_s=(mono_ns() - t0) / 1e9)
            self._log(f"  [red]server failed to start[/]: {exc.message}")
            outcome.summary = summary
            return outcome
        try:
            summary["launch_s"] = (mono_ns() - t0) / 1e9
            summary["base_url"] = str(server.base_url)
            try:
                summary.update(warm_up(server))
            except HarnessError as exc:
                summary.update(status="warmup_error", error=exc.message, wall_clock_s=(mono_ns() - t0) / 1e9)
                self._log(f"  [red]warm-up failed[/]: {exc.message}")
                outcome.summary = summary
                return outcome
            run = ConfigRun(name, cfg, server, world.telemetry, clock, o, self.run_dir, summary["launch_s"], world)
            outcome.trials = list(per_config(run))
            stats = server_stats(server)
        finally:
            _safe(server.stop)
        summary["wall_clock_s"] = (mono_ns() - t0) / 1e9
        summary["avg_spec_accept_length"] = stats.get("avg_spec_accept_length")
        summary["server_info"] = stats.get("server_info")
        summary["attention_backend"] = stats.get("attention_backend")
        server_avg = stats.get("avg_spec_accept_length")
        for t in outcome.trials:
            if t.accept_length is None:
                if cfg.is_baseline:
                    t.accept_length, t.accept_length_source = 1.0, "no_speculation"
                elif server_avg is not None:
                    t.accept_length, t.accept_length_source = server_avg, "server_average"
        summary["status"] = "completed"
        summary["trials"] = len(outcome.trials)
        summary.update(_means(outcome.trials))
        with JsonlAppender(self.run_dir / "telemetry" / f"{name}.jsonl") as out:
            for t in outcome.trials:
                out.append(
                    {**t.record, "accept_length": t.accept_length, "accept_length_source": t.accept_length_source}
                )
        outcome.summary = summary
        return outcome


def _listing(rd: Path) -> list[str]:
    """Output files of a run folder, without checkouts (``repositories/``) and git internals."""
    out = []
    for p in rd.rglob("*"):
        rel = p.relative_to(rd)
        if p.is_file() and rel.parts[0] != "repositories" and ".git" not in rel.parts and rel.name != "manifest.json":
            out.append(str(rel))
    return sorted(out)


def _means(trials: Iterable[PilotTrial]) -> dict[str, Any]:
    ts = list(trials)

    def mean(vals: list[float | None]) -> float | None:
        v = [x for x in vals if x is not None]
        return sum(v) / len(v) if v else None

    return {
        "mean_output_tokens_per_s": mean([t.output_tokens_per_s for t in ts]),
        "mean_energy_joules": mean([t.energy_joules for t in ts]),
        "mean_avg_power_watts": mean([t.avg_power_watts for t in ts]),
        "mean_accept_length": mean([t.accept_length for t in ts]),
        "valid_windows": sum(1 for t in ts if t.window_valid),
    }


def _safe(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001 - best effort: the error is recorded in place of the value
        return {"error": f"{type(exc).__name__}: {exc}"}
