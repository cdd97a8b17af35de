"""CLI: ``harness sweep``, ``harness reproduce``, ``harness status RUN_DIR``.

Only light imports at module level (the options model and its CLI derivation): the sweep, world and bench modules
load inside the commands.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

from harness.core.errors import UsageError
from harness.core.model_options import (
    build,
    given_on_command_line,
    model_parameters,
    overlay,
    to_yaml,
    with_parameters,
)
from harness.runs.options import GRID, QUICK, QUICK_VLLM_CONFIGS, SweepOptions

if TYPE_CHECKING:
    from harness.runs.manifest import SweepManifest

HELP = {"help_option_names": ["-h", "--help"]}
RUN, PRESET = "Run folder", "Presets and config file"

OUT_ENV = "HARNESS_SWEEP_OUT"
"""The default run folder of a service (compose's sweep services set it instead of passing --out)."""


def build_grid(
    configs: str | None, steps: str | None, topk: str | None, draft_tokens: str | None
) -> list[tuple[int, int, int]]:
    """The configs of a sweep: ``--configs`` or a ``--steps/--topk/--draft-tokens`` grid (default: the 19 actions)."""
    from harness.grid import (
        ACTIONS,
        PUBLISHED_DRAFT_TOKENS,
        PUBLISHED_STEPS,
        PUBLISHED_TOPK,
        build_actions,
        parse_configs,
        parse_int_list,
    )

    if configs is not None and (steps is not None or topk is not None or draft_tokens is not None):
        raise UsageError(
            "--configs cannot be combined with --steps/--topk/--draft-tokens", fix="use one way to name the grid"
        )
    if configs is not None:  # an empty --configs '' is an error, never the full grid
        return [c.as_tuple() for c in parse_configs(configs)]
    if steps is None and topk is None and draft_tokens is None:
        return [a.as_tuple() for a in ACTIONS]
    s = parse_int_list(steps, "--steps") if steps is not None else list(PUBLISHED_STEPS)
    k = parse_int_list(topk, "--topk") if topk is not None else list(PUBLISHED_TOPK)
    d = parse_int_list(draft_tokens, "--draft-tokens") if draft_tokens is not None else list(PUBLISHED_DRAFT_TOKENS)
    grid = build_actions(s, k, d)
    if not grid:
        raise UsageError(
            f"the grid steps={s} topk={k} draft tokens={d} holds no valid config",
            fix="include 0 in all three lists for the baseline, or pick s,k,d with d <= s*k+1",
        )
    return [c.as_tuple() for c in grid]


def print_summary(rows: list[Any], run_dir: Path, manifest: SweepManifest) -> None:
    """The final per-batch-size table (the dataset engineer's report when present) and the run's totals."""
    from rich.console import Console

    console = Console(emoji=False, highlight=False)
    # rows record the cap they ran under (several with --power-caps); the manifest's limit only stands in when none does
    limit = None if any(getattr(r, "power_limit_w", None) for r in rows) else manifest.power_limit_w
    from harness.report.sweep import final_summary_table

    if rows and any(not r.is_error for r in rows):
        console.print(final_summary_table(rows, limit))
    errors = sum(1 for r in rows if r.is_error)
    retries = sum(1 for r in rows if r.retry_mem_fraction is not None)
    console.print(
        f"run {run_dir}: {len(rows)} rows ({errors} errors, {retries} recovered at a lower mem fraction), "
        f"{manifest.launches} launches, {manifest.wall_s or 0:.1f} s, status {manifest.status}",
        markup=False,
    )
    from harness.runs.gpu_time import gpu_time_line, versus_plan_line

    for line in (gpu_time_line(manifest.gpu_time), versus_plan_line(manifest.gpu_time, manifest.plan)):
        if line:
            console.print(line, markup=False)


def sweep(
    ctx: typer.Context,
    steps: Annotated[
        Optional[str], typer.Option("--steps", help="steps values of the grid, e.g. 0,1,3,5", rich_help_panel=GRID)
    ] = None,
    topk: Annotated[
        Optional[str], typer.Option("--topk", help="topk values of the grid, e.g. 0,1,2,4", rich_help_panel=GRID)
    ] = None,
    draft_tokens: Annotated[
        Optional[str], typer.Option("--draft-tokens", help="draft-token values, e.g. 0,2,4,8,16", rich_help_panel=GRID)
    ] = None,
    quick: Annotated[
        bool,
        typer.Option(
            "--quick", help="small preset: 4 configs x bs 1,16, 256 tokens, time scale 20", rich_help_panel=PRESET
        ),
    ] = False,
    config: Annotated[
        Optional[Path],
        typer.Option(
            "--config",
            help="options from a YAML/JSON file (the names --print-config writes), over --quick, under the flags given",
            rich_help_panel=PRESET,
        ),
    ] = None,
    print_config: Annotated[
        bool,
        typer.Option(
            "--print-config",
            help="print the resolved options as YAML (a --config file) and exit",
            rich_help_panel=PRESET,
        ),
    ] = False,
    out: Annotated[
        Optional[Path],
        typer.Option(
            "--out",
            envvar=OUT_ENV,
            show_envvar=True,
            help="run folder (default results/<run-id>); from the environment it is a default that --resume ignores",
            rich_help_panel=RUN,
        ),
    ] = None,
    resume: Annotated[
        Optional[Path],
        typer.Option(
            "--resume",
            help="continue the run in this folder with its saved options (cells without a row, including cells a lost service cut)",
            rich_help_panel=RUN,
        ),
    ] = None,
    retry_errors: Annotated[
        bool,
        typer.Option(
            "--retry-errors",
            help="with --resume: also re-run every cell whose row is an error row",
            rich_help_panel=RUN,
        ),
    ] = False,
    plan: Annotated[
        bool,
        typer.Option(
            "--plan",
            help="print the cells, launches, GPU time per phase, wall time and the models' disk, and exit (no GPU)",
            rich_help_panel=PRESET,
        ),
    ] = False,
    force: Annotated[bool, typer.Option("--force", help="overwrite the run in --out", rich_help_panel=RUN)] = False,
    plain: Annotated[
        bool, typer.Option("--plain", help="plain progress lines even on a terminal", rich_help_panel=RUN)
    ] = False,
    **options: Any,
) -> None:
    """Sweep speculative configs x batch sizes with the published protocol; write rows, dataset and manifest."""
    import sys

    from harness.sweep.console import SweepConsole
    from harness.sweep.session import run_sweep

    if retry_errors and resume is None:
        raise UsageError("--retry-errors only applies to --resume", fix="harness sweep --resume RUN_DIR --retry-errors")
    if resume is not None and _from_environment(ctx, "out"):
        out = None  # a service's default folder (compose's sweep: HARNESS_SWEEP_OUT), not an instruction
    if resume is not None and (not same_folder(out, resume) or force or config is not None):
        raise UsageError(
            "--resume cannot be combined with --force, --config or another folder's --out",
            fix="--resume RUN_DIR continues that folder with the options saved in its manifest",
        )
    if resume is not None:
        out = None  # the same folder as --resume (a service that always passes its --out can resume)
        check_resume_flags(ctx, options, resume, quick=quick, grid=(steps, topk, draft_tokens))
    # run_sweep checks a run's options once (a new run's before its folder exists, a resumed run's saved ones under its
    # lock); --print-config checks the options it prints
    opts = resolve_sweep_options(
        ctx,
        options,
        quick=quick,
        config=config,
        grid=(steps, topk, draft_tokens),
        check=(print_config or plan) and resume is None,
    )
    if plan:
        from harness.sweep.plan_estimate import estimate_plan, model_disk, plan_gpus, plan_lines

        planned = read_saved(resume) if resume is not None else opts
        for line in plan_lines(estimate_plan(planned, plan_gpus(planned)), model_disk(planned)):
            typer.echo(line)
        return
    if print_config:
        if resume is not None:
            from harness.runs.manifest import read_options

            opts = read_options(resume)
        typer.echo(to_yaml(opts), nl=False)
        return
    run_dir, rows, manifest = run_sweep(
        opts,
        out,
        resume=resume,
        force=force,
        retry_errors=retry_errors,
        argv=["harness", *sys.argv[1:]],
        console=SweepConsole(force_plain=plain or None),
    )
    print_summary(rows, run_dir, manifest)


with_parameters(sweep, model_parameters(SweepOptions))


RESUME_OVERLAY = frozenset({"sampler_url", "twin_gpu_url", "gpu_settings_url", "ray_address"})
"""The options a resumed session may give anew (the services of the session that stopped are gone)."""


def read_saved(run_dir: Path) -> SweepOptions:
    """The options a run folder saved (``--resume DIR --plan``, ``--print-config``)."""
    from harness.runs.manifest import read_options

    return read_options(run_dir)


def _from_environment(ctx: Any, name: str) -> bool:
    """Whether parameter ``name`` took its value from its environment variable."""
    return getattr(ctx.get_parameter_source(name), "name", None) == "ENVIRONMENT"


def same_folder(out: Path | None, resume: Path | None) -> bool:
    """Whether ``--out`` is absent or names the ``--resume`` folder (compose's sweep service always passes its --out)."""
    return out is None or resume is None or out.resolve() == resume.resolve()


def check_resume_flags(
    ctx: Any,
    given: dict[str, Any],
    resume: Path,
    *,
    quick: bool,
    grid: tuple[str | None, str | None, str | None],
) -> None:
    """A resumed run keeps its saved options: a flag that would change them is refused, not silently dropped; a flag
    that repeats its saved value changes nothing and passes (a service's fixed ``--engine sglang``)."""
    from harness.core.model_options import flag_of

    fields = SweepOptions.model_fields
    changed = [k for k in given_on_command_line(ctx, given, SweepOptions) if k not in RESUME_OVERLAY]
    changed = [k for k in changed if not _repeats_saved(resume, k, given[k])]
    named = [flag_of(fields[k]).flag or "--" + k.replace("_", "-") for k in changed]
    named += ["--quick"] * quick + [f for f, v in zip(("--steps", "--topk", "--draft-tokens"), grid) if v is not None]
    if named:
        raise UsageError(
            f"--resume keeps the run's saved options, so {', '.join(named)} cannot change them",
            fix="drop them (only --sampler-url, --twin-gpu, --gpu-settings-url and --ray-address apply to a resumed session), "
            "or start a new run with --out",
        )


def _repeats_saved(resume: Path, name: str, value: Any) -> bool:
    """Whether ``--<name> value`` is what the run in ``resume`` saved (False when its options cannot be read: the
    flag is then refused as a change, before the folder's own problem is reported)."""
    from harness.core.errors import HarnessError
    from harness.core.model_options import OptionError
    from harness.runs.manifest import read_options

    try:
        saved = read_options(resume)
        again = SweepOptions.model_validate({**saved.model_dump(), name: value})
    except (HarnessError, OptionError, ValueError):
        return False
    return bool(getattr(again, name) == getattr(saved, name))


def resolve_sweep_options(
    ctx: Any,
    given: dict[str, Any],
    *,
    quick: bool,
    config: Path | None,
    grid: tuple[str | None, str | None, str | None],
    check: bool,
) -> SweepOptions:
    """The model defaults, overlaid by ``--quick``, then the ``--config`` file, then the flags on the command line;
    with ``check``, checked as a run checks them (a bad value is exit 2 naming its flag, before any folder exists)."""
    from harness.sweep.checks import check_options

    cli = given_on_command_line(ctx, given, SweepOptions)
    if any(g is not None for g in grid):
        cli["configs"] = build_grid(given.get("configs"), *grid)
    values, sources = overlay(SweepOptions, dict(QUICK) if quick else {}, config, cli)
    if quick and "configs" not in cli and (values.get("engine") == "vllm" or values.get("twin_emulate") == "vllm"):
        values["configs"] = list(QUICK_VLLM_CONFIGS)
    opts: SweepOptions = build(SweepOptions, values, sources)
    if check:
        check_options(opts)
    return opts


REPRODUCE_OPTIONS = {"engine", "time_scale", "sampler_url", "twin_gpu_url", "sglang_version", "seed"}
"""The sweep options ``harness reproduce`` takes (the rest is the published protocol)."""


def reproduce(
    ctx: typer.Context,
    quick: Annotated[
        bool, typer.Option("--quick", help="the --quick preset instead of the full 228-cell protocol")
    ] = False,
    compare: Annotated[
        Optional[Path], typer.Option("--compare", help="a published-layout JSONL to compare against")
    ] = None,
    out: Annotated[
        Optional[Path], typer.Option("--out", help="run folder (default results/reproduce-<run-id>)")
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="overwrite the run in --out")] = False,
    plain: Annotated[bool, typer.Option("--plain", help="plain progress lines even on a terminal")] = False,
    **options: Any,
) -> None:
    """Run the published protocol end to end (19 configs x bs 1,4,8,16 x 3 repeats, ladder 0.65 -> 0.55); the twin
    runs at a time scale of 20 unless --time-scale says otherwise."""
    import sys

    from rich.console import Console

    from harness.core.jsonl import write_jsonl_atomic
    from harness.runs.folder import new_run_id
    from harness.runs.rows import RowStore
    from harness.sweep.console import SweepConsole
    from harness.sweep.session import run_sweep

    if compare is not None and not compare.exists():
        from harness.core.errors import MissingFileError

        raise MissingFileError(
            f"--compare file not found: {compare}", fix="pass the published eagle3_energy_sweep.jsonl"
        )
    if compare is not None:  # the comparison's statistics need scipy: say so before hours of sweeping, not after
        from harness.core.extras import require

        require("scipy", "harness reproduce --compare")
    values: dict[str, Any] = dict(QUICK) if quick else {"repeats": 3}
    values["probe"] = "off"  # the published protocol: the published request counts at the limit in force
    values.update(given_on_command_line(ctx, options, SweepOptions))
    if values.get("engine", "twin") == "twin":
        values.setdefault("time_scale", 20.0)
    opts: SweepOptions = build(SweepOptions, values)
    run_dir, rows, manifest = run_sweep(
        opts,
        out or Path("results") / f"reproduce-{new_run_id()}",
        force=force,
        argv=["harness", *sys.argv[1:]],
        console=SweepConsole(force_plain=plain or None),
    )
    print_summary(rows, run_dir, manifest)
    published = run_dir / "published.jsonl"
    records = sorted(RowStore(run_dir).published(), key=lambda rec: rec["index"])
    write_jsonl_atomic(published, records)
    Console(emoji=False, highlight=False).print(
        f"published layout, sorted by index: {published} ({len(records)} rows)", markup=False
    )
    if compare is not None:
        from harness import dataset
        from harness.dataset.cli import render_compare

        result = dataset.compare(dataset.load_many([compare]), rows, a_name="published", b_name="reproduced")
        render_compare(result, Console(emoji=False, highlight=False))
        if not result.agrees:
            raise typer.Exit(1)


with_parameters(reproduce, model_parameters(SweepOptions, only=REPRODUCE_OPTIONS))


def status(run_dir: Annotated[Path, typer.Argument(help="a sweep run folder")]) -> None:
    """Progress of a run folder: state (running with its writer's pid, stopped, failed, complete), cells planned
    and done, errors, retries, launches, what is next. Exit 0 when complete, 75 while a writer runs, 1 otherwise."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from harness.runs.manifest import read_manifest, read_options
    from harness.runs.plan import plan_cells
    from harness.runs.rows import RowStore

    manifest = read_manifest(run_dir)
    opts = read_options(run_dir)
    cells = plan_cells(opts)
    rows = RowStore(run_dir).latest()
    done = {r.key for r in rows}
    pending = [c for c in cells if c.cell_id not in done]
    state, code = run_state(run_dir, manifest)
    if code == 0 and pending and opts.strategy != "active":  # the rows on disk, not the manifest, say what is done
        state, code = (
            f"incomplete: the manifest says complete, but {len(pending)} planned cells have no row in rows.jsonl "
            f"(emptied or torn?); harness sweep --resume {run_dir} measures them",
            1,
        )
    t = Table(show_header=False, box=None)
    t.add_row("run", escape(f"{manifest.run_id} ({state})"))
    if manifest.error:
        t.add_row("error", escape(str(manifest.error)))
    t.add_row(
        "engine",
        f"{opts.engine} sglang {opts.sglang_version}, attention {opts.server_attention_backend or 'auto'}, "
        f"launch per {opts.launch_per}",
    )
    t.add_row("hardware", escape(str(manifest.hardware)))
    if opts.strategy == "active":  # measures the cells that can change the recipe; the rest are not pending
        active = manifest.active or {}
        t.add_row(
            "cells",
            f"{len(cells) - len(pending)} of {len(cells)} planned measured (--strategy active"
            + (f", stopped: {active['stop_reason']}" if active.get("stop_reason") else "")
            + ")",
        )
        pending = [] if manifest.status == "complete" else pending
    else:
        t.add_row("cells", f"{len(cells) - len(pending)} / {len(cells)} done")
    t.add_row("error rows", str(sum(1 for r in rows if r.is_error)))
    t.add_row("recovered by the ladder", str(sum(1 for r in rows if r.retry_mem_fraction is not None)))
    t.add_row("lost services", str(len(manifest.infrastructure_events or [])))
    t.add_row("launches", str(manifest.launches))
    from harness.runs.gpu_time import gpu_time_line

    t.add_row("GPU time", escape((gpu_time_line(manifest.gpu_time) or "-").removeprefix("GPU time ")))
    t.add_row("sessions", str(len(manifest.sessions)))
    t.add_row("next", ", ".join(c.cell_id for c in pending[:3]) + (" ..." if len(pending) > 3 else "") or "-")
    Console(emoji=False, highlight=False).print(t)
    if code:
        raise typer.Exit(code)


def register(app: typer.Typer, groups: dict[str, typer.Typer]) -> None:
    for name, command in (("sweep", sweep), ("reproduce", reproduce), ("status", status)):
        app.command(name, context_settings=HELP)(command)


STATUS_RUNNING_EXIT = 75
"""``harness status`` exit code while a live writer holds the run (EX_TEMPFAIL: ask again later)."""


def run_state(run_dir: Path, manifest: SweepManifest) -> tuple[str, int]:
    """The run's state in words and ``harness status``'s exit code: 0 complete, 75 running, 1 anything to resume.

    The writer lock, not the manifest, decides whether a run is alive: a manifest that says ``running`` with nobody
    holding the lock belongs to a writer that died (``kill -9``, power loss)."""
    from harness.runs.lock import describe_holder, pid_alive, probe_holder

    status = manifest.status
    holder = probe_holder(run_dir)
    if holder is not None:
        return f"running: {describe_holder(holder)}", STATUS_RUNNING_EXIT
    if status == "complete":
        return "complete", 0
    writer = manifest.writer or {}
    pid = writer.get("pid")
    if status == "running":
        if pid is None:
            return "stopped (its writer is gone)", 1
        import socket

        if writer.get("host") not in (None, socket.gethostname()):
            return (
                f"{status}? (written by pid {pid} on {writer['host']}: that host's lock cannot be checked from here)",
                1,
            )
        return (
            f"stopped (pid {pid} no longer holds the run)" if pid_alive(int(pid)) else f"stopped (pid {pid} gone)"
        ), 1
    kind = " (infrastructure)" if manifest.failure_kind == "infrastructure" else ""
    return f"{status}{kind}", 1
