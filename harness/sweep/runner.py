"""The sweep: plan the grid, run it cell by cell (or config by config), write rows, resume a killed run.

Rows go to ``RUN_DIR/rows.jsonl`` and ``RUN_DIR/dataset.jsonl`` through ``harness.runs.rows.RowStore`` (fsynced appends,
one row per cell id). One process writes a run folder (``harness.runs.lock``). ``--resume`` skips every cell that
already has a row; a cell cut by a kill has none and runs again (``--retry-errors`` also re-runs error rows).
A launch that fails at every mem fraction, a crash, a timed-out request or an HTTP error becomes an error row and the
sweep goes on; a lost world service (``harness.world.health``) writes no row: the harness restarts its own sampler and runs
the cell again, or stops the run (status ``failed``, exit 4) so that ``--resume`` runs it later.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Iterator, Sequence

from harness.core.clocks import wall_ns
from harness.core.errors import HarnessError
from harness.engine.launch import LadderExhausted, LaunchAttempt, RunningServer
from harness.engine.launch_phases import read_launch_phases
from harness.engine.sglang_argv import ENGINE_ENV, overlap_scheduled
from harness.gpu.pass_setting import PassSetting
from harness.grid import SpecConfig
from harness.runs.gpu_time import GpuTime
from harness.runs.manifest import SweepManifest
from harness.runs.measurement import measurement
from harness.runs.options import SweepOptions, parse_settle
from harness.runs.plan import Cell, derive_seed, plan_cells, sized_prompts
from harness.runs.rows import EngineInfo, RowStore, SweepRow, error_row
from harness.sweep.console import SweepConsole
from harness.sweep.errors import FIX_BY_KIND, InfrastructureLost, WorldLost, raise_if_interrupted
from harness.world.bench import BenchSettings, CellError, CellResult, load_prompts, run_cell
from harness.world.health import ServiceProblem

MAX_SERVICE_RECOVERIES = 3
"""Sampler restarts one sweep session may make before it stops instead."""


def _num(x: Any) -> float | int | None:
    if x is None:
        return None
    if isinstance(x, bool):
        return int(x)
    return x if isinstance(x, int) else float(x)


class SweepRunner:
    """Runs a planned sweep in an open world, writing rows and the manifest."""

    def __init__(
        self,
        opts: SweepOptions,
        world: Any,
        run_dir: Path,
        manifest: SweepManifest,
        console: SweepConsole,
        settings: Sequence[PassSetting] = (),
        *,
        retry_errors: bool = False,
        executor: Any | None = None,
        gpu_time: GpuTime | None = None,
    ) -> None:
        self.opts = opts
        self.gpu_time = gpu_time or GpuTime(getattr(getattr(world, "clock", None), "scale", 1.0))
        """Device seconds per phase (``harness.runs.gpu_time``): launches, warm-ups, windows, settles, teardowns."""
        self.executor = executor  # None: run cells here; else ``executor.run(self, cells)`` runs them elsewhere
        self.settings_by_key = {s.key: s for s in settings}  # the device settings swept per pass (power_cap, sm_clocks)
        self.enforced: dict[str, float | None] = {}  # what each setting enforced for the pass now running
        self.world = world
        self.run_dir = run_dir
        self.manifest = manifest
        self.console = console
        self.store = RowStore(run_dir)
        self.settings = BenchSettings(
            output_tokens=opts.output_tokens,
            num_prompts=opts.num_prompts,
            num_prompts_by_bs=sized_prompts(manifest.preflight),
            prompts=load_prompts(opts.prompts_file),
            request_timeout_s=opts.request_timeout_s,
            stream=opts.stream_requests,
        )
        self.settle_kind, self.settle_value = parse_settle(opts.settle)
        self.cells = plan_cells(opts)
        self.run_id = manifest.run_id
        self._first_cell = True
        self.launches = 0
        self.retry_errors = retry_errors
        self.recoveries = 0
        self._written: set[str] = set()
        self._retry: set[str] = set()
        if getattr(world, "launcher", None) is not None:  # a Ray driver's world launches nothing itself
            world.launcher.memory.note = console.line  # the launcher waits for a stopped server's memory; said here

    # --- top level ------------------------------------------------------------------------------------------------
    def run(self) -> list[SweepRow]:
        self.store.open()
        if self.retry_errors:
            self._retry = {cid for cid, row in self.store.latest_by_cell().items() if row.is_error}
        self.manifest.cells_planned = len(self.cells)
        pending = self._pending()
        self.console.start(len(self.cells), len(self.cells) - len(pending))
        try:
            if self.opts.strategy == "active":  # measures only the planned cells that can change the recipe
                from harness.sweep.active.rounds import ActiveSweep

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
        return [
            c
            for c in self.cells
            if c.cell_id not in done or (c.cell_id in self._retry and c.cell_id not in self._written)
        ]

    def _run_pending(self, pending: list[Cell]) -> None:
        if self.executor is not None:  # cells run elsewhere (harness.sweep.executors); rows come back through _commit
            self.executor.run(self, pending)
        elif self.opts.launch_per == "cell":
            for cell in pending:
                self._run_cell_mode(cell)
        else:
            for group in self._config_groups(pending):
                self._run_config_mode(group)

    # --- world services ------------------------------------------------------------------------------------------
    def _check_world(self, cell: Cell) -> None:
        """Raise ``InfrastructureLost`` when a world service is gone (asked before each cell and each bad row)."""
        raise_if_interrupted()
        problem = self.world.check()
        if problem is not None:
            raise InfrastructureLost(problem, cell.cell_id)

    def _recover(self, lost: InfrastructureLost) -> None:
        """Restart the harness's own sampler (bounded) and go on; anything else stops the run with a clear error."""
        problem = lost.problem
        event: dict[str, Any] = {
            "wall_ns": wall_ns(),
            "cell_id": lost.cell_id,
            "kind": problem.kind,
            "problem": problem.message,
        }
        self.manifest.infrastructure_event(event)
        # Only a sampler that is gone or stalled is worth a restart; failing GPU reads are the GPU's, not the sampler's.
        if problem.kind == "sampler" and problem.restartable and self.recoveries < MAX_SERVICE_RECOVERIES:
            self.recoveries += 1
            self.console.line(f"{problem.message} (cell {lost.cell_id}, no row written): restarting the sampler")
            try:
                self.world.restart_sampler()
                problem = self.world.check()
            except HarnessError as exc:
                problem = ServiceProblem(
                    problem.kind, f"{problem.message}; restarting the sampler failed: {exc.message}"
                )
            if problem is None:
                event["action"] = "restarted the sampler; the cell runs again"
                self.manifest.save(self.run_dir)
                return
        event["action"] = "stopped the run"
        self.manifest.save(self.run_dir)
        raise WorldLost(
            f"{problem.message}: the sweep stopped before finishing {lost.cell_id} (no row written for it; "
            "every finished cell is kept)",
            fix=FIX_BY_KIND[problem.kind].format(run_dir=self.run_dir),
        )

    def _config_groups(self, pending: list[Cell]) -> Iterator[list[Cell]]:
        group: list[Cell] = []
        for cell in pending:
            if group and (cell.pass_key, cell.config) != (group[0].pass_key, group[0].config):
                yield group
                group = []
            group.append(cell)
        if group:
            yield group

    # --- modes ----------------------------------------------------------------------------------------------------
    def _apply_settings(self, cell: Cell) -> None:
        """Set the cell's cap and SM clock (no-ops while already in force) and note what is enforced for its row. The
        world is checked first: a lost device is an infrastructure failure, not a setting error from a controller."""
        for key, label in (("power_cap", cell.gpu_pass.cap), ("sm_clocks", cell.gpu_pass.clock)):
            setting = self.settings_by_key.get(key)
            if setting is None:
                continue
            self._check_world(cell)
            before = setting.current
            self.enforced[key] = got = setting.apply(label)
            if label != before:
                self.console.line(setting.applied_text(label, got))

    def _run_cell_mode(self, cell: Cell) -> None:
        self._apply_settings(cell)
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
        self._apply_settings(group[0])
        try:
            for i, cell in enumerate(group):
                self._settle()
                self._check_world(cell)
                t0 = time.monotonic()
                self.console.cell_started(cell.cell_id, cell.config.label, cell.batch_size, cell.repeat)
                if server is not None and not server.alive():
                    self._stop(server)
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
                    with self.gpu_time.timing("flush_settle"):
                        server.client.flush_cache()
                except Exception as exc:  # noqa: BLE001 - becomes the cell's error row
                    self._write_error(cell, f"flush_cache failed before the cell: {exc}", "http", attempts, t0, server)
                    self._stop(server)
                    server = None
                    continue
                if not self._measure(cell, server, attempts, t0):
                    self._stop(server)
                    server = None
        finally:
            if server is not None:
                self._stop(server)

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
            self._stop(server)

    def _stop(self, server: RunningServer) -> None:
        with self.gpu_time.timing("teardown"):
            server.stop()

    # --- steps ----------------------------------------------------------------------------------------------------
    def _launch(self, config: SpecConfig, batch_size: int, stem: str) -> tuple[RunningServer, list[LaunchAttempt]]:
        launcher = self.world.launcher
        before, waited0, started = launcher.launches, launcher.memory.waited_s, time.monotonic()
        try:
            server, attempts = launcher.launch_with_ladder(
                config,
                batch_size,
                self.opts.mem_fractions,
                log_stem=self.run_dir / "logs" / stem,
                seed=derive_seed(self.opts.seed, stem),
            )
            ready = next((a for a in reversed(attempts) if a.ok), None)
            parts = read_launch_phases(ready.log_path, ready.launch_s or 0.0) if ready is not None else None
            if parts is not None:
                self.gpu_time.add_launch_parts(parts)
            return server, attempts
        finally:
            waited = launcher.memory.waited_s - waited0
            self.gpu_time.add("memory_wait", waited)
            self.gpu_time.add("launch", time.monotonic() - started - waited)
            self.launches += launcher.launches - before
            self.manifest.launches_recorded(self.launches)

    def _measure(self, cell: Cell, server: RunningServer, attempts: list[LaunchAttempt], t0: float) -> bool:
        """Run the bench on ``server`` and write the cell's row; False when the cell failed (server unusable)."""
        if self.manifest.engine_identity is None:
            self.manifest.engine_identity = self._engine_identity(server)
        started = time.monotonic()
        try:
            result = run_cell(server, cell.batch_size, self.settings, self.world.telemetry, self.world.clock)
        except CellError as exc:
            self.gpu_time.add("warmup", time.monotonic() - started)  # a failed cell measured nothing
            self._write_error(cell, exc.message, exc.kind, attempts, t0, server)
            return False
        spent = (time.monotonic() - started) * self.gpu_time.scale
        self.gpu_time.add_device("measured", min(result.wall_clock_s, spent))
        self.gpu_time.add_device("warmup", spent - min(result.wall_clock_s, spent))
        if self.opts.energy_window == "steady" and result.steady is None:
            self._write_error(
                cell, f"--energy-window steady: {result.steady_reason}", "steady_window", attempts, t0, server
            )
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
        with self.gpu_time.timing("flush_settle"):
            self._settle_now()

    def _settle_now(self) -> None:
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
    def _common(
        self,
        cell: Cell,
        attempts: list[LaunchAttempt],
        t0: float,
        server: RunningServer | None,
        overlap_said: bool | None = None,
    ) -> dict[str, Any]:
        """The fields every row has; ``overlap_said``: the overlap scheduler as the server's info reported it."""
        ok = next((a for a in attempts if a.ok), None)
        first_mf = self.opts.mem_fractions[0]
        mf = ok.mem_fraction if ok else None
        identity: dict[str, Any] = {}
        if server is not None:
            identity = {
                "pid": server.pid,
                "port": server.port,
                "argv": server.argv,
                "log": str(server.log_path),
                "launch_batch_size": server.batch_size,
            }
        return dict(
            run_id=self.run_id,
            cell_id=cell.cell_id,
            attempt=len(attempts) or None,
            recorded_wall_ns=wall_ns(),
            mem_fraction=mf,
            retry_mem_fraction=mf if mf is not None and mf != first_mf else None,
            launch_s=ok.launch_s if ok else None,
            cell_wall_s=time.monotonic() - t0,
            engine=EngineInfo(
                kind=self.opts.engine,
                api=self.opts.api,
                identity=identity,
                version=self.opts.vllm_version if self.opts.api == "vllm" else self.opts.sglang_version,
            ),
            sglang_version=None if self.opts.api == "vllm" else self.opts.sglang_version,
            time_scale=self.world.clock.scale,
            power_limit_w=_num(self.enforced.get("power_cap") or self.world.power_limit_w),
            sm_clock_locked_mhz=_num(self.enforced.get("sm_clocks")),
            extras={
                "launch_attempts": [a.model_dump() for a in attempts],
                "launch_per": self.opts.launch_per,
                "stream": self.settings.stream,
                **self._scheduler_extras(cell, overlap_said),
                **self._cap_extras(cell),
                **({"engine_device": "cpu"} if self.opts.engine_device == "cpu" else {}),
            },
        )

    def _scheduler_extras(self, cell: Cell, said: bool | None = None) -> dict[str, Any]:
        """sglang's scheduler for this cell: ``overlap_schedule`` as the server's info says (``said``), else by the
        version's own rule (a row without a server: a launch error), with ``overlap_schedule_source`` saying which,
        and ``scheduler`` (``overlap`` / ``no-overlap``) the same fact. The twin reports its emulated version's rule
        and does not time the two schedulers differently."""
        if self.opts.api != "sglang":
            return {}
        if said is None:
            env = {**os.environ, **ENGINE_ENV}  # what a server launched by this process sees
            overlap, source = (
                overlap_scheduled(self.opts.sglang_version, cell.config, self.opts.launch_args, env),
                "rule",
            )
        else:
            overlap, source = said, "server"
        return {
            "scheduler": "overlap" if overlap else "no-overlap",
            "overlap_schedule": overlap,
            "overlap_schedule_source": source,
        }

    def _cap_extras(self, cell: Cell) -> dict[str, Any]:
        out: dict[str, Any] = {}
        cap, clock = self.settings_by_key.get("power_cap"), self.settings_by_key.get("sm_clocks")
        p = cell.gpu_pass
        if p.cap is not None and cap is not None:
            out["power_cap"] = {"label": p.cap, "target_w": cap.targets.get(p.cap), "mode": self.opts.power_cap_mode}
        if p.clock is not None and clock is not None:
            out["sm_clock"] = {"label": p.clock, "target_mhz": clock.targets.get(p.clock)}
        return out

    def _row(
        self, cell: Cell, r: CellResult, server: RunningServer, attempts: list[LaunchAttempt], t0: float
    ) -> SweepRow:
        m = measurement(r.window, r.pre, r.after)
        common = self._common(cell, attempts, t0, server, r.overlap_schedule)
        if "power_cap" not in self.settings_by_key and r.after is not None and r.after.power_limit_w is not None:
            common["power_limit_w"] = _num(r.after.power_limit_w)  # record: the limit the device enforced
        common["extras"].update(
            step_time_samples=r.step_time_samples,
            window_energy_method=r.window.energy_method,
            window_source=r.window_source,
            client_wall_clock_s=r.client_wall_clock_s,
            server_version=r.server_version,
            attention_backend_flag=self.opts.server_attention_backend,
            decode_log_interval=self.opts.server_decode_log_interval,
        )
        energy, power, jpt = r.energy_joules, r.avg_power_watts, r.joules_per_token
        if self.opts.energy_window == "steady" and r.steady is not None:
            energy, power, jpt = r.steady.energy_j, r.steady.avg_power_w, r.steady.joules_per_token
            # energy_joules comes from the steady window: its verdict counts too (loader, world check)
            if r.steady.valid is False:
                m.window_valid = False
                m.window_reasons += [f"steady:{x}" for x in r.steady.reasons] or ["steady_window_invalid"]
        if energy is None and self.world.gpu_identity.get("energy_unavailable"):
            common["extras"]["energy_unavailable"] = self.world.gpu_identity["energy_unavailable"]  # e.g. no RAPL
        windows = {
            kind: v.model_dump() for kind, v in (("measured", r.measured), ("steady", r.steady)) if v is not None
        }
        if r.steady is None and r.steady_reason:
            windows["steady"] = {"kind": "steady", "reasons": [r.steady_reason]}
        return SweepRow(
            hardware=self.world.hardware,
            index=cell.index,
            repeat=cell.repeat,
            batch_size=cell.batch_size,
            steps=cell.config.steps,
            topk=cell.config.topk,
            num_draft_tokens=cell.config.draft_tokens,
            is_baseline=cell.config.is_baseline,
            error=None,
            accept_length=r.accept_length,
            speed_tok_s=r.speed_tok_s,
            speed_source=r.speed_source,
            step_time_s=r.step_time_s,
            wall_clock_s=r.wall_clock_s,
            wall_clock_tok_s=r.wall_clock_tok_s,
            total_output_tokens=r.total_output_tokens,
            energy_joules=_num(energy),
            avg_power_watts=_num(power),
            joules_per_token=_num(jpt),
            energy_window=self.opts.energy_window,
            window_energy=windows,
            window_start_ns=r.window_start_ns,
            window_end_ns=r.window_end_ns,
            accept_length_source=r.accept_length_source,
            n_requests=r.n_requests,
            req_accept_length_mean=r.req_accept_length_mean,
            req_accept_length_p50=r.req_accept_length_p50,
            req_latency_mean_s=r.req_latency_mean_s,
            req_latency_p50_s=r.req_latency_p50_s,
            req_latency_p95_s=r.req_latency_p95_s,
            attention_backend=r.attention_backend,
            **m.model_dump(),
            **common,
        )

    def _write_error(
        self,
        cell: Cell,
        message: str,
        kind: str,
        attempts: list[LaunchAttempt],
        t0: float,
        server: RunningServer | None = None,
    ) -> None:
        common = self._common(cell, attempts, t0, server)
        common["extras"]["error_kind"] = kind
        if server is not None:
            common["extras"]["log_tail"] = server.log_tail(15)
        common["retry_mem_fraction"] = None  # set only on measured rows that a lower rung recovered
        row = error_row(
            hardware=self.world.hardware,
            index=cell.index,
            repeat=cell.repeat,
            batch_size=cell.batch_size,
            config=cell.config,
            error=f"{kind}: {message}",
            **common,
        )
        self._write(row, cell)

    def _write(self, row: SweepRow, cell: Cell) -> None:
        """Append the cell's row, unless it is an error or an invalid window caused by a lost world service."""
        if row.is_error or row.window_valid is False:
            self._check_world(cell)
        self._commit(row, cell)

    def _commit(self, row: SweepRow, cell: Cell) -> None:
        """The driver's only write of a cell: the row store, the manifest and the console."""
        self.store.append(row)
        self._written.add(cell.cell_id)
        self.manifest.cell_done()
        self.manifest.save(self.run_dir)
        self.console.cell_done(
            cell.cell_id,
            cell.config.label,
            cell.batch_size,
            cell.repeat,
            speed=row.speed_tok_s,
            j_per_tok=row.joules_per_token,
            error=row.error,
            retry_mf=row.retry_mem_fraction,
        )
        raise_if_interrupted()  # the row is kept; a stop whose raise a spawn swallowed ends the run here
