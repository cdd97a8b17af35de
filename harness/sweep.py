"""The sweep: plan the grid, run it cell by cell (or config by config), write rows, resume a killed run.

Rows go to ``RUN_DIR/rows.jsonl`` and ``RUN_DIR/dataset.jsonl`` through ``harness.rows.RowStore`` (fsynced appends,
one row per cell id). One process writes a run folder (``harness.runlock``). ``--resume`` skips every cell that
already has a row; a cell cut by a kill has none and runs again (``--retry-errors`` also re-runs error rows).
A launch that fails at every mem fraction, a crash, a timed-out request or an HTTP error becomes an error row and the
sweep goes on; a lost world service (``harness.health``) writes no row: the harness restarts its own sampler and runs
the cell again, or stops the run (status ``failed``, exit 4) so that ``--resume`` runs it later.
"""

from __future__ import annotations

import errno
import hashlib
import math
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
from harness.engine.argv import DEFAULT_ATTENTION_BACKEND, EngineSpec
from harness.engine.version import resolve_version
from harness.engine.launch import LadderExhausted, LaunchAttempt, RunningServer
from harness.errors import HarnessError, OutputError, ServiceUnavailableError, UsageError
from harness.health import ServiceProblem
from harness.grid import ACTIONS, PUBLISHED_BATCH_SIZES, SpecConfig
from harness.jsonl import write_error
from harness.manifest import MANIFEST, read_options, new_manifest, read_manifest, write_manifest
from harness.runlock import RunLock
from harness.powercap import PowerCapController, cap_slug
from harness.rows import EngineInfo, RowStore, SweepRow, error_row, grid_index, make_cell_id, throttling_flags
from harness.timeutil import mono_ns, wall_ns


class SweepOptions(BaseModel):
    """Everything that defines a sweep (saved in the manifest; ``--resume`` reuses it)."""

    engine: Literal["twin", "sglang"] = "twin"
    sglang_version: str = "auto"
    """``auto`` (the sglang installed where the server runs; the twin's default emulation) or a version in the
    supported range; ``run_sweep`` resolves it before anything starts and the manifest keeps the resolved one."""
    attention_backend: str | None = DEFAULT_ATTENTION_BACKEND
    """Pinned for every config; None (``--attention-backend auto``) lets sglang choose per config."""
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
    strategy: Literal["grid", "active"] = Field("grid", description="grid: measure every planned cell; active: "
                                                "measure only the cells that can still change the recipe (docs/active.md)")
    budget: float | None = Field(None, gt=0, le=1, description="active: GPU-seconds (launch + measure) as a fraction "
                                 "of the predicted full grid's (default 0.2 when --budget-s is not given)")
    budget_s: float | None = Field(None, gt=0, description="active: GPU-seconds (device time) the sweep may spend")

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
    fix = "give seconds >= 0 (e.g. 5) or cool:TEMP with 0 < TEMP < 150 (e.g. cool:60)"
    try:
        kind, value = ("cool", float(t[5:])) if t.startswith("cool:") else ("sleep", float(t.rstrip("s")))
    except ValueError:
        raise UsageError(f"cannot parse --settle {text!r}", fix=fix) from None
    if not math.isfinite(value) or (kind == "sleep" and value < 0) or (kind == "cool" and not 0 < value < 150):
        raise UsageError(f"--settle {text!r} is out of range", fix=fix)
    return kind, value


def derive_seed(seed: int, key: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{seed}:{key}".encode()).digest()[:4], "big")


class Interrupted(BaseException):
    """SIGTERM received: stop cleanly, keep every written row. A BaseException, like KeyboardInterrupt, so that no
    ``except Exception`` on the way (a probe read, an HTTP retry) can swallow it and let the run finish "complete"."""


class SweepInterrupted(HarnessError):
    """The sweep was stopped (Ctrl-C or SIGTERM) after writing every finished row."""

    exit_code = 130


MAX_SERVICE_RECOVERIES = 3
"""Sampler restarts one sweep session may make before it stops instead."""
MEMORY_RELEASE_TIMEOUT_S = 60.0
"""Before a launch, wait at most this long (wall s) for the GPU memory of the previous server to be free again."""

_FIX_BY_KIND = {
    "device": "bring the GPU back (twin: start `harness twin gpu`, or drop --twin-gpu to let the harness start one), "
              "then continue with: harness sweep --resume {run_dir}",
    "sampler": "start the sampler again (harness sampler serve ...), then continue with: harness sweep --resume {run_dir}",
    "probe": "check the GPU and its driver (nvidia-smi; twin: the device's faults), then continue with: "
             "harness sweep --resume {run_dir}",
}


class InfrastructureLost(Exception):
    """A world service was lost while ``cell_id`` ran (or before it): the cell gets no row; recover or stop."""

    def __init__(self, problem: ServiceProblem, cell_id: str) -> None:
        super().__init__(problem.message)
        self.problem = problem
        self.cell_id = cell_id


class WorldLost(ServiceUnavailableError):
    """A lost world service the harness could not bring back: the run stops, not complete, resumable."""


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
                 console: SweepConsole, power_cap: PowerCapController | None = None, *, retry_errors: bool = False) -> None:
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
        self.retry_errors = retry_errors
        self.recoveries = 0
        self._written: set[str] = set()
        self._retry: set[str] = set()
        self._idle_mem_mb: float | None = None

    # --- top level ------------------------------------------------------------------------------------------------
    def run(self) -> list[SweepRow]:
        self.store.open()
        if self.retry_errors:
            self._retry = {cid for cid, row in self.store.latest_by_cell().items() if row.is_error}
        self.manifest["cells_planned"] = len(self.cells)
        pending = self._pending()
        self.console.start(len(self.cells), len(self.cells) - len(pending))
        try:
            if self.opts.strategy == "active":  # measures only the planned cells that can change the recipe
                from harness.active.loop import ActiveSweep

                ActiveSweep(self).run()
            else:
                self.run_cells(self.cells)
        finally:
            self.console.close()
            self.store.close()
        return self.store.latest()

    def run_cells(self, cells: list[Cell]) -> None:
        """Measure those of ``cells`` still pending; a lost sampler is restarted (bounded) and the cut cell runs again."""
        wanted = {c.cell_id for c in cells}
        pending = [c for c in self._pending() if c.cell_id in wanted]
        while pending:
            try:
                self._run_pending(pending)
                break
            except InfrastructureLost as lost:
                self._recover(lost)  # raises WorldLost when the service cannot come back
            pending = [c for c in self._pending() if c.cell_id in wanted]

    def _pending(self) -> list[Cell]:
        """Cells without a row, plus (``--retry-errors``) cells whose error row this session has not replaced."""
        done = self.store.done_cells()
        return [c for c in self.cells
                if c.cell_id not in done or (c.cell_id in self._retry and c.cell_id not in self._written)]

    def _run_pending(self, pending: list[Cell]) -> None:
        if self.opts.launch_per == "cell":
            for cell in pending:
                self._run_cell_mode(cell)
        else:
            for group in self._config_groups(pending):
                self._run_config_mode(group)

    # --- world services ------------------------------------------------------------------------------------------
    def _check_world(self, cell: Cell) -> None:
        """Raise ``InfrastructureLost`` when a world service is gone (asked before each cell and each bad row)."""
        problem = self.world.check()
        if problem is not None:
            raise InfrastructureLost(problem, cell.cell_id)

    def _recover(self, lost: InfrastructureLost) -> None:
        """Restart the harness's own sampler (bounded) and go on; anything else stops the run with a clear error."""
        problem = lost.problem
        event: dict[str, Any] = {"wall_ns": wall_ns(), "cell_id": lost.cell_id, "kind": problem.kind,
                                 "problem": problem.message}
        self.manifest.setdefault("infrastructure_events", []).append(event)
        # Only a sampler that is gone or stalled is worth a restart; failing GPU reads are the GPU's, not the sampler's.
        if problem.kind == "sampler" and problem.restartable and self.recoveries < MAX_SERVICE_RECOVERIES:
            self.recoveries += 1
            self.console.line(f"{problem.message} (cell {lost.cell_id}, no row written): restarting the sampler")
            try:
                self.world.restart_sampler()
                problem = self.world.check()
            except HarnessError as exc:
                problem = ServiceProblem(problem.kind, f"{problem.message}; restarting the sampler failed: {exc.message}")
            if problem is None:
                event["action"] = "restarted the sampler; the cell runs again"
                write_manifest(self.run_dir, self.manifest)
                return
        event["action"] = "stopped the run"
        write_manifest(self.run_dir, self.manifest)
        raise WorldLost(f"{problem.message}: the sweep stopped before finishing {lost.cell_id} (no row written for it; "
                        "every finished cell is kept)", fix=_FIX_BY_KIND[problem.kind].format(run_dir=self.run_dir))

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
        """Set the cell's cap (a no-op while it is already in force) and note the enforced limit for its row. The world
        is checked first: a lost device is an infrastructure failure, not a cap error from the controller."""
        if self.power_cap is not None:
            self._check_world(cell)
            before = self.power_cap.current
            self.enforced_w = self.power_cap.apply(cell.cap)
            if cell.cap != before:
                enforced = "unknown" if self.enforced_w is None else f"{self.enforced_w:g}"
                self.console.line(f"power cap {cell.cap}: {enforced} W enforced")

    def _run_cell_mode(self, cell: Cell) -> None:
        self._apply_cap(cell)
        self._settle()
        self._check_world(cell)
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
                self._check_world(cell)
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
        self._await_memory_release()
        before = launcher.launches
        try:
            return launcher.launch_with_ladder(config, batch_size, self.opts.mem_fractions,
                                               log_stem=self.run_dir / "logs" / stem,
                                               seed=derive_seed(self.opts.seed, stem))
        finally:
            self.launches += launcher.launches - before
            self.manifest["launches"] = self.manifest.get("launches_before", 0) + self.launches

    def _await_memory_release(self) -> None:
        """Before a launch: wait (at most ``MEMORY_RELEASE_TIMEOUT_S``) until the GPU's memory use is back to what it
        was before the previous launch, so a dead server's memory (a real GPU frees it some time after the process
        dies) never turns the next cell into a false out-of-memory row. Then note the level for the next launch."""
        base = self._idle_mem_mb
        if base is not None:
            deadline = time.monotonic() + MEMORY_RELEASE_TIMEOUT_S
            while True:
                sample = self.world.telemetry.snapshot()
                used = getattr(sample, "memory_used_mb", None)
                total = getattr(sample, "memory_total_mb", None) or 0.0
                if used is None or used <= base + max(256.0, 0.02 * total):
                    break
                if time.monotonic() >= deadline:
                    self.console.line(f"GPU memory still {used:.0f} MB in use (was {base:.0f} MB before the previous "
                                      f"server) after {MEMORY_RELEASE_TIMEOUT_S:g} s; launching anyway")
                    break
                time.sleep(0.05)
        self._idle_mem_mb = getattr(self.world.telemetry.snapshot(), "memory_used_mb", None)

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
                                window_source=r.window_source, client_wall_clock_s=r.client_wall_clock_s,
                                server_version=r.server_version, attention_backend_flag=self.opts.attention_backend)
        energy, power, jpt = r.energy_joules, r.avg_power_watts, r.joules_per_token
        valid, reasons = w.get("valid"), list(w.get("reasons") or [])
        if self.opts.energy_window == "steady" and r.steady is not None:
            energy, power, jpt = r.steady["energy_j"], r.steady["avg_power_w"], r.steady["joules_per_token"]
            # energy_joules comes from the steady window: its verdict counts too (loader, world check)
            if r.steady.get("valid") is False:
                valid = False
                reasons += [f"steady:{x}" for x in r.steady.get("reasons") or []] or ["steady_window_invalid"]
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
            window_valid=valid, window_reasons=reasons,
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
            attention_backend=r.attention_backend,
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
        """Append the cell's row, unless it is an error or an invalid window caused by a lost world service."""
        if row.is_error or row.window_valid is False:
            self._check_world(cell)
        self.store.append(row)
        self._written.add(cell.cell_id)
        self.manifest["cells_done"] = self.manifest.get("cells_done", 0) + 1
        write_manifest(self.run_dir, self.manifest)
        self.console.cell_done(cell.cell_id, cell.config.label, cell.batch_size, cell.repeat, speed=row.speed_tok_s,
                               j_per_tok=row.joules_per_token, error=row.error, retry_mf=row.retry_mem_fraction)


# --- run folders ----------------------------------------------------------------------------------------------------

RUN_FILES = ("rows.jsonl", "dataset.jsonl", "manifest.json", "published.jsonl")
RUN_DIRS = ("logs", "sampler", "reports")


def new_run_id() -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + uuid.uuid4().hex[:6]


def prepare_run_dir(out: Path, *, force: bool, lock: RunLock | None = None) -> None:
    """Create ``out`` and take its writer lock (when given); refuse a folder that holds a run unless ``force`` (which
    deletes only the run's own files, and only once the lock shows nobody else is writing them)."""
    if out.exists() and not out.is_dir():
        raise OutputError(f"--out {out} exists and is not a folder", fix="choose another --out")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"cannot write to {out}: {exc.strerror}", fix="choose a writable --out folder") from None
    if lock is not None:
        lock.acquire()
    has_run = any((out / f).exists() for f in RUN_FILES[:3])
    if has_run and not force:
        if lock is not None:
            lock.release()
        raise OutputError(f"{out} already holds a run", fix=f"continue it with --resume {out}, or pass --force to start over")
    if has_run and force:
        for f in RUN_FILES:
            (out / f).unlink(missing_ok=True)
        for d in RUN_DIRS:
            shutil.rmtree(out / d, ignore_errors=True)
    try:
        probe = out / f".write-test-{uuid.uuid4().hex[:6]}"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        if lock is not None:
            lock.release()
        raise OutputError(f"cannot write to {out}: {exc.strerror}", fix="choose a writable --out folder") from None


def _check_resume_version(opts: SweepOptions, python: str) -> None:
    """A resumed real-sglang run must find the sglang its rows were measured with."""
    if opts.engine != "sglang":
        return
    now = resolve_version("auto", "sglang", python)
    if now != opts.sglang_version:
        raise UsageError(f"this run was measured with sglang {opts.sglang_version}, but {now} is installed now",
                         fix=f"resume in the environment with sglang {opts.sglang_version} (same SGLANG_TAG), "
                             "or start a new run")


def run_sweep(opts: SweepOptions, out: Path | None = None, *, resume: Path | None = None, force: bool = False,
              retry_errors: bool = False, argv: list[str] | None = None,
              console: SweepConsole | None = None) -> tuple[Path, list[SweepRow], dict[str, Any]]:
    """Plan, take the run folder's writer lock, open the world, run, and write rows + manifest; return (run folder,
    resolved rows, manifest). ``retry_errors`` (with ``resume``) re-runs every cell whose row is an error row."""
    console = console or SweepConsole()
    spec = EngineSpec(kind=opts.engine)
    requested = opts.sglang_version
    if resume is not None:
        read_manifest(resume)  # a run folder at all? (nothing is created or locked otherwise)
        lock = RunLock(resume)
        lock.acquire()
        try:
            manifest = read_manifest(resume)  # re-read under the lock: the previous writer may have just finished
            saved = read_options(resume)
            # Services of the killed run are gone; use the URLs given now (or start fresh ones).
            opts = saved.model_copy(update={"sampler_url": opts.sampler_url, "twin_gpu_url": opts.twin_gpu_url})
            _check_resume_version(opts, spec.python)
            check_options(opts)  # the saved options, checked as a new run's are
            run_dir = resume
            prepare_resume(run_dir)
        except BaseException:
            lock.release()
            raise
        manifest["status"] = "running"
        manifest.pop("error", None)
        manifest.pop("failure_kind", None)
        manifest["launches_before"] = manifest.get("launches", 0)
    else:
        check_options(opts)  # a usage error must not leave a failed run folder behind
        version = resolve_version(opts.sglang_version, opts.engine, spec.python)  # before anything is written
        opts = opts.model_copy(update={"sglang_version": version})
        run_dir = out or Path("results") / new_run_id()
        lock = RunLock(run_dir)
        prepare_run_dir(run_dir, force=force, lock=lock)
        manifest = new_manifest(new_run_id() if out else run_dir.name, argv or sys.argv, opts.model_dump())
        manifest["sglang_version_requested"] = requested
    try:
        manifest["writer"] = lock.info
        return _run_locked(opts, run_dir, manifest, resume is not None, retry_errors, argv, console)
    finally:
        lock.release()


def _run_locked(opts: SweepOptions, run_dir: Path, manifest: dict[str, Any], resumed: bool, retry_errors: bool,
                argv: list[str] | None, console: SweepConsole) -> tuple[Path, list[SweepRow], dict[str, Any]]:
    """The body of ``run_sweep`` once this process holds the run folder's lock."""
    from harness.world import open_world

    manifest["sglang_version"] = opts.sglang_version
    manifest["attention_backend"] = opts.attention_backend
    session: dict[str, Any] = {"started_ns": wall_ns(), "argv": argv or sys.argv, "resumed": resumed,
                               "retry_errors": retry_errors, "writer": manifest["writer"]}
    manifest.setdefault("sessions", []).append(session)
    write_manifest(run_dir, manifest)
    spec_update: dict[str, Any] = {"sglang_version": opts.sglang_version, "twin_faults": tuple(opts.twin_faults),
                                   "extra_args": tuple(opts.engine_args), "attention_backend": opts.attention_backend}
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
            if "idle_power_w" not in manifest:  # the board before any server (twin calibrate --from reads it)
                manifest["idle_power_w"] = getattr(world.telemetry.snapshot(), "power_w", None)
            manifest["seeds"] = {"seed": opts.seed, "twin_engine_seeds": "sha256(seed:launch key)"}
            power_cap = open_power_cap(opts, world, manifest, lambda: write_manifest(run_dir, manifest))
            runner = SweepRunner(opts, world, run_dir, manifest, console, power_cap, retry_errors=retry_errors)
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
                session["sampler_restarts"] = world.sampler_restarts
                session["wall_s"] = (mono_ns() - t0) / 1e9
                session["ended_ns"] = wall_ns()
                manifest["launches"] = manifest.get("launches_before", 0) + runner.launches
                manifest.pop("launches_before", None)
                manifest["wall_s"] = sum(s.get("wall_s", 0.0) for s in manifest["sessions"])
                save_manifest_best_effort(run_dir, manifest)
            write_manifest(run_dir, manifest)  # the success path must not end without its manifest
    except OSError as exc:  # a write outside the row store (a log, a probe file) hit a full disk
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        err = write_error(run_dir, exc, fix="choose a writable --out folder")
        _record_failure(run_dir, manifest, err)
        raise err from None
    except HarnessError as exc:
        _record_failure(run_dir, manifest, exc)
        raise
    except (KeyboardInterrupt, Interrupted):
        raise SweepInterrupted(f"sweep interrupted; every finished cell is in {run_dir}/rows.jsonl",
                               fix=f"continue with: harness sweep --resume {run_dir}") from None
    finally:
        signal.signal(signal.SIGTERM, old)
    return run_dir, rows, manifest


def _record_failure(run_dir: Path, manifest: dict[str, Any], exc: HarnessError) -> None:
    """A run that stopped on an error is never left "running" on disk (a full disk included)."""
    if manifest.get("status") == "running":
        manifest["status"] = "failed"
        manifest["error"] = exc.message
        if exc.fix:
            manifest["fix"] = exc.fix
        if isinstance(exc, WorldLost):
            manifest["failure_kind"] = "infrastructure"
    save_manifest_best_effort(run_dir, manifest)


def save_manifest_best_effort(run_dir: Path, manifest: dict[str, Any]) -> None:
    """Write the manifest atomically; on a full disk (no room for the temp file) rewrite it in place, compact.

    The compact form is smaller than the indented file already on disk, so it fits in the blocks that file holds.
    Never raises: it runs while another error is on its way to the user.
    """
    import json
    import os

    try:
        write_manifest(run_dir, manifest)
        return
    except HarnessError:
        pass
    path = run_dir / MANIFEST
    try:
        data = json.dumps(manifest, separators=(",", ":"), default=str).encode()
        with open(path, "r+b") as f:
            f.write(data)
            f.truncate(len(data))
            f.flush()
            os.fsync(f.fileno())
    except (OSError, ValueError):
        pass


def check_options(opts: SweepOptions) -> None:
    """Every check of the options that needs no service: plan, prompts, settle, URLs, twin faults."""
    plan_cells(opts)
    parse_settle(opts.settle)
    if opts.prompts_file:
        load_prompts(opts.prompts_file)
    for flag, url in (("--sampler-url", opts.sampler_url), ("--twin-gpu", opts.twin_gpu_url)):
        if url is not None and not url.startswith(("http://", "https://")):
            raise UsageError(f"{flag} {url!r} is not an http(s) URL", fix=f"e.g. {flag} http://127.0.0.1:18200")
    if opts.twin_faults:
        from harness.engine.argv import parse_twin_fault

        for item in opts.twin_faults:
            parse_twin_fault(item)
    check_energy_window(opts)
    check_attention_backend(opts.attention_backend)
    if opts.strategy == "active" or opts.budget is not None or opts.budget_s is not None:
        from harness.active.options import check_active_options

        check_active_options(opts)


def check_attention_backend(backend: str | None) -> None:
    """A backend name some supported sglang knows (a typo would otherwise make every cell a launch-error row)."""
    from harness.twin.engine_args import ATTENTION_BACKENDS

    known = sorted({b for names in ATTENTION_BACKENDS.values() for b in names})
    if backend is not None and backend not in known:
        raise UsageError(f"--attention-backend {backend!r} is not a backend of sglang 0.5.2-0.5.23",
                         fix="use flashinfer (default), auto, or one of: " + ", ".join(known))


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
