"""Paper figures and the self-contained HTML report of a sweep (``harness report sweep``): a speed vs J/token
Pareto plot per batch size (repeat standard deviations as error bars, the band's configs marked, the Pareto front
drawn), and ``reports/report.html``: every table and figure inline (PNG as base64), no external resource, so it
opens offline in any browser."""

from __future__ import annotations

import base64
import html
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:
    from harness.report.passes import Pass
    from harness.report.sweep import BatchSummary, CellSummary


def config_label(config: Sequence[int]) -> str:
    """``no_spec`` for (0,0,0), else ``s3 k4 d8`` (steps, topk, draft tokens)."""
    s, k, d = config
    return "no_spec" if (s, k, d) == (0, 0, 0) else f"s{s} k{k} d{d}"


def pareto_front(cells: Sequence["CellSummary"]) -> list["CellSummary"]:
    """The cells no other cell beats on both speed (higher) and J/token (lower), by J/token."""
    pts = [c for c in cells if c.speed_tok_s is not None and c.joules_per_token is not None]
    front = [
        c
        for c in pts
        if not any(
            (o.speed_tok_s or 0) >= (c.speed_tok_s or 0)
            and (o.joules_per_token or 0) <= (c.joules_per_token or 0)
            and (o.speed_tok_s, o.joules_per_token) != (c.speed_tok_s, c.joules_per_token)
            for o in pts
        )
    ]
    return sorted(front, key=lambda c: c.joules_per_token or 0.0)


def pareto_figures(groups: Sequence[tuple["Pass", Sequence["BatchSummary"]]], out_dir: Path) -> list[Path]:
    """``pareto.png`` (one pass) or ``pareto_<Pass.slug>.png`` per pass (``pareto_cap60w.png``, ``..._clk1410mhz``)."""
    if len(groups) == 1:
        return [pareto_figure(groups[0][1], out_dir / "pareto.png")]
    return [
        pareto_figure(summaries, out_dir / f"pareto_{key.slug}.png", f" at {key.label}") for key, summaries in groups
    ]


def pareto_figure(summaries: Sequence["BatchSummary"], path: Path, title_suffix: str = "") -> Path:
    """One panel per batch size: speed vs J/token with error bars, in-band configs green, the front as a line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = max(1, len(summaries))
    fig, axes = plt.subplots(1, n, figsize=(4.4 * n, 4.0), squeeze=False)
    for ax, s in zip(axes[0], summaries):
        pts = [c for c in s.cells if c.speed_tok_s is not None and c.joules_per_token is not None]
        for c in pts:
            colour = "tab:green" if c.in_band else "tab:gray"
            ax.errorbar(
                c.joules_per_token,
                c.speed_tok_s,
                xerr=c.jpt_sd or 0.0,
                yerr=c.speed_sd or 0.0,
                fmt="o",
                ms=5,
                color=colour,
                ecolor=colour,
                elinewidth=0.8,
                capsize=2,
            )
            ax.annotate(
                config_label(c.config),
                (c.joules_per_token, c.speed_tok_s),
                fontsize=6,
                xytext=(3, 2),
                textcoords="offset points",
            )
        front = pareto_front(pts)
        ax.plot([c.joules_per_token for c in front], [c.speed_tok_s for c in front], color="tab:blue", lw=1, alpha=0.7)
        if s.best_in_band is not None:
            b = s.best_in_band
            ax.scatter(
                [b.joules_per_token],
                [b.speed_tok_s],
                s=140,
                facecolors="none",
                edgecolors="tab:red",
                linewidths=1.6,
                zorder=3,
            )
        ax.set_title(f"batch size {s.batch_size}{title_suffix}", fontsize=9)
        ax.set_xlabel("J/token (lower is better)")
        ax.set_ylabel("speed, tok/s per sequence")
        ax.grid(alpha=0.3)
    axes[0][0].plot([], [], "o", color="tab:green", label="inside the band")
    axes[0][0].plot([], [], "o", color="tab:gray", label="outside")
    axes[0][0].plot([], [], color="tab:blue", label="Pareto front")
    axes[0][0].scatter([], [], s=140, facecolors="none", edgecolors="tab:red", label="best in band")
    axes[0][0].legend(fontsize=6, loc="best")
    fig.suptitle("speed vs energy per token (error bars: SD over repeats)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _fmt(v: float | None, spec: str, sd: float | None = None) -> str:
    if v is None:
        return "–"
    return format(v, spec) + (f" ± {format(sd, spec)}" if sd else "")


def _batch_table(s: "BatchSummary") -> str:
    head = (
        "<tr><th>config</th><th>repeats ok</th><th>excluded</th><th>tok/s per sequence</th><th>tok/s batch</th>"
        "<th>J/token</th><th>avg W</th><th>utilization</th><th>band</th></tr>"
    )
    rows = []
    best = s.best_in_band.config if s.best_in_band else None
    for c in s.cells:
        mark = "best in band" if c.config == best else ("in band" if c.in_band else "")
        cls = ' class="best"' if c.config == best else (' class="band"' if c.in_band else "")
        rows.append(
            f"<tr{cls}><td>{config_label(c.config)}</td><td>{c.n_ok}/{c.n_ok + c.n_error}</td><td>{c.n_excluded}</td>"
            f"<td>{_fmt(c.speed_tok_s, '.1f', c.speed_sd)}</td><td>{_fmt(c.aggregate_tok_s, '.0f')}</td>"
            f"<td>{_fmt(c.joules_per_token, '.4f', c.jpt_sd)}</td>"
            f"<td>{_fmt(c.avg_power_watts, '.1f')}</td><td>{_fmt(c.utilization, '.3f')}</td><td>{mark}</td></tr>"
        )
    return f"<table>{head}{''.join(rows)}</table>"


CSS = (
    "body{font-family:sans-serif;margin:2em;max-width:1200px}table{border-collapse:collapse;margin:.5em 0 1.5em}"
    "td,th{border:1px solid #bbb;padding:3px 8px;font-size:13px;text-align:right}th{background:#eee}"
    ".note{background:#fff4d6;padding:4px 8px}tr.band{background:#e6f4e6}tr.best{background:#c8e8c8;font-weight:bold}img{max-width:100%;border:1px solid #ddd}"
)


def write_html(
    path: Path,
    *,
    source: str,
    groups: Sequence[tuple["Pass", Sequence["BatchSummary"]]],
    summary: dict[str, Any],
    figures: Sequence[Path],
) -> Path:
    """``report.html``: the run, the recipe per cap, a table per batch size and every figure inline."""
    parts = [
        f"<h1>Sweep report</h1><p>source: <code>{html.escape(source)}</code>; band {summary['band'][0]}–{summary['band'][1]} "
        "of the enforced power cap; means over the successful repeats (± SD); tok/s per sequence, and for the batch "
        "(per sequence x batch size).</p>"
    ]
    origin, counted = summary.get("provenance") or {}, summary.get("rows") or {}
    if origin.get("note"):
        parts.append(f'<p class="note"><b>{html.escape(origin["note"])}</b> (hardware: '
                     f"{html.escape(', '.join(origin.get('hardware') or []))})</p>")  # fmt: skip
    if counted:
        parts.append(
            f"<p>rows used: {counted['used']}; left out for an invalid measurement window: "
            f"{counted['excluded_invalid_window']}; kept with one: {counted['kept_invalid_window']}; "
            f"superseded by a later try: {counted['superseded']}.</p>"
            + "".join(f'<p class="note">{html.escape(n)}</p>' for n in counted.get("notes") or [])
        )
    for (key, _), cap in zip(groups, summary["caps"]):
        recipe = cap["recipe"]
        items = "".join(
            f"<li>batch size {html.escape(str(bs))}: {config_label(v) if v else 'none in band'}</li>"
            for bs, v in recipe.items()
        )
        parts.append(f"<h2>Recipe at {html.escape(key.label)}</h2><ul>{items}</ul>")
    for key, summaries in groups:
        for s in summaries:
            why = f"<p>{html.escape(s.why_none)}</p>" if s.why_none else ""
            parts.append(f"<h3>{html.escape(key.label)}, batch size {s.batch_size}</h3>{_batch_table(s)}{why}")
    parts += [inline_figure(fig) for fig in figures]
    return write_page(path, "Sweep report", parts)


def inline_figure(fig: Path) -> str:
    """A PNG as an ``<h3>`` with its name and the image inline (base64): no external resource."""
    data = base64.b64encode(Path(fig).read_bytes()).decode()
    name = html.escape(Path(fig).stem)
    return f'<h3>{name}</h3><img alt="{name}" src="data:image/png;base64,{data}">'


def write_page(path: Path, title: str, parts: Sequence[str]) -> Path:
    """A self-contained HTML page (the house CSS inline) of ``parts``."""
    doc = (
        f'<!doctype html><html><head><meta charset="utf-8"><title>{html.escape(title)}</title><style>{CSS}</style>'
        f"</head><body>{''.join(parts)}</body></html>"
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(doc)
    return path
