"""CLI: ``harness sweep``, ``harness reproduce``, ``harness status RUN_DIR``.

Only light imports at module level: the sweep, world and bench modules load inside the commands.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer

from harness.errors import UsageError

QUICK = {"configs": [(0, 0, 0), (3, 4, 8), (3, 2, 4)], "batch_sizes": [1, 16], "repeats": 1, "output_tokens": 256,
         "time_scale": 20.0, "settle": "0"}
"""``--quick``: the baseline, the reference and the published bs-16 pick at bs 1 and 16; a twin run in seconds."""


def build_grid(configs: str | None, steps: str | None, topk: str | None, draft_tokens: str | None) -> list[tuple[int, int, int]]:
    """The configs of a sweep: ``--configs`` or a ``--steps/--topk/--draft-tokens`` grid (default: the 19 actions)."""
    from harness.grid import ACTIONS, PUBLISHED_DRAFT_TOKENS, PUBLISHED_STEPS, PUBLISHED_TOPK, build_actions, parse_configs, parse_int_list

    if configs is not None and (steps is not None or topk is not None or draft_tokens is not None):
        raise UsageError("--configs cannot be combined with --steps/--topk/--draft-tokens", fix="use one way to name the grid")
    if configs is not None:  # an empty --configs '' is an error, never the full grid
        return [c.as_tuple() for c in parse_configs(configs)]
    if steps is None and topk is None and draft_tokens is None:
        return [a.as_tuple() for a in ACTIONS]
    s = parse_int_list(steps, "--steps") if steps is not None else list(PUBLISHED_STEPS)
    k = parse_int_list(topk, "--topk") if topk is not None else list(PUBLISHED_TOPK)
    d = parse_int_list(draft_tokens, "--draft-tokens") if draft_tokens is not None else list(PUBLISHED_DRAFT_TOKENS)
    grid = build_actions(s, k, d)
    if not grid:
        raise UsageError(f"the grid steps={s} topk={k} draft tokens={d} holds no valid config",
                         fix="include 0 in all three lists for the baseline, or pick s,k,d with d <= s*k+1")
    return [c.as_tuple() for c in grid]


OPTION_FLAGS = {"request_timeout_s": "--request-timeout", "launch_timeout_s": "--launch-timeout",
                "prompts_file": "--prompts", "twin_faults": "--twin-fault", "engine_args": "--engine-arg",
                "twin_gpu_url": "--twin-gpu", "mem_fractions": "--mem-fractions", "configs": "--configs"}
"""SweepOptions fields whose command-line flag is not simply ``--field-name``."""


def parse_fractions(text: str) -> list[float]:
    try:
        values = [float(t) for t in text.replace(" ", ",").split(",") if t]
    except ValueError:
        raise UsageError(f"--mem-fractions must be comma-separated numbers, got {text!r}", fix="e.g. --mem-fractions 0.65,0.55") from None
    if not values or any(not 0 < v < 1 for v in values):
        raise UsageError(f"--mem-fractions must be in (0, 1), got {text!r}", fix="e.g. --mem-fractions 0.65,0.55")
    return values


def print_summary(rows: list[Any], run_dir: Path, manifest: dict[str, Any]) -> None:
    """The final per-batch-size table (the dataset engineer's report when present) and the run's totals."""
    from rich.console import Console

    console = Console(highlight=False)
    # rows record the cap they ran under (several with --power-caps); the manifest's limit only stands in when none does
    limit = None if any(getattr(r, "power_limit_w", None) for r in rows) else manifest.get("power_limit_w")
    from harness.report import final_summary_table

    if rows and any(not r.is_error for r in rows):
        console.print(final_summary_table(rows, limit))
    errors = sum(1 for r in rows if r.is_error)
    retries = sum(1 for r in rows if r.retry_mem_fraction is not None)
    console.print(f"run {run_dir}: {len(rows)} rows ({errors} errors, {retries} recovered at a lower mem fraction), "
                  f"{manifest.get('launches')} launches, {manifest.get('wall_s', 0):.1f} s, status {manifest.get('status')}", markup=False)


def register(app: typer.Typer, groups: dict[str, typer.Typer]) -> None:
    @app.command("sweep")
    def sweep(
        engine: str = typer.Option("twin", "--engine", help="twin (GPU-free digital twin) or sglang (a real GPU)"),
        sampler_url: Optional[str] = typer.Option(None, "--sampler-url", help="a running sampler (default: start one / in-process NVML)"),
        twin_gpu: Optional[str] = typer.Option(None, "--twin-gpu", help="a running twin GPU device (default: start one)"),
        launch_per: str = typer.Option("cell", "--launch-per", help="cell (published: a server per batch size and config) or config"),
        steps: Optional[str] = typer.Option(None, "--steps", help="steps values of the grid, e.g. 0,1,3,5"),
        topk: Optional[str] = typer.Option(None, "--topk", help="topk values of the grid, e.g. 0,1,2,4"),
        draft_tokens: Optional[str] = typer.Option(None, "--draft-tokens", help="draft-token values, e.g. 0,2,4,8,16"),
        configs: Optional[str] = typer.Option(None, "--configs", help="explicit configs s:k:d,... (instead of a grid)"),
        batch_sizes: Optional[str] = typer.Option(None, "--batch-sizes", help="e.g. 1,4,8,16 (published)"),
        repeats: Optional[int] = typer.Option(None, "--repeats", min=1, help="whole passes over the grid (default 1)"),
        num_prompts: Optional[int] = typer.Option(None, "--num-prompts", min=1, help="measured requests per cell (default max(16, bs))"),
        output_tokens: Optional[int] = typer.Option(None, "--output-tokens", min=1, help="max_new_tokens per request (default 512)"),
        prompts: Optional[Path] = typer.Option(None, "--prompts", help="JSON list of prompts (default: the published 4)"),
        request_timeout: float = typer.Option(300.0, "--request-timeout", help="wall seconds before a request counts as hung"),
        settle: Optional[str] = typer.Option(None, "--settle", help="between cells: seconds (default 5) or cool:TEMP_C"),
        seed: int = typer.Option(0, "--seed", help="seed of the twin GPU and twin engines"),
        time_scale: Optional[float] = typer.Option(None, "--time-scale", help="twin world speed-up (default 1; --quick 20)"),
        out: Optional[Path] = typer.Option(None, "--out", help="run folder (default results/<run-id>)"),
        resume: Optional[Path] = typer.Option(None, "--resume", help="continue the run in this folder (cells without a row, including cells a lost service cut)"),
        retry_errors: bool = typer.Option(False, "--retry-errors", help="with --resume: also re-run every cell whose row is an error row"),
        force: bool = typer.Option(False, "--force", help="overwrite the run in --out"),
        sglang_version: str = typer.Option("auto", "--sglang-version", help="auto (the sglang installed where the server runs; the twin: 0.5.2) or a version from 0.5.2 to 0.5.23 (the twin: 0.5.2 or 0.5.23)"),
        attention_backend: str = typer.Option("flashinfer", "--attention-backend", help="pinned for every config (auto: sglang picks per config, which mixes kernels on Hopper/Blackwell)"),
        mem_fractions: str = typer.Option("0.65,0.55", "--mem-fractions", help="the retry ladder of --mem-fraction-static"),
        launch_timeout: float = typer.Option(900.0, "--launch-timeout", help="seconds for a server to become healthy"),
        quick: bool = typer.Option(False, "--quick", help="small preset: 3 configs x bs 1,16, 256 tokens, time scale 20"),
        twin_fault: list[str] = typer.Option([], "--twin-fault", help="test hook: NAME or NAME@BS or NAME@BS/s:k:d (oom, crash, runaway, slow-health, http500)"),
        model_path: Optional[str] = typer.Option(None, "--model-path", help="target model (default unsloth/Llama-3.2-1B-Instruct)"),
        draft_model_path: Optional[str] = typer.Option(None, "--draft-model-path", help="EAGLE3 draft model"),
        hardware: Optional[str] = typer.Option(None, "--hardware", help="override the rows' hardware label"),
        plain: bool = typer.Option(False, "--plain", help="plain progress lines even on a terminal"),
        stream: Optional[bool] = typer.Option(None, "--stream/--no-stream", help="stream responses (default: on for sglang, off for the twin)"),
        engine_arg: list[str] = typer.Option([], "--engine-arg", help="extra server flag for every launch, e.g. --engine-arg=--disable-overlap-schedule"),
        power_caps: Optional[str] = typer.Option(None, "--power-caps", help="GPU power caps swept per pass, watts or % of the default limit, e.g. 60,80 or 75%,100%"),
        power_cap_mode: str = typer.Option("set", "--power-cap-mode", help="set (needs root on NVML; the original limit is restored) or record (only record the enforced limit)"),
        energy_window: str = typer.Option("measured", "--energy-window", help="which window feeds energy_joules: measured (published) or steady (ML.ENERGY steady state)"),
        strategy: str = typer.Option("grid", "--strategy", help="grid (every planned cell) or active (only the cells that can still change the recipe; docs/active.md)"),
        budget: Optional[float] = typer.Option(None, "--budget", help="active: GPU-seconds as a fraction of the predicted full grid's (default 0.2)"),
        budget_s: Optional[float] = typer.Option(None, "--budget-s", help="active: GPU-seconds (device time, launch + measure) the sweep may spend"),
    ) -> None:
        """Sweep speculative configs x batch sizes with the published protocol; write rows, dataset and manifest."""
        import sys

        from pydantic import ValidationError

        from harness.console import SweepConsole
        from harness.sweep import SweepOptions, parse_settle, run_sweep

        if engine not in ("twin", "sglang"):
            raise UsageError(f"unknown --engine {engine!r}", fix="use --engine twin or --engine sglang")
        if launch_per not in ("cell", "config"):
            raise UsageError(f"unknown --launch-per {launch_per!r}", fix="use --launch-per cell or --launch-per config")
        if sglang_version != "auto":
            from harness.engine.version import check_supported

            check_supported(sglang_version, engine=engine)
        if retry_errors and resume is None:
            raise UsageError("--retry-errors only applies to --resume", fix="harness sweep --resume RUN_DIR --retry-errors")
        if resume is not None and (out is not None or force):
            raise UsageError("--resume cannot be combined with --out or --force", fix="--resume RUN_DIR continues that folder")
        if engine == "sglang" and (twin_gpu or twin_fault):
            raise UsageError("--twin-gpu and --twin-fault only apply to --engine twin", fix="drop them or use --engine twin")
        if power_cap_mode not in ("set", "record"):
            raise UsageError(f"unknown --power-cap-mode {power_cap_mode!r}", fix="use --power-cap-mode set or record")
        if power_cap_mode == "record" and power_caps:
            raise UsageError("--power-cap-mode record never sets a cap, so it cannot sweep --power-caps",
                             fix="drop --power-caps (set the limit beforehand with sudo nvidia-smi -pl WATTS), or run as root with --power-cap-mode set")
        if energy_window not in ("measured", "steady"):
            raise UsageError(f"unknown --energy-window {energy_window!r}", fix="use --energy-window measured or steady")
        if strategy not in ("grid", "active"):
            raise UsageError(f"unknown --strategy {strategy!r}", fix="use --strategy grid or --strategy active")
        base_active: dict[str, Any] = {"strategy": strategy, "budget": budget, "budget_s": budget_s}
        base: dict[str, Any] = dict(QUICK) if quick else {}
        if power_caps:
            from harness.powercap import parse_power_caps

            base["power_caps"] = parse_power_caps(power_caps)
        grid_given = any(v is not None for v in (configs, steps, topk, draft_tokens))
        if grid_given or not quick:
            base["configs"] = build_grid(configs, steps, topk, draft_tokens)
        if batch_sizes is not None:
            from harness.grid import parse_batch_sizes

            base["batch_sizes"] = parse_batch_sizes(batch_sizes)
        for key, value in (("repeats", repeats), ("num_prompts", num_prompts), ("output_tokens", output_tokens),
                           ("time_scale", time_scale), ("settle", settle)):
            if value is not None:
                base[key] = value
        parse_settle(base.get("settle", "5"))
        if prompts is not None:
            from harness.bench import load_prompts

            load_prompts(prompts)
        try:
            opts = SweepOptions(
                engine=engine, sglang_version=sglang_version, launch_per=launch_per,
                attention_backend=None if attention_backend == "auto" else attention_backend, mem_fractions=parse_fractions(mem_fractions),
                prompts_file=str(prompts) if prompts else None, request_timeout_s=request_timeout,
                launch_timeout_s=launch_timeout, seed=seed, sampler_url=sampler_url, twin_gpu_url=twin_gpu,
                model_path=model_path, draft_model_path=draft_model_path, twin_faults=list(twin_fault), hardware=hardware,
                stream=stream, engine_args=list(engine_arg), power_cap_mode=power_cap_mode, energy_window=energy_window, **base,
                **base_active,
            )
        except ValidationError as exc:
            err = exc.errors()[0]
            flag = OPTION_FLAGS.get(str(err["loc"][0]), "--" + str(err["loc"][0]).replace("_", "-")) if err["loc"] else "an option"
            raise UsageError(f"{flag}: {err['msg']} (got {err.get('input')!r})", fix=f"see harness sweep --help for {flag}") from None
        from harness.sweep import check_energy_window

        check_energy_window(opts)
        if twin_fault:
            from harness.engine.argv import EngineSpec, faults_for
            from harness.grid import BASELINE

            faults_for(EngineSpec(twin_faults=tuple(twin_fault)), BASELINE, 1)  # validates the names
        run_dir, rows, manifest = run_sweep(opts, out, resume=resume, force=force, retry_errors=retry_errors,
                                            argv=["harness", *sys.argv[1:]],
                                            console=SweepConsole(force_plain=plain or None))
        print_summary(rows, run_dir, manifest)

    @app.command("reproduce")
    def reproduce(
        engine: str = typer.Option("twin", "--engine", help="twin or sglang"),
        quick: bool = typer.Option(False, "--quick", help="the --quick preset instead of the full 228-cell protocol"),
        compare: Optional[Path] = typer.Option(None, "--compare", help="a published-layout JSONL to compare against"),
        out: Optional[Path] = typer.Option(None, "--out", help="run folder (default results/reproduce-<run-id>)"),
        force: bool = typer.Option(False, "--force", help="overwrite the run in --out"),
        time_scale: Optional[float] = typer.Option(None, "--time-scale", help="twin speed-up (default 20)"),
        sampler_url: Optional[str] = typer.Option(None, "--sampler-url"),
        twin_gpu: Optional[str] = typer.Option(None, "--twin-gpu"),
        sglang_version: str = typer.Option("auto", "--sglang-version", help="auto or a supported version (see harness sweep --help)"),
        seed: int = typer.Option(0, "--seed"),
        plain: bool = typer.Option(False, "--plain", help="plain progress lines even on a terminal"),
    ) -> None:
        """Run the published protocol end to end (19 configs x bs 1,4,8,16 x 3 repeats, ladder 0.65 -> 0.55)."""
        import sys

        from harness.console import SweepConsole
        from harness.sweep import SweepOptions, new_run_id, run_sweep

        if engine not in ("twin", "sglang"):
            raise UsageError(f"unknown --engine {engine!r}", fix="use --engine twin or --engine sglang")
        if compare is not None and not compare.exists():
            from harness.errors import MissingFileError

            raise MissingFileError(f"--compare file not found: {compare}", fix="pass the published eagle3_energy_sweep.jsonl")
        base: dict[str, Any] = dict(QUICK) if quick else {"repeats": 3}
        if engine == "twin":
            base["time_scale"] = time_scale if time_scale is not None else base.get("time_scale", 20.0)
        opts = SweepOptions(engine=engine, sglang_version=sglang_version, seed=seed, sampler_url=sampler_url,
                            twin_gpu_url=twin_gpu, **base)
        run_dir, rows, manifest = run_sweep(opts, out or Path("results") / f"reproduce-{new_run_id()}", force=force,
                                            argv=["harness", *sys.argv[1:]], console=SweepConsole(force_plain=plain or None))
        print_summary(rows, run_dir, manifest)
        from rich.console import Console

        from harness.rows import RowStore

        from harness.jsonl import write_jsonl_atomic

        published = run_dir / "published.jsonl"
        records = sorted(RowStore(run_dir).published(), key=lambda rec: rec["index"])
        write_jsonl_atomic(published, records)
        Console(highlight=False).print(f"published layout, sorted by index: {published} ({len(records)} rows)", markup=False)
        if compare is not None:
            from harness import dataset
            from harness.dataset_cli import render_compare

            result = dataset.compare(dataset.load_many([compare]), rows, a_name="published", b_name="reproduced")
            render_compare(result, Console(highlight=False))
            if not result.agrees:
                raise typer.Exit(1)

    @app.command("status")
    def status(run_dir: Path = typer.Argument(..., help="a sweep run folder")) -> None:
        """Progress of a run folder: state (running with its writer's pid, stopped, failed, complete), cells planned
        and done, errors, retries, launches, what is next. Exit 0 when complete, 75 while a writer runs, 1 otherwise."""
        from rich.console import Console
        from rich.markup import escape
        from rich.table import Table

        from harness.manifest import read_manifest, read_options
        from harness.rows import RowStore
        from harness.sweep import plan_cells

        manifest = read_manifest(run_dir)
        opts = read_options(run_dir)
        cells = plan_cells(opts)
        rows = RowStore(run_dir).latest()
        done = {r.key for r in rows}
        pending = [c for c in cells if c.cell_id not in done]
        state, code = run_state(run_dir, manifest)
        t = Table(show_header=False, box=None)
        t.add_row("run", escape(f"{manifest['run_id']} ({state})"))
        if manifest.get("error"):
            t.add_row("error", escape(str(manifest["error"])))
        t.add_row("engine", f"{opts.engine} sglang {opts.sglang_version}, attention {opts.attention_backend or 'auto'}, "
                            f"launch per {opts.launch_per}")
        t.add_row("hardware", escape(str(manifest.get("hardware"))))
        t.add_row("cells", f"{len(cells) - len(pending)} / {len(cells)} done")
        t.add_row("error rows", str(sum(1 for r in rows if r.is_error)))
        t.add_row("recovered by the ladder", str(sum(1 for r in rows if r.retry_mem_fraction is not None)))
        t.add_row("lost services", str(len(manifest.get("infrastructure_events", []))))
        t.add_row("launches", str(manifest.get("launches")))
        t.add_row("sessions", str(len(manifest.get("sessions", []))))
        t.add_row("next", ", ".join(c.cell_id for c in pending[:3]) + (" ..." if len(pending) > 3 else "") or "-")
        Console(highlight=False).print(t)
        if code:
            raise typer.Exit(code)


STATUS_RUNNING_EXIT = 75
"""``harness status`` exit code while a live writer holds the run (EX_TEMPFAIL: ask again later)."""


def run_state(run_dir: Path, manifest: dict[str, Any]) -> tuple[str, int]:
    """The run's state in words and ``harness status``'s exit code: 0 complete, 75 running, 1 anything to resume.

    The writer lock, not the manifest, decides whether a run is alive: a manifest that says ``running`` with nobody
    holding the lock belongs to a writer that died (``kill -9``, power loss)."""
    from harness.runlock import describe_holder, pid_alive, probe_holder

    status = manifest.get("status")
    holder = probe_holder(run_dir)
    if holder is not None:
        return f"running: {describe_holder(holder)}", STATUS_RUNNING_EXIT
    if status == "complete":
        return "complete", 0
    writer = manifest.get("writer") or {}
    pid = writer.get("pid")
    if status == "running":
        if pid is None:
            return "stopped (its writer is gone)", 1
        import socket

        if writer.get("host") not in (None, socket.gethostname()):
            return f"{status}? (written by pid {pid} on {writer['host']}: that host's lock cannot be checked from here)", 1
        return (f"stopped (pid {pid} no longer holds the run)" if pid_alive(int(pid)) else f"stopped (pid {pid} gone)"), 1
    kind = " (infrastructure)" if manifest.get("failure_kind") == "infrastructure" else ""
    return f"{status}{kind}", 1
