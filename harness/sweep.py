"""The sweep: plan the grid, run it cell by cell (or config by config), write rows, resume a killed run.

Rows go to ``RUN_DIR/rows.jsonl`` and ``RUN_DIR/dataset.jsonl`` through ``harness.rows.RowStore`` (fsynced appends,
one row per cell id). ``--resume`` skips every cell that already has a row; a cell cut by a kill has none and runs
again. A launch that fails at every mem fraction, a crash, a timed-out request or an HTTP error becomes an error row
and the sweep goes on.
"""

from __future__ import annotations

import hashlib
import shutil
import signal
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Literal

from pydantic import BaseModel, Field, field_validator

from harness.bench import BenchSettings, CellError, CellResult, load_prompts, run_cell
from harness.console import SweepConsole
from harness.engine.argv import EngineSpec
from harness.engine.launch import LadderExhausted, LaunchAttempt, RunningServer, ServerLaunchError
from harness.errors import HarnessError, OutputError, UsageError
from harness.grid import ACTIONS, PUBLISHED_BATCH_SIZES, SpecConfig
from harness.manifest import new_manifest, read_manifest, write_manifest
from harness.powercap import PowerCapController, cap_slug
from harness.rows import EngineInfo, RowStore, SweepRow, error_row, grid_index, make_cell_id, throttling_flags
from harness.timeutil import mono_ns, wall_ns


class SweepOptions(BaseModel):
    """Everything that defines a sweep (saved in the manifest; ``--resume`` reuses it)."""

    engine: Literal["twin", "sglang"] = "twin"
    sglang_version: Literal["0.5.2", "0.5.23"] = "0.5.2"
    configs: list[tuple[int, int, int]] = Field(default_factory=lambda: [a.as_tuple() for a in ACTIONS])
    batch_sizes: list[int] = Field(default_factory=lambda: list(PUBLISHED_BATCH_SIZES))
    repeats: int = Field(1, ge=1)
    launch_per: Literal["cell", "config"] = "cell"
    mem_fractions: list[float] = Field(default_factory=lambda: [0.65, 0.55])
    num_prompts: int | None = Field(None, ge=1)
    output_tokens: int = Field(512, ge=1)
    prompts_file: str | None = None
    request_timeout_s: float = Field(300.0, gt=0)
    launch_timeout_s: float = Field(900.0, gt=0)
    stop_timeout_s: float = Field(60.0, gt=0)
    settle: str = "5"
    seed: int = 0
    time_scale: float = Field(1.0, gt=0)
    sampler_url: str | None = None
    twin_gpu_url: str | None = None
    model_path: str | None = None
    draft_model_path: str | None = None
    twin_faults: list[str] = Field(default_factory=list)
    hardware: str | None = None
    stream: bool | None = None
    engine_args: list[str] = Field(default_factory=list)
    """Extra server flags appended to every launch (e.g. ``--disable-overlap-schedule``)."""
    """Stream responses (published); None = stream on sglang, not on the twin (see ``stream_requests``)."""
    power_caps: list[str] | None = None
    """Power caps swept per pass (``harness.powercap`` labels: watts or ``N%`` of the default limit); None = none set."""
    power_cap_mode: Literal["set", "record"] = "set"
    """``set``: the harness sets each cap and restores the original limit; ``record``: only record the enforced limit."""
    energy_window: Literal["measured", "steady"] = "measured"
    """Which window feeds ``energy_joules``: today's measured window (published) or the steady-state one."""

    @property
    def stream_requests(self) -> bool:
        """Streaming costs client CPU per token; on the twin at a time scale > 1 that cost is scaled too and
        delays the end of the window far past the end of decoding, so the twin defaults to whole responses."""
        return self.stream if self.stream is not None else self.engine == "sglang"

    @field_validator("mem_fractions")
    @classmethod
    def _ladder(cls, v: list[float]) -> list[float]:
        if not v or any(not 0 < x < 1 for x in v):
            raise ValueError("mem fractions must be in (0, 1), e.g. 0.65,0.55")
        return v

    @property
    def spec_configs(self) -> list[SpecConfig]:
        return [SpecConfig(*c) for c in self.configs]


@dataclass(frozen=True)
class Cell:
    repeat: int
    batch_size: int
    config: SpecConfig
    index: int
    cap: str | None = None

    @property
    def cell_id(self) -> str:
        base = make_cell_id(self.repeat, self.batch_size, self.config)
        return f"{cap_slug(self.cap)}-{base}" if self.cap is not None else base


def plan_cells(opts: SweepOptions) -> list[Cell]:
    """Every cell in execution order: one whole pass per repeat; per cell: batch size then config; per config:
    config then batch size. Indexes follow the published order (repeat, batch size, config) in both modes."""
    configs, sizes = opts.spec_configs, opts.batch_sizes
    caps: list[str | None] = list(opts.power_caps) if opts.power_caps else [None]
    per_pass = len(configs) * len(sizes)
    cells: list[Cell] = []
    for r in range(opts.repeats):
        pairs = ([(bs, c) for bs in sizes for c in configs] if opts.launch_per == "cell"
                 else [(bs, c) for c in configs for bs in sizes])
        for i, cap in enumerate(caps):  # one pass per (repeat, cap): the cap is set once per pass
            offset = (r * (len(caps) - 1) + i) * per_pass  # caps after the first shift the published index
            cells += [Cell(r, bs, c, grid_index(r, bs, c, sizes, configs) + offset, cap) for bs, c in pairs]
    return cells


def parse_settle(text: str) -> tuple[str, float]:
    """``"5"`` -> ("sleep", 5.0) world seconds; ``"cool:60"`` -> ("cool", 60.0) degrees C; ``"0"`` -> no settle."""
    t = text.strip().lower()
    try:
        if t.startswith("cool:"):
            return "cool", float(t[5:])
        return "sleep", float(t.rstrip("s"))
    except ValueError:
        raise UsageError(f"cannot parse --settle {text!r}", fix="give seconds (e.g. 5) or cool:TEMP (e.g. cool:60)") from None


def derive_seed(seed: int, key: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{seed}:{key}".encode()).digest()[:4], "big")


class Interrupted(Exception):
    """SIGTERM received: stop cleanly, keep every written row."""


class SweepInterrupted(HarnessError):
    """The sweep was stopped (Ctrl-C or SIGTERM) after writing every finished row."""

    exit_code = 130


def _on_sigterm(signum: int, frame: Any) -> None:
    raise Interrupted()


def _num(x: Any) -> float | int | None:
    if x is None:
        return None
    if isinstance(x, bool):
        return int(x)
    return x if isinstance(x, int) else float(x)


class SweepRunner:
    """Runs a planned sweep in an open world, writing rows and the manifest."""

    def __init__(self, opts: SweepOptions, world: Any, run_dir: Path, manifest: dict[str, Any],
                 console: SweepConsole, power_cap: PowerCapController | None = None) -> None:
        self.opts = opts
        self.power_cap = power_cap
        self.enforced_w: float | None = None
        self.world = world
        self.run_dir = run_dir
        self.manifest = manifest
        self.console = console
        self.store = RowStore(run_dir)
        self.settings = BenchSettings(output_tokens=opts.output_tokens, num_prompts=opts.num_prompts,
                                      prompts=load_prompts(opts.prompts_file), request_timeout_s=opts.request_timeout_s,
                                      stream=opts.stream_requests)
        self.settle_kind, self.settle_value = parse_settle(opts.settle)
        self.cells = plan_cells(opts)
        self.run_id = manifest["run_id"]
        self._first_cell = True
        self.launches = 0

    # --- top level ------------------------------------------------------------------------------------------------
    def run(self) -> list[SweepRow]:
        self.store.open()
        done = self.store.done_cells()
        pending = [c for c in self.cells if c.cell_id not in done]
        self.manifest["cells_planned"] = len(self.cells)
        self.console.start(len(self.cells), len(self.cells) - len(pending))
        try:
            if self.opts.launch_per == "cell":
                for cell in pending:
                    self._run_cell_mode(cell)
            else:
                for group in self._config_groups(pending):
                    self._run_config_mode(group)
        finally:
            self.console.close()
            self.store.close()
        return self.store.latest()

    def _config_groups(self, pending: list[Cell]) -> Iterator[list[Cell]]:
        group: list[Cell] = []
        for cell in pending:
            if group and (cell.repeat, cell.cap, cell.config) != (group[0].repeat, group[0].cap, group[0].config):
                yield group
                group = []
            group.append(cell)
        if group:
            yield group

    # --- modes ----------------------------------------------------------------------------------------------------
    def _apply_cap(self, cell: Cell) -> None:
        """Set the cell's cap (a no-op while it is already in force) and note the enforced limit for its row."""
        if self.power_cap is not None:
            before = self.power_cap.current
            self.enforced_w = self.power_cap.apply(cell.cap)
            if cell.cap != before:
                self.console.line(f"power cap {cell.cap}: {self.enforced_w:g} W enforced")

    def _run_cell_mode(self, cell: Cell) -> None:
        self._apply_cap(cell)
        self._settle()
        t0 = time.monotonic()
        self.console.cell_started(cell.cell_id, cell.config.label, cell.batch_size, cell.repeat)
        self._launch_and_measure(cell, t0)

    def _run_config_mode(self, group: list[Cell]) -> None:
        key = f"r{group[0].repeat}-cfg-s{group[0].config.steps}k{group[0].config.topk}d{group[0].config.draft_tokens}"
        server: RunningServer | None = None
        attempts: list[LaunchAttempt] = []
        fallback = False
        self._apply_cap(group[0])
        try:
            for i, cell in enumerate(group):
                self._settle()
                t0 = time.monotonic()
                self.console.cell_started(cell.cell_id, cell.config.label, cell.batch_size, cell.repeat)
                if server is not None and not server.alive():
                    server.stop()
                    server = None
                if server is None and not fallback:
                    max_bs = max(c.batch_size for c in group[i:])
                    try:
                        server, attempts = self._launch(cell.config, max_bs, f"{key}-bs{max_bs}-from-{cell.cell_id}")
                    except LadderExhausted as exc:
                        # The server for the largest batch size does not fit: launch per cell for the rest.
                        self.console.line(f"{key}: launch for bs {max_bs} failed ({exc.message}); launching per cell")
                        fallback = True
                if fallback:
                    self._launch_and_measure(cell, t0)
                    continue
                assert server is not None
                try:
                    server.client.flush_cache()
                except Exception as exc:  # noqa: BLE001 - becomes the cell's error row
                    self._write_error(cell, f"flush_cache failed before the cell: {exc}", "http", attempts, t0, server)
                    server.stop()
                    server = None
                    continue
                if not self._measure(cell, server, attempts, t0):
                    server.stop()
                    server = None
        finally:
            if server is not None:
                server.stop()

    def _launch_and_measure(self, cell: Cell, t0: float) -> None:
        """One server for one cell (ladder applied), measured and stopped; a failed ladder is an error row."""
        try:
            server, attempts = self._launch(cell.config, cell.batch_size, cell.cell_id)
        except LadderExhausted as exc:
            self._write_error(cell, exc.message, "launch", exc.attempts, t0)
            return
        try:
            self._measure(cell, server, attempts, t0)
        finally:
            server.stop()

    # --- steps ----------------------------------------------------------------------------------------------------
    def _launch(self, config: SpecConfig, batch_size: int, stem: str) -> tuple[RunningServer, list[LaunchAttempt]]:
        launcher = self.world.launcher
        before = launcher.launches
        try:
            return launcher.launch_with_ladder(config, batch_size, self.opts.mem_fractions,
                                               log_stem=self.run_dir / "logs" / stem,
                                               seed=derive_seed(self.opts.seed, stem))
        finally:
            self.launches += launcher.launches - before
            self.manifest["launches"] = self.manifest.get("launches_before", 0) + self.launches

    def _measure(self, cell: Cell, server: RunningServer, attempts: list[LaunchAttempt], t0: float) -> bool:
        """Run the bench on ``server`` and write the cell's row; False when the cell failed (server unusable)."""
        if "engine_identity" not in self.manifest:
            self.manifest["engine_identity"] = self._engine_identity(server)
        try:
            result = run_cell(server, cell.batch_size, self.settings, self.world.telemetry, self.world.clock)
        except CellError as exc:
            self._write_error(cell, exc.message, exc.kind, attempts, t0, server)
            return False
        if self.opts.energy_window == "steady" and result.steady is None:
            self._write_error(cell, f"--energy-window steady: {result.steady_reason}", "steady_window", attempts, t0, server)
            return True  # the server is fine; only this cell's energy cannot be measured as asked
        self._write(self._row(cell, result, server, attempts, t0), cell)
        return True

    @staticmethod
    def _engine_identity(server: RunningServer) -> dict[str, Any]:
        """What the first server says it is (version, served models, twin marker), for the manifest."""
        out: dict[str, Any] = {"argv": server.argv}
        try:
            info = server.client.server_info()
            out["server_version"] = info.version
            out["twin"] = bool(info.raw.get("twin")) or "twin" in str(info.raw.get("version", "")).lower()
            out["models"] = server.client.models()
        except Exception as exc:  # noqa: BLE001 - informative only
            out["error"] = f"{type(exc).__name__}: {exc}"
        return out

    def _settle(self) -> None:
        if self._first_cell:
            self._first_cell = False
            return
        clock = self.world.clock
        if self.settle_kind == "sleep":
            clock.sleep(self.settle_value)
            return
        deadline = time.monotonic() + clock.wall_seconds(900.0)  # never wait more than 15 world minutes
        while time.monotonic() < deadline:
            s = self.world.telemetry.snapshot()
            temp = getattr(s, "temperature_c", None) if s is not None else None
            if temp is None or temp < self.settle_value:
                return
            clock.sleep(2.0)

    # --- rows -----------------------------------------------------------------------------------------------------
    def _common(self, cell: Cell, attempts: list[LaunchAttempt], t0: float, server: RunningServer | None) -> dict[str, Any]:
        ok = next((a for a in attempts if a.ok), None)
        first_mf = self.opts.mem_fractions[0]
        mf = ok.mem_fraction if ok else None
        identity: dict[str, Any] = {}
        if server is not None:
            identity = {"pid": server.pid, "port": server.port, "argv": server.argv, "log": str(server.log_path),
                        "launch_batch_size": server.batch_size}
        return dict(
            run_id=self.run_id,
            cell_id=cell.cell_id,
            attempt=len(attempts) or None,
            recorded_wall_ns=wall_ns(),
            mem_fraction=mf,
            retry_mem_fraction=mf if mf is not None and mf != first_mf else None,
            launch_s=ok.launch_s if ok else None,
            cell_wall_s=time.monotonic() - t0,
            engine=EngineInfo(kind=self.opts.engine, version=self.opts.sglang_version, identity=identity),
            sglang_version=self.opts.sglang_version,
            time_scale=self.world.clock.scale,
            power_limit_w=_num(self.enforced_w if self.enforced_w is not None else self.world.power_limit_w),
            extras={"launch_attempts": [a.model_dump() for a in attempts], "launch_per": self.opts.launch_per,
                    "stream": self.settings.stream, **self._cap_extras(cell)},
        )

    def _cap_extras(self, cell: Cell) -> dict[str, Any]:
        if cell.cap is None or self.power_cap is None:
            return {}
        return {"power_cap": {"label": cell.cap, "target_w": self.power_cap.targets.get(cell.cap), "mode": self.opts.power_cap_mode}}

    def _row(self, cell: Cell, r: CellResult, server: RunningServer, attempts: list[LaunchAttempt], t0: float) -> SweepRow:
        pre, after, w = r.pre or {}, r.after or {}, r.window
        published_throttle, power_thermal = throttling_flags(after.get("clock_event_reasons"))
        common = self._common(cell, attempts, t0, server)
        if self.power_cap is None and after.get("power_limit_w") is not None:  # record: the limit the device enforced
            common["power_limit_w"] = _num(after["power_limit_w"])
        common["extras"].update(step_time_samples=r.step_time_samples, window_energy_method=w.get("energy_method"),
                                window_source=r.window_source, client_wall_clock_s=r.client_wall_clock_s)
        energy, power, jpt = r.energy_joules, r.avg_power_watts, r.joules_per_token
        if self.opts.energy_window == "steady" and r.steady is not None:
            energy, power, jpt = r.steady["energy_j"], r.steady["avg_power_w"], r.steady["joules_per_token"]
        windows = {kind: v for kind, v in (("measured", r.measured), ("steady", r.steady)) if v is not None}
        if r.steady is None and r.steady_reason:
            windows["steady"] = {"kind": "steady", "reasons": [r.steady_reason]}
        return SweepRow(
            hardware=self.world.hardware, index=cell.index, repeat=cell.repeat, batch_size=cell.batch_size,
            steps=cell.config.steps, topk=cell.config.topk, num_draft_tokens=cell.config.draft_tokens,
            is_baseline=cell.config.is_baseline, error=None,
            accept_length=r.accept_length, speed_tok_s=r.speed_tok_s, speed_source=r.speed_source,
            step_time_s=r.step_time_s, wall_clock_s=r.wall_clock_s, wall_clock_tok_s=r.wall_clock_tok_s,
            total_output_tokens=r.total_output_tokens, energy_joules=_num(energy),
            avg_power_watts=_num(power), joules_per_token=_num(jpt),
            energy_window=self.opts.energy_window, window_energy=windows,
            gpu_temp_c_before=_num(pre.get("temperature_c")), gpu_temp_c=_num(after.get("temperature_c")),
            gpu_power_w=_num(after.get("power_w")), gpu_util_pct=_num(after.get("utilization_pct")),
            gpu_mem_used_mb=_num(after.get("memory_used_mb")), gpu_throttling=published_throttle,
            window_start_ns=r.window_start_ns, window_end_ns=r.window_end_ns,
            window_duration_s=_num(w.get("duration_s")), window_wall_duration_s=_num(w.get("wall_duration_s")),
            window_valid=w.get("valid"), window_reasons=list(w.get("reasons") or []),
            window_sample_count=w.get("sample_count"), window_coverage=_num(w.get("coverage")),
            window_avg_util_pct=_num(w.get("avg_util_pct")), window_max_temp_c=_num(w.get("max_temp_c")),
            window_max_power_w=_num(w.get("max_power_w")),
            window_clock_event_reasons_or=w.get("clock_event_reasons_or"),
            clock_event_reasons=after.get("clock_event_reasons"), gpu_throttling_power_thermal=power_thermal,
            energy_source=w.get("energy_method"), accept_length_source=r.accept_length_source,
            pre_gpu_temp_c=_num(pre.get("temperature_c")), pre_gpu_mem_used_mb=_num(pre.get("memory_used_mb")),
            pre_gpu_util_pct=_num(pre.get("utilization_pct")), pre_gpu_power_w=_num(pre.get("power_w")),
            gpu_name=w.get("gpu_name") or after.get("name"), gpu_uuid=w.get("gpu_uuid") or after.get("uuid"),
            n_requests=r.n_requests, req_accept_length_mean=r.req_accept_length_mean,
            req_accept_length_p50=r.req_accept_length_p50, req_latency_mean_s=r.req_latency_mean_s,
            req_latency_p50_s=r.req_latency_p50_s, req_latency_p95_s=r.req_latency_p95_s,
            **common,
        )

    def _write_error(self, cell: Cell, message: str, kind: str, attempts: list[LaunchAttempt], t0: float,
                     server: RunningServer | None = None) -> None:
        common = self._common(cell, attempts, t0, server)
        common["extras"]["error_kind"] = kind
        if server is not None:
            common["extras"]["log_tail"] = server.log_tail(15)
        common["retry_mem_fraction"] = None  # set only on measured rows that a lower rung recovered
        row = error_row(hardware=self.world.hardware, index=cell.index, repeat=cell.repeat, batch_size=cell.batch_size,
                        config=cell.config, error=f"{kind}: {message}", **common)
        self._write(row, cell)

    def _write(self, row: SweepRow, cell: Cell) -> None:
        self.store.append(row)
        self.manifest["cells_done"] = self.manifest.get("cells_done", 0) + 1
        write_manifest(self.run_dir, self.manifest)
        self.console.cell_done(cell.cell_id, cell.config.label, cell.batch_size, cell.repeat, speed=row.speed_tok_s,
                               j_per_tok=row.joules_per_token, error=row.error, retry_mf=row.retry_mem_fraction)


# --- run folders ----------------------------------------------------------------------------------------------------

RUN_FILES = ("rows.jsonl", "dataset.jsonl", "manifest.json", "published.jsonl")
RUN_DIRS = ("logs", "sampler", "reports")


def new_run_id() -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + uuid.uuid4().hex[:6]


def prepare_run_dir(out: Path, *, force: bool) -> None:
    """Create ``out``; refuse a folder that holds a run unless ``force`` (which deletes only the run's own files)."""
    if out.exists() and not out.is_dir():
        raise OutputError(f"--out {out} exists and is not a folder", fix="choose another --out")
    has_run = out.exists() and any((out / f).exists() for f in RUN_FILES[:3])
    if has_run and not force:
        raise OutputError(f"{out} already holds a run", fix=f"continue it with --resume {out}, or pass --force to start over")
    if has_run and force:
        for f in RUN_FILES:
            (out / f).unlink(missing_ok=True)
        for d in RUN_DIRS:
            shutil.rmtree(out / d, ignore_errors=True)
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / f".write-test-{uuid.uuid4().hex[:6]}"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise OutputError(f"cannot write to {out}: {exc.strerror}", fix="choose a writable --out folder") from None


def run_sweep(opts: SweepOptions, out: Path | None = None, *, resume: Path | None = None, force: bool = False,
              argv: list[str] | None = None, console: SweepConsole | None = None) -> tuple[Path, list[SweepRow], dict[str, Any]]:
    """Plan, open the world, run, and write rows + manifest; return (run folder, resolved rows, manifest)."""
    from harness.world import open_world

    console = console or SweepConsole()
    if resume is not None:
        manifest = read_manifest(resume)
        saved = SweepOptions.model_validate(manifest["options"])
        # Services of the killed run are gone; use the URLs given now (or start fresh ones).
        opts = saved.model_copy(update={"sampler_url": opts.sampler_url, "twin_gpu_url": opts.twin_gpu_url})
        run_dir = resume
        prepare_resume(run_dir)
        manifest["status"] = "running"
        manifest["launches_before"] = manifest.get("launches", 0)
    else:
        run_dir = out or Path("results") / new_run_id()
        prepare_run_dir(run_dir, force=force)
        manifest = new_manifest(new_run_id() if out else run_dir.name, argv or sys.argv, opts.model_dump())
    plan_cells(opts)  # validates the plan before anything starts
    check_energy_window(opts)
    if opts.prompts_file:
        load_prompts(opts.prompts_file)
    session: dict[str, Any] = {"started_ns": wall_ns(), "argv": argv or sys.argv, "resumed": resume is not None}
    manifest.setdefault("sessions", []).append(session)
    write_manifest(run_dir, manifest)
    spec_update: dict[str, Any] = {"sglang_version": opts.sglang_version, "twin_faults": tuple(opts.twin_faults),
                                   "extra_args": tuple(opts.engine_args)}
    if opts.model_path:
        spec_update["model_path"] = opts.model_path
    if opts.draft_model_path:
        spec_update["draft_model_path"] = opts.draft_model_path
    spec = EngineSpec(kind=opts.engine).model_copy(update=spec_update)
    old = signal.signal(signal.SIGTERM, _on_sigterm)
    t0 = mono_ns()
    try:
        with open_world(opts.engine, sampler_url=opts.sampler_url, twin_gpu_url=opts.twin_gpu_url,
                        time_scale=opts.time_scale, seed=opts.seed, run_dir=run_dir, spec=spec,
                        launch_timeout_s=opts.launch_timeout_s, request_timeout_s=opts.request_timeout_s,
                        stop_timeout_s=opts.stop_timeout_s, hardware=opts.hardware) as world:
            session["world"] = world.identity()
            manifest["world"] = world.identity()
            manifest["hardware"] = world.hardware
            manifest["power_limit_w"] = world.power_limit_w
            manifest["memory_total_mb"] = getattr(world.telemetry.snapshot(), "memory_total_mb", None)  # policies' mem/total
            manifest["seeds"] = {"seed": opts.seed, "twin_engine_seeds": "sha256(seed:launch key)"}
            power_cap = open_power_cap(opts, world, manifest, lambda: write_manifest(run_dir, manifest))
            runner = SweepRunner(opts, world, run_dir, manifest, console, power_cap)
            try:
                rows = runner.run()
                manifest["status"] = "complete"
            except (KeyboardInterrupt, Interrupted):
                manifest["status"] = "interrupted"
                raise
            finally:
                if power_cap is not None:
                    _restore_cap(power_cap, console, run_dir)
                session["launches"] = runner.launches
                session["wall_s"] = (mono_ns() - t0) / 1e9
                session["ended_ns"] = wall_ns()
                manifest["launches"] = manifest.get("launches_before", 0) + runner.launches
                manifest.pop("launches_before", None)
                manifest["wall_s"] = sum(s.get("wall_s", 0.0) for s in manifest["sessions"])
                write_manifest(run_dir, manifest)
    except HarnessError as exc:
        if manifest.get("status") == "running":
            manifest["status"] = "failed"
            manifest["error"] = exc.message
            write_manifest(run_dir, manifest)
        raise
    except (KeyboardInterrupt, Interrupted):
        raise SweepInterrupted(f"sweep interrupted; every finished cell is in {run_dir}/rows.jsonl",
                               fix=f"continue with: harness sweep --resume {run_dir}") from None
    finally:
        signal.signal(signal.SIGTERM, old)
    return run_dir, rows, manifest


def _restore_cap(power_cap: PowerCapController, console: SweepConsole, run_dir: Path) -> None:
    """Restore the original limit; a failure is reported (and kept in the manifest) without hiding the run's own."""
    try:
        restored = power_cap.restore()
    except HarnessError as exc:
        power_cap.state["restore_error"] = exc.message
        power_cap.save()
        console.line(f"could not restore the power limit: {exc.message} ({exc.fix}); "
                     f"harness sweep --resume {run_dir} restores it")
        return
    finally:
        close = getattr(power_cap.device, "close", None)
        if callable(close):
            close()
    if restored is not None:
        console.line(f"power limit restored to {restored:g} W")


def open_power_cap(opts: SweepOptions, world: Any, manifest: dict[str, Any],
                   save: Any) -> PowerCapController | None:
    """The cap controller of a sweep with ``--power-caps`` (None without); every cap is checked against the GPU's
    limits before the first cell, and the original limit is saved in the manifest before the first set."""
    if not opts.power_caps:
        return None
    from harness.powercap import NvmlCapDevice, TwinCapDevice

    device: Any = TwinCapDevice(world.twin_gpu_url) if opts.engine == "twin" else NvmlCapDevice(0)
    controller = PowerCapController(device, opts.power_cap_mode, manifest, save)
    controller.begin(list(opts.power_caps))
    return controller


def check_energy_window(opts: SweepOptions) -> None:
    """``--energy-window steady`` needs a non-empty steady-state window at every batch size (N > 2B requests)."""
    if opts.energy_window != "steady":
        return
    from harness.telemetry.steady import min_requests

    short = [bs for bs in opts.batch_sizes if (opts.num_prompts or max(16, bs)) < min_requests(bs)]
    if short:
        need = max(min_requests(bs) for bs in short)
        raise UsageError(f"--energy-window steady needs more than 2 x batch size requests per cell; batch size(s) "
                         f"{', '.join(map(str, short))} would have an empty steady-state window",
                         fix=f"pass --num-prompts {need} (or more), or use --energy-window measured")


def prepare_resume(run_dir: Path) -> None:
    """Repair torn tails before resuming (RowStore also re-derives missing published lines)."""
    from harness.jsonl import repair_torn_tail

    for name in ("rows.jsonl", "dataset.jsonl"):
        repair_torn_tail(run_dir / name)
