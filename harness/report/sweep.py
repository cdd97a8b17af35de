"""Sweep report: per-batch-size tables (baseline, reference, best config inside the energy band), error rows, figures.

Energy utilization u = avg_power_watts / the row's enforced power cap (``power_limit_w``; rows without one, as in
published-layout files, use the run's or the published 80 W); the band is [0.95, 0.98] (published). A sweep over
several caps (``--power-caps``) or SM clocks (``--sm-clocks``) is reported per pass (cap, clock): tables, a recipe
(best config in the band) per pass and batch size, and speed vs utilization with one colour per pass. Values are means over repeats of successful rows.
matplotlib is imported lazily with the Agg backend.
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any, Sequence

from pydantic import BaseModel
from rich.console import Console, JustifyMethod
from rich.markup import escape
from rich.table import Table

from harness.core.errors import DataError
from harness.grid import ACTIONS, BASELINE, REFERENCE, SpecConfig
from harness.report.band import BAND, board_limits_of, manifest_section, no_band_hint
from harness.report.passes import Pass, PassGroup, pass_groups
from harness.report.provenance import check_manifest, excluded_counts, mark_excluded, provenance, rows_accounting
from harness.report.recipe import SummaryGroups, best_across, recipe_table, recipes
from harness.runs.gpu_time import gpu_time_line
from harness.runs.rows import SweepRow

PUBLISHED_POWER_LIMIT_W = 80.0


class CellSummary(BaseModel):
    """Mean over the successful repeats of one (batch size, config) cell."""

    batch_size: int
    config: tuple[int, int, int]
    n_ok: int
    n_error: int
    n_excluded: int = 0
    """Repeats whose measurement window was invalid, left out by ``--invalid-windows exclude`` (the default)."""
    speed_tok_s: float | None = None
    joules_per_token: float | None = None
    avg_power_watts: float | None = None
    utilization: float | None = None
    speed_sd: float | None = None
    jpt_sd: float | None = None

    @property
    def in_band(self) -> bool:
        return self.utilization is not None and BAND[0] <= self.utilization <= BAND[1]

    @property
    def aggregate_tok_s(self) -> float | None:
        """Tokens/s of the whole batch: the per-sequence speed times the batch size (what a server delivers)."""
        return self.speed_tok_s * self.batch_size if self.speed_tok_s is not None else None


class BatchSummary(BaseModel):
    batch_size: int
    baseline: CellSummary | None
    reference: CellSummary | None
    best_in_band: CellSummary | None
    in_band: list[CellSummary]
    closest_to_band: CellSummary | None
    cells: list[CellSummary]
    n_error_rows: int
    why_none: str | None = None
    """When no config is in the band: where they sit and the command that finds one (``report_band``)."""


def _mean(xs: list[float]) -> float | None:
    return statistics.fmean(xs) if xs else None


def power_limit_of(
    rows: Sequence[SweepRow], run_dir: Path | None = None, override: float | None = None
) -> tuple[float, str]:
    """The power limit used for utilization: the option, else the rows, else manifest.json, else the published 80 W."""
    if override is not None:
        return float(override), "--power-limit"
    limits = [r.power_limit_w for r in rows if r.power_limit_w]
    if limits:
        return float(statistics.median(limits)), "rows"
    if run_dir is not None and (run_dir / "manifest.json").is_file():
        try:
            found = _find_key(json.loads((run_dir / "manifest.json").read_text()), "power_limit_w")
        except (OSError, ValueError) as exc:  # the rows name no limit and the manifest cannot: say so, not 80 W
            raise DataError(
                f"{run_dir / 'manifest.json'} is unreadable ({str(exc)[:120]}), and the rows record no power limit",
                fix="pass --power-limit WATTS, or restore the manifest the sweep wrote",
            ) from None
        if isinstance(found, (int, float)) and found > 0:
            return float(found), "manifest.json"
    return PUBLISHED_POWER_LIMIT_W, "published default"


def _find_key(obj: Any, key: str) -> Any:
    if isinstance(obj, dict):
        if key in obj and obj[key] is not None:
            return obj[key]
        for v in obj.values():
            found = _find_key(v, key)
            if found is not None:
                return found
    elif isinstance(obj, list):
        for v in obj:
            found = _find_key(v, key)
            if found is not None:
                return found
    return None


CapGroup = PassGroup  # the old name: groups are per pass (cap, and SM clock with --sm-clocks)


def cap_groups(rows: Sequence[SweepRow], fallback_w: float, override_w: float | None = None) -> list[PassGroup]:
    """Grid rows per pass (``harness.report.passes.pass_groups``)."""
    return pass_groups(rows, fallback_w, override_w)


def _measured(cells: list[CellSummary], config: SpecConfig) -> CellSummary | None:
    """The cell of ``config`` when it has at least one successful row."""
    return next((x for x in cells if x.config == config.as_tuple() and x.n_ok), None)


def summarize(
    rows: Sequence[SweepRow], power_limit_w: float, limits: tuple[float | None, float | None] = (None, None)
) -> list[BatchSummary]:
    """Per batch size: cell means, baseline, reference, the in-band configs and the fastest of them; ``limits``: the
    board's power-limit constraints (min, max watts), which any cap the report suggests stays inside."""
    grid = [r for r in rows if not r.is_pilot]
    by_cell: dict[tuple[int, SpecConfig], list[SweepRow]] = defaultdict(list)
    for r in grid:
        by_cell[(r.batch_size, r.config)].append(r)
    out = []
    for bs in sorted({k[0] for k in by_cell}):
        order = {c: i for i, c in enumerate(ACTIONS)}
        cells = []
        for (b, cfg), rs in sorted(by_cell.items(), key=lambda kv: order.get(kv[0][1], 99)):
            if b != bs:
                continue
            ok = [r for r in rs if not r.error]
            speeds = [float(r.speed_tok_s) for r in ok if r.speed_tok_s is not None]
            jpts = [float(r.joules_per_token) for r in ok if r.joules_per_token is not None]
            power = _mean([float(r.avg_power_watts) for r in ok if r.avg_power_watts is not None])
            cells.append(
                CellSummary(
                    batch_size=bs,
                    config=cfg.as_tuple(),
                    n_ok=len(ok),
                    n_error=len(rs) - len(ok),
                    speed_tok_s=_mean(speeds),
                    joules_per_token=_mean(jpts),
                    jpt_sd=statistics.stdev(jpts) if len(jpts) >= 2 else None,
                    avg_power_watts=power,
                    utilization=(power / power_limit_w) if power is not None else None,
                    speed_sd=statistics.stdev(speeds) if len(speeds) >= 2 else None,
                )
            )
        in_band = [c for c in cells if c.in_band and c.speed_tok_s is not None]
        best = max(in_band, key=lambda c: c.speed_tok_s or 0.0) if in_band else None
        measured = [c for c in cells if c.utilization is not None]
        closest = min(measured, key=lambda c: _band_distance(c.utilization or 0.0)) if measured and not best else None
        out.append(
            BatchSummary(
                batch_size=bs,
                baseline=_measured(cells, BASELINE),
                reference=_measured(cells, REFERENCE),
                best_in_band=best,
                in_band=in_band,
                closest_to_band=closest,
                cells=cells,
                n_error_rows=sum(c.n_error for c in cells),
                why_none=no_band_hint(cells, power_limit_w, bs, limits),
            )
        )
    return out


def _band_distance(u: float) -> float:
    return 0.0 if BAND[0] <= u <= BAND[1] else min(abs(u - BAND[0]), abs(u - BAND[1]))


def _fmt(v: float | None, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def _vs(cell: CellSummary | None, base: CellSummary | None) -> str:
    if not cell or not base or not cell.speed_tok_s or not base.speed_tok_s:
        return "-"
    return f"x{cell.speed_tok_s / base.speed_tok_s:.2f}"


def batch_table(s: BatchSummary, power_limit_w: float) -> Table:
    """One batch size: baseline, reference, best in band, with speed, J/token, power and utilization."""
    t = Table(
        title=f"batch size {s.batch_size}  (band {BAND[0]:.2f}-{BAND[1]:.2f} of {power_limit_w:g} W)",
        title_justify="left",
    )
    columns: tuple[tuple[str, JustifyMethod], ...] = (
        ("role", "left"),
        ("config", "left"),
        ("tok/s per seq", "right"),
        ("tok/s batch", "right"),
        ("vs baseline", "right"),
        ("J/token", "right"),
        ("avg W", "right"),
        ("utilization", "right"),
        ("in band", "center"),
        ("ok/err/excl", "right"),
    )
    for col, just in columns:
        t.add_column(col, justify=just)
    roles = [("baseline", s.baseline), ("reference", s.reference), ("best in band", s.best_in_band)]
    if s.best_in_band is None and s.closest_to_band is not None:
        roles.append(("closest to band", s.closest_to_band))
    for role, c in roles:
        if c is None:
            t.add_row(role, "[dim]none[/]", *["-"] * 8)
            continue
        t.add_row(
            role,
            str(SpecConfig(*c.config)),
            _fmt(c.speed_tok_s, ".1f"),
            _fmt(c.aggregate_tok_s, ".0f"),
            _vs(c, s.baseline),
            _fmt(c.joules_per_token, ".4f"),
            _fmt(c.avg_power_watts, ".1f"),
            _fmt(c.utilization, ".3f"),
            "[green]yes[/]" if c.in_band else "no",
            f"{c.n_ok}/{c.n_error}/{c.n_excluded}",
        )
    t.caption = (
        escape(s.why_none)
        if s.why_none
        else (
            f"{len(s.in_band)} config{'s' if len(s.in_band) != 1 else ''} in band: "
            + (", ".join(str(SpecConfig(*c.config)) for c in s.in_band) or "none")
        )
    )
    return t


def final_summary_table(rows: Sequence[SweepRow], power_limit_w: float | None = None) -> Table:
    """One compact table for the end of a sweep: per batch size baseline, reference, best in band, the band.

    Speeds are tok/s per sequence (means over repeats) with their ratio to the baseline; u = avg power / limit.
    """
    from rich import box

    limit, _ = power_limit_of(rows, None, power_limit_w)
    groups = cap_groups(rows, limit, power_limit_w)
    multi = len(groups) > 1
    what = "u = W/row's cap" if multi else f"u = W/{groups[0][0].cap_w:g}"
    t = Table(
        title=f"sweep summary (tok/s, x baseline; {what}, band {BAND[0]:.2f}-{BAND[1]:.2f})",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        show_edge=False,
        collapse_padding=True,
    )
    if multi:
        t.add_column("cap W" if all(k.clock is None for k, _ in groups) else "pass", justify="right", no_wrap=True)
    summary_columns: tuple[tuple[str, JustifyMethod], ...] = (
        ("bs", "right"),
        ("baseline", "right"),
        ("ref (3,4,8)", "right"),
        ("u", "right"),
        ("best in band", "left"),
        ("its speed", "right"),
        ("u", "right"),
        ("n", "right"),
        ("err", "right"),
    )
    for col, just in summary_columns:
        t.add_column(col, justify=just, no_wrap=True)

    def speed(c: CellSummary | None, base: CellSummary | None) -> str:
        return "-" if c is None or c.speed_tok_s is None else f"{c.speed_tok_s:.1f} {_vs(c, base)}"

    for key, s in ((k, s) for k, group in groups for s in summarize(group, k.cap_w)):
        ref, b = s.reference, s.best_in_band
        if b is not None:
            best = [str(SpecConfig(*b.config)), speed(b, s.baseline), _fmt(b.utilization, ".2f")]
        elif s.closest_to_band is not None:
            c = s.closest_to_band
            best = ["[dim]none[/]", f"[dim]~{SpecConfig(*c.config)}[/]", _fmt(c.utilization, ".2f")]
        else:
            best = ["[dim]none[/]", "-", "-"]
        t.add_row(
            *([key.label.removesuffix(" W") if key.clock is None else key.label] if multi else []),
            str(s.batch_size),
            _fmt(s.baseline.speed_tok_s if s.baseline else None, ".1f"),
            speed(ref, s.baseline),
            _fmt(ref.utilization if ref else None, ".2f"),
            *best,
            str(len(s.in_band)),
            str(s.n_error_rows),
        )
    t.caption = "n: configs in band; ~: closest if none; err: error rows"
    return t


def error_table(rows: Sequence[SweepRow]) -> Table | None:
    errs = [r for r in rows if r.is_error]
    if not errs:
        return None
    t = Table(title=f"{len(errs)} error rows", title_style="red", title_justify="left")
    for col in ("index", "repeat", "bs", "config", "mem fraction", "error"):
        t.add_column(col, overflow="fold" if col == "error" else "ellipsis")
    for r in errs:
        t.add_row(
            str(r.index),
            str(r.repeat),
            str(r.batch_size),
            str(r.config),
            _fmt(r.mem_fraction, "g"),
            escape(r.error or ""),
        )
    return t


def write_figures(summaries: Sequence[BatchSummary], out_dir: Path, power_limit_w: float) -> list[Path]:
    """speed_vs_utilization.png (band shaded, one panel per batch size) and joules_per_token.png (per config)."""
    return write_cap_figures([(Pass(power_limit_w), summaries)], out_dir)


def write_cap_figures(groups: SummaryGroups, out_dir: Path) -> list[Path]:
    """The figures of one pass (as ``write_figures``), or of several: speed_vs_utilization.png with one colour per
    pass (utilization against each pass's cap) and joules_per_token_<Pass.slug>.png per pass."""
    from harness.core.extras import needs

    with needs("writing PNG figures (--no-figures skips them)"):
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    if len(groups) == 1:
        return _single_cap_figures(groups[0][1], out_dir, groups[0][0].cap_w, plt)
    written = [_speed_vs_utilization_per_cap(groups, out_dir, plt)]
    for key, summaries in groups:
        written.append(_jpt_figure(summaries, out_dir / f"joules_per_token_{key.slug}.png", plt, f" at {key.label}"))
    return written


def _speed_vs_utilization_per_cap(groups: SummaryGroups, out_dir: Path, plt: Any) -> Path:
    sizes = sorted({s.batch_size for _, summaries in groups for s in summaries})
    fig, axes = plt.subplots(1, max(1, len(sizes)), figsize=(4.2 * max(1, len(sizes)), 3.8), squeeze=False)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, bs in zip(axes[0], sizes):
        ax.axvspan(*BAND, color="tab:green", alpha=0.18, label="energy band")
        for i, (key, summaries) in enumerate(groups):
            s = next((x for x in summaries if x.batch_size == bs), None)
            pts = [c for c in (s.cells if s else []) if c.utilization is not None and c.speed_tok_s is not None]
            colour = colours[i % len(colours)]
            ax.scatter([c.utilization for c in pts], [c.speed_tok_s for c in pts], s=18, color=colour, label=key.label)
            if s is not None and s.best_in_band is not None:
                b = s.best_in_band
                ax.scatter([b.utilization], [b.speed_tok_s], s=70, facecolors="none", edgecolors=colour, linewidths=1.8)
                ax.annotate(
                    "%d,%d,%d" % b.config,
                    (b.utilization, b.speed_tok_s),
                    fontsize=6,
                    xytext=(3, 3),
                    textcoords="offset points",
                )
        ax.set_title(f"batch size {bs} (circled: best in band per pass)", fontsize=8)
        ax.set_xlabel("utilization (avg W / the row's cap)")
        ax.set_ylabel("speed (tok/s per sequence)")
        ax.grid(alpha=0.3)
    return _save_with_legend(fig, axes, out_dir / "speed_vs_utilization.png", plt)


def _save_with_legend(fig: Any, axes: Any, path: Path, plt: Any) -> Path:
    """Legend on the first panel, tight layout, PNG at 110 dpi; the figure is closed."""
    axes[0][0].legend(fontsize=6, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _single_cap_figures(summaries: Sequence[BatchSummary], out_dir: Path, power_limit_w: float, plt: Any) -> list[Path]:
    n = max(1, len(summaries))
    written: list[Path] = []

    fig, axes = plt.subplots(1, n, figsize=(4.2 * n, 3.8), squeeze=False)
    for ax, s in zip(axes[0], summaries):
        ax.axvspan(*BAND, color="tab:green", alpha=0.18, label="energy band")
        pts = [c for c in s.cells if c.utilization is not None and c.speed_tok_s is not None]
        ax.scatter([c.utilization for c in pts], [c.speed_tok_s for c in pts], s=18, color="tab:blue", label="config")
        for role, c, colour in (
            ("baseline", s.baseline, "black"),
            ("reference", s.reference, "tab:orange"),
            ("best in band", s.best_in_band, "tab:red"),
        ):
            if c is not None and c.utilization is not None and c.speed_tok_s is not None:
                ax.scatter(
                    [c.utilization],
                    [c.speed_tok_s],
                    s=60,
                    facecolors="none",
                    edgecolors=colour,
                    linewidths=1.6,
                    label=role,
                )
        for c in pts:
            ax.annotate(
                "%d,%d,%d" % c.config,
                (c.utilization, c.speed_tok_s),
                fontsize=5,
                alpha=0.7,
                xytext=(2, 2),
                textcoords="offset points",
            )
        ax.set_title(f"batch size {s.batch_size}")
        ax.set_xlabel(f"utilization (avg W / {power_limit_w:g} W)")
        ax.set_ylabel("speed (tok/s per sequence)")
        ax.grid(alpha=0.3)
    written.append(_save_with_legend(fig, axes, out_dir / "speed_vs_utilization.png", plt))

    written.append(_jpt_figure(summaries, out_dir / "joules_per_token.png", plt, ""))
    return written


def _jpt_figure(summaries: Sequence[BatchSummary], p: Path, plt: Any, suffix: str) -> Path:
    n = max(1, len(summaries))
    fig, axes = plt.subplots(n, 1, figsize=(9, 2.4 * n), squeeze=False)
    for ax, s in zip(axes[:, 0], summaries):
        cells = list(s.cells)
        colours = ["tab:green" if c.in_band else "tab:gray" for c in cells]
        ax.bar(range(len(cells)), [c.joules_per_token or 0.0 for c in cells], color=colours)
        for i, c in enumerate(cells):
            if c.joules_per_token is None:  # every repeat of this cell failed
                ax.text(i, 0, "error", rotation=90, ha="center", va="bottom", fontsize=6, color="tab:red")
        ax.set_xticks(range(len(cells)), ["%d,%d,%d" % c.config for c in cells], rotation=60, fontsize=6)
        ax.set_ylabel("J/token")
        ax.set_title(f"batch size {s.batch_size}{suffix} (green: inside the energy band)", fontsize=8)
        ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(p, dpi=110)
    plt.close(fig)
    return p


def _pass_fields(key: Pass) -> dict[str, Any]:
    """A pass in summary.json: its cap, and its SM clock when the sweep locked clocks."""
    clock = {} if key.clock is None else {"sm_clock": key.clock, "sm_clock_mhz": key.sm_clock_mhz}
    return {"power_limit_w": key.cap_w, **clock}


def sweep_report(
    path: str | Path,
    *,
    console: Console | None = None,
    power_limit_w: float | None = None,
    out_dir: str | Path | None = None,
    figures: bool = True,
    windows: str = "exclude",
) -> dict[str, Any]:
    """Print the tables for a run folder (or dataset file) and write figures + summary.json under RUN_DIR/reports/.

    Rows come from the one loader (``harness.dataset.load``): invalid-window rows are left out unless ``windows``
    is ``keep``; duplicate cells, NaN and torn lines stop the report.
    """
    from harness.core.jsonl import write_json_atomic
    from harness.dataset import load, print_notes

    console = console or Console(emoji=False)
    src = Path(path)
    check_manifest(src)
    loaded = load(path, windows=windows)  # type: ignore[arg-type]
    print_notes(loaded)
    run_dir = src if src.is_dir() else src.parent
    rows = loaded.rows
    limit, limit_src = power_limit_of(rows, run_dir, power_limit_w)
    fallback = limit if limit_src != "rows" else PUBLISHED_POWER_LIMIT_W
    limits = board_limits_of(run_dir)
    groups = [(key, summarize(g, key.cap_w, limits)) for key, g in pass_groups(rows, fallback, power_limit_w)]
    mark_excluded(groups, excluded_counts(loaded, fallback, power_limit_w))
    origin = provenance(loaded.all_rows)
    if origin["note"]:
        console.print(f"[bold yellow]{origin['note']}[/]")
    multi = len(groups) > 1
    if multi:
        clocks = any(key.clock is not None for key, _ in groups)
        console.print(
            f"[bold]{escape(str(loaded.path))}[/]: {len(rows)} rows at {len(groups)} "
            + ("passes: " if clocks else "power caps: ")
            + ", ".join(key.label for key, _ in groups)
            + (" (each row's enforced cap and locked SM clock)" if clocks else " (each row's enforced cap)")
        )
    else:
        limit = groups[0][0].cap_w if limit_src == "rows" else limit
        console.print(f"[bold]{escape(str(loaded.path))}[/]: {len(rows)} rows; power limit {limit:g} W ({limit_src})")
    for key, summaries in groups:
        for s in summaries:
            t = batch_table(s, key.cap_w)
            if multi:
                t.title = f"{'power cap ' if key.clock is None else ''}{key.label}, {t.title}"
            console.print(t)
    if multi:
        console.print(recipe_table(groups))
    errs = error_table(rows)
    if errs is not None:
        console.print(errs)
    spent = manifest_section(run_dir, "gpu_time")
    spent_line = gpu_time_line(spent)
    if spent_line:
        console.print(spent_line, markup=False)
    out = Path(out_dir) if out_dir is not None else run_dir / "reports"
    written: list[Path] = []
    if figures and any(summaries for _, summaries in groups):
        from harness.report.html import pareto_figures

        written = write_cap_figures(groups, out) + pareto_figures(groups, out)
    summary = {
        "source": str(loaded.path),
        "invalid_windows": windows,
        "invalid_window_rows": [r.index for r in loaded.excluded + loaded.flagged],
        "provenance": origin,
        "rows": rows_accounting(loaded),
        "power_limit_w": None if multi else limit,
        "power_limit_source": limit_src,
        "band": list(BAND),
        "batch_sizes": [
            {**s.model_dump(mode="json"), **(_pass_fields(key) if multi else {})}
            for key, summaries in groups
            for s in summaries
        ],
        "caps": [{**_pass_fields(key), "recipe": recipes([(key, summaries)])[key.id]} for key, summaries in groups],
        "recipe_across_passes": {
            str(bs): {**_pass_fields(key), "config": list(c.config), "speed_tok_s": c.speed_tok_s}
            for bs, (key, c) in sorted(best_across(groups).items())
        },
        "error_rows": [
            {
                "index": r.index,
                "repeat": r.repeat,
                "batch_size": r.batch_size,
                "config": r.config.as_tuple(),
                "error": r.error,
            }
            for r in rows
            if r.is_error
        ],
        "figures": [str(p) for p in written],
        "gpu_time": spent,
    }
    if figures:
        from harness.report.html import write_html

        write_json_atomic(out / "summary.json", summary)
        written.append(
            write_html(out / "report.html", source=str(loaded.path), groups=groups, summary=summary, figures=written)
        )
        for p in written + [out / "summary.json"]:
            console.print(f"wrote {p}", markup=False)
    return summary
