"""CLI: ``harness dataset validate | merge | compare | export`` and ``harness report sweep``.

Heavy libraries (datasets, pyarrow, matplotlib, scipy) are imported inside the commands only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from harness.core.errors import DataError, HarnessError, OutputError, UsageError
from harness.dataset.loader import WINDOW_RULE_HELP


def windows_option(default: str = "exclude", help_text: str = WINDOW_RULE_HELP) -> Any:
    """The ``--invalid-windows`` option every dataset consumer takes."""
    return typer.Option(default, "--invalid-windows", help=help_text)


def check_merge_out(out: Path, inputs: list[Path], force: bool) -> None:
    """Refuse to overwrite an existing --out without --force, and a run folder's own row files even with it."""
    target = out.resolve()
    for src in inputs:
        src_dir = src if src.is_dir() else src.parent
        if (
            (src_dir / "manifest.json").is_file()
            and target.parent == src_dir.resolve()
            and target.name in ("rows.jsonl", "dataset.jsonl")
        ):
            raise OutputError(
                f"--out {out} is the run folder's own {target.name}",
                fix="write the merged dataset to a new file outside the run's row files",
            )
    if out.is_dir():
        raise OutputError(f"--out {out} is a folder", fix="--out names the merged JSONL file")
    if out.exists() and not force:
        raise OutputError(
            f"--out {out} already exists; nothing written", fix="choose a new --out file, or pass --force to replace it"
        )


class DatasetsDisagree(HarnessError):
    """``harness dataset compare``: the datasets differ beyond repeat noise (exit code 1)."""

    exit_code = 1


def check_json_out(json_out: Path | None, force: bool) -> None:
    """``--json FILE`` never replaces a file without ``--force`` (as merge and export refuse an existing ``--out``)."""
    if json_out is not None and json_out.exists() and not force:
        raise OutputError(
            f"--json {json_out} already exists; nothing written",
            fix="choose a new --json file, or pass --force to replace it",
        )


def _write_json(json_out: Path | None, result: Any, **verdict: bool) -> None:
    """``--json``: the result model plus its verdict (``ok`` / ``agrees``), written atomically; nothing when not asked."""
    if json_out is not None:
        from harness.core.jsonl import write_json_atomic

        write_json_atomic(json_out, result.model_dump(mode="json") | verdict)


def _console() -> Console:
    """Console for command output; wide enough for the tables when stdout is not a terminal."""
    console = Console(emoji=False, highlight=False, soft_wrap=True)
    return console if console.is_terminal else Console(emoji=False, highlight=False, soft_wrap=True, width=140)


def _signed(v: float | None) -> str:
    return "-" if v is None else f"{v:+.2f}"


def _cfg(t: Any) -> str:
    return "-" if t is None else "(" + ",".join(str(v) for v in t) + ")"


def render_validation(report: Any, console: Console, *, max_items: int = 25) -> None:
    """Print a ValidationReport as rich tables."""
    verdict = "[bold green]VALID[/]" if report.ok else "[bold red]INVALID[/]"
    console.print(f"{verdict} {escape(report.path)} ({report.layout} layout)")
    t = Table(show_header=False, box=None, pad_edge=False)
    t.add_row("records / rows", f"{report.n_records} / {report.n_rows} ({report.n_superseded} superseded)")
    t.add_row("grid / pilot / error rows", f"{report.n_grid} / {report.n_pilot} / {report.n_error_rows}")
    t.add_row("repeats", ", ".join(map(str, report.repeats)) or "-")
    t.add_row("batch sizes", ", ".join(map(str, report.batch_sizes)) or "-")
    t.add_row("hardware", ", ".join(report.hardware) or "-")
    counts = sorted(set(report.configs_per_group.values()))
    t.add_row("configs per (repeat, batch size)", ", ".join(map(str, counts)) or "-")
    console.print(t)
    for title, items, style in (("errors", report.errors, "red"), ("warnings", report.warnings, "yellow")):
        if not items:
            continue
        table = Table(title=f"{len(items)} {title}", title_style=style, title_justify="left")
        table.add_column("code", style=style)
        table.add_column("where")
        table.add_column("problem", overflow="fold")
        for issue in items[:max_items]:
            table.add_row(issue.code, issue.where or "", escape(issue.message))
        if len(items) > max_items:
            table.add_row("...", "", f"{len(items) - max_items} more")
        console.print(table)


def render_engines(sides: list[Any], console: Console) -> None:
    """Print ``harness.dataset.engine_sides``: per batch size, each dataset's engine, baseline and recipe."""
    table = Table(title="engines side by side (recipe: lowest J/token)", title_justify="left")
    for col in (
        "bs",
        "dataset",
        "engine",
        "configs",
        "baseline tok/s",
        "baseline J/tok",
        "recipe",
        "tok/s",
        "J/tok",
        "fastest",
        "tok/s ",
    ):
        table.add_column(col, justify="left" if col in ("dataset", "engine", "recipe", "fastest") else "right")

    def num(v: float | None, fmt: str) -> str:
        return "-" if v is None else format(v, fmt)

    for s in sides:
        table.add_row(
            str(s.batch_size),
            s.dataset,
            escape(s.engine),
            str(s.configs),
            num(s.baseline_tok_s, ".1f"),
            num(s.baseline_j_per_token, ".3f"),
            _cfg(s.recipe),
            num(s.recipe_tok_s, ".1f"),
            num(s.recipe_j_per_token, ".3f"),
            _cfg(s.fastest),
            num(s.fastest_tok_s, ".1f"),
        )
    console.print(table)


def render_compare(result: Any, console: Console, *, max_cells: int = 40) -> None:
    """Print a CompareResult: noise, per-cell outliers, rank agreement and the verdict."""
    noise = Table(title="repeat noise (pooled CV)", title_justify="left")
    for col in ("metric", "cv", "estimated from"):
        noise.add_column(col)
    for m, cv in result.noise_cv.items():
        noise.add_row(m, f"{cv:.2%}", result.noise_source[m])
    console.print(noise)
    outside = [c for c in result.cells if not c.within]
    cells = Table(
        title=f"cells outside the band: {len(outside)} of {len(result.cells)} (k={result.k}, "
        f"floor {result.min_band:.0%})",
        title_justify="left",
    )
    for col in ("bs", "config", "metric", result.a, result.b, "rel diff", "band"):
        cells.add_column(col, justify="right" if col not in ("config", "metric") else "left")
    for c in outside[:max_cells]:
        cells.add_row(
            str(c.batch_size),
            _cfg(c.config),
            c.metric,
            f"{c.a_mean:.4g}",
            f"{c.b_mean:.4g}",
            f"[red]{c.rel_diff:+.1%}[/]",
            f"±{c.band:.1%}",
        )
    if len(outside) > max_cells:
        cells.add_row("...", "", "", "", "", "", f"{len(outside) - max_cells} more")
    if outside:
        console.print(cells)
    else:
        console.print(
            f"all {len(result.cells)} cell metrics inside the band (k={result.k}, floor {result.min_band:.0%})"
        )
    ranks = Table(title=f"rank agreement per batch size (agree: Kendall tau >= {result.min_tau})", title_justify="left")
    for col in ("bs", "ranked by", "n", "Spearman", "Kendall", f"best {result.a}", f"best {result.b}", "agree"):
        ranks.add_column(col)
    for r in result.ranks:
        ranks.add_row(
            str(r.batch_size),
            r.metric,
            str(r.n_configs),
            _signed(r.spearman),
            _signed(r.kendall),
            _cfg(r.top_a),
            _cfg(r.top_b),
            "[green]yes[/]" if r.agrees else "[red]no[/]",
        )
    console.print(ranks)
    if result.only_a or result.only_b:
        console.print(f"cells only in {result.a}: {len(result.only_a)}; only in {result.b}: {len(result.only_b)}")
    verdict = "[bold green]AGREE[/]" if result.agrees else "[bold red]DISAGREE[/]"
    console.print(
        f"{verdict}: {result.cell_agreement:.0%} of cell metrics within the noise band "
        f"(need {result.min_cell_agreement:.0%}); {sum(r.agrees for r in result.ranks)}/{len(result.ranks)} rankings agree"
    )


def register(app: typer.Typer, groups: dict[str, typer.Typer]) -> None:
    dataset = groups["dataset"]
    report = groups["report"]

    @dataset.command("validate")
    def validate_cmd(
        path: Path = typer.Argument(..., help="dataset JSONL file or run folder (RUN_DIR -> RUN_DIR/rows.jsonl)"),
        subset: bool = typer.Option(
            False, "--subset", help="allow a subset of the 19 actions (the same set in every group)"
        ),
        strict: bool = typer.Option(False, "--strict", help="superseded (replaced) rows are errors, not warnings"),
        json_out: Optional[Path] = typer.Option(None, "--json", help="also write the report as JSON to this file"),
        force: bool = typer.Option(False, "--force", help="replace an existing --json file"),
    ) -> None:
        """Check schema, key order, 19 actions per batch size per repeat, baselines, pilot rules, indexes."""
        from harness.dataset import validate_file

        check_json_out(json_out, force)
        result = validate_file(path, subset=subset, strict=strict)
        render_validation(result, _console())
        _write_json(json_out, result, ok=result.ok)
        if not result.ok:
            raise DataError(
                f"{result.path} is not a valid dataset: {len(result.errors)} problems",
                fix="see the errors listed above",
            )

    @dataset.command("merge")
    def merge_cmd(
        grid: Path = typer.Argument(..., help="the grid rows: a run folder or a JSONL file"),
        retries: list[Path] = typer.Option(
            [], "--retries", help="retry rows (same index as the row they replace); repeatable"
        ),
        pilots: list[Path] = typer.Option([], "--pilots", help="pilot rows appended after the grid; repeatable"),
        out: Path = typer.Option(..., "--out", help="output JSONL file"),
        native: bool = typer.Option(False, "--native", help="keep the native extras (default: the 26 published keys)"),
        retry_mem_fraction: float = typer.Option(
            0.55, "--retry-mem-fraction", help="retry_mem_fraction for retry rows that carry none"
        ),
        force: bool = typer.Option(False, "--force", help="replace an existing --out file"),
        invalid_windows: str = windows_option(
            "fail",
            "successful rows whose measurement window is invalid: fail (default) or "
            "keep (merged as measured; merge keeps every index, so it cannot exclude)",
        ),
    ) -> None:
        """Merge grid + retries + pilot rows with the published exclusion semantics; indexes contiguous."""
        from harness.dataset import ValidationReport, check_rows, load_many, merge, write_rows

        if invalid_windows not in ("fail", "keep"):
            raise UsageError(
                f"--invalid-windows {invalid_windows!r} is not possible for merge",
                fix="merge keeps every index: use --invalid-windows fail or keep",
            )
        check_merge_out(out, [grid, *retries, *pilots], force)
        grid_rows = load_many([grid], published_only=True, windows=invalid_windows)  # type: ignore[arg-type]
        retry_rows = load_many(retries, published_only=True, windows=invalid_windows)  # type: ignore[arg-type]
        pilot_rows = load_many(pilots, published_only=True, windows=invalid_windows)  # type: ignore[arg-type]
        result = merge(grid_rows, retry_rows, pilot_rows, default_retry_mem_fraction=retry_mem_fraction)
        check = ValidationReport(
            path=str(out),
            layout="native" if native else "published",
            n_records=len(result.rows),
            n_rows=len(result.rows),
            n_superseded=0,
        )
        check_rows(result.rows, check, subset=True)
        console = _console()
        if not check.ok:
            render_validation(check, console)
            raise DataError(
                f"the merged dataset breaks {len(check.errors)} rules; nothing written",
                fix="fix the inputs listed above",
            )
        write_rows(out, result.rows, native=native)
        for note in result.notes:
            console.print(f"[yellow]note:[/] {escape(note)}")
        console.print(
            f"wrote {escape(str(out))}: {len(result.rows)} rows ({result.n_grid} grid, {result.n_replaced} replaced by retries, "
            f"{result.n_retry_ignored} retries ignored, {result.n_pilots} pilot rows)"
        )

    @dataset.command("compare")
    def compare_cmd(
        a: Path = typer.Argument(..., help="dataset A (file or run folder)"),
        b: Path = typer.Argument(..., help="dataset B (file or run folder)"),
        k: float = typer.Option(3.0, "--k", help="band width in standard errors of the difference"),
        min_band: float = typer.Option(0.02, "--min-band", help="smallest relative band"),
        min_cell_agreement: float = typer.Option(
            0.9, "--min-cell-agreement", help="fraction of cell metrics that must fall inside the band"
        ),
        min_tau: float = typer.Option(0.6, "--min-tau", help="Kendall tau a batch size's config ranking needs"),
        json_out: Optional[Path] = typer.Option(None, "--json", help="also write the comparison as JSON"),
        force: bool = typer.Option(False, "--force", help="replace an existing --json file"),
        invalid_windows: str = windows_option(),
    ) -> None:
        """Per-cell relative differences against the repeat-noise band, and per-batch-size rank agreement.

        Exit code 0 when the datasets agree, 1 when they do not.
        """
        from harness.dataset import compare, load, print_notes

        check_json_out(json_out, force)
        la, lb = load(a, windows=invalid_windows), load(b, windows=invalid_windows)  # type: ignore[arg-type]
        print_notes(la)
        print_notes(lb)
        result = compare(
            la.rows,
            lb.rows,
            a_name="A",
            b_name="B",
            k=k,
            min_band=min_band,
            min_cell_agreement=min_cell_agreement,
            min_tau=min_tau,
        )
        if not result.cells:
            raise DataError(
                f"{a} and {b} share no successful cell", fix="compare datasets over the same batch sizes and configs"
            )
        console = _console()
        console.print(f"A = {la.path}\nB = {lb.path}", markup=False)
        from harness.dataset import engine_sides

        render_engines(engine_sides([("A", la.rows), ("B", lb.rows)]), console)
        render_compare(result, console)
        _write_json(json_out, result, agrees=result.agrees)
        if not result.agrees:
            raise DatasetsDisagree(
                f"{la.path} and {lb.path} disagree beyond repeat noise", fix="see the cells and rankings above"
            )

    @dataset.command("export")
    def export_cmd(
        path: Path = typer.Argument(..., help="dataset JSONL file or run folder"),
        fmt: str = typer.Option("hf", "--format", help="hf (datasets.load_from_disk folder) | parquet | jsonl"),
        out: Path = typer.Option(..., "--out", help="output folder (must not exist or be empty, unless --force)"),
        native: bool = typer.Option(
            False, "--native", help="include the native extras (default: the 26 published keys)"
        ),
        force: bool = typer.Option(False, "--force", help="replace a non-empty --out folder"),
        invalid_windows: str = windows_option(),
    ) -> None:
        """Export a dataset as a Hugging Face dataset folder, a parquet file or a JSONL file."""
        from harness.dataset import export, load, print_notes

        loaded = load(path, windows=invalid_windows)  # type: ignore[arg-type]
        print_notes(loaded)
        written = export(loaded.rows, fmt, out, native=native, force=force)  # type: ignore[arg-type]
        _console().print(f"wrote {written} ({fmt}, {len(loaded.rows)} rows)", markup=False)

    @report.command("engines")
    def report_engines_cmd(
        runs: list[Path] = typer.Argument(
            ..., help="run folders or dataset files (e.g. a twin sglang and a twin vLLM grid)"
        ),
        invalid_windows: str = windows_option(),
    ) -> None:
        """Engines side by side per batch size: each dataset's engine, baseline, recipe (lowest J/token), fastest."""
        from harness.dataset import engine_sides, load, print_notes

        loaded = [load(p, windows=invalid_windows) for p in runs]  # type: ignore[arg-type]
        console = _console()
        for i, ld in enumerate(loaded):
            print_notes(ld)
            console.print(f"{chr(65 + i) if i < 26 else i} = {ld.path}", markup=False)
        render_engines(
            engine_sides([(chr(65 + i) if i < 26 else str(i), ld.rows) for i, ld in enumerate(loaded)]), console
        )

    @report.command("sweep")
    def report_sweep_cmd(
        run_dir: Path = typer.Argument(..., help="run folder (or a dataset JSONL file)"),
        power_limit: Optional[float] = typer.Option(
            None, "--power-limit", help="power limit in W (default: rows, manifest, else 80)"
        ),
        out: Optional[Path] = typer.Option(None, "--out", help="figure folder (default RUN_DIR/reports)"),
        figures: bool = typer.Option(True, "--figures/--no-figures", help="write PNG figures"),
        invalid_windows: str = windows_option(),
    ) -> None:
        """Tables per batch size (baseline, reference, best in the energy band), error rows, PNG figures."""
        from harness.report.sweep import sweep_report

        sweep_report(
            run_dir,
            console=_console(),
            power_limit_w=power_limit,
            out_dir=out,
            figures=figures,
            windows=invalid_windows,
        )
