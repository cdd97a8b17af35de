"""The serving benchmark's self-contained HTML page (``benchmarks/serve_band.py``): per trace the table of every
mode and the time series figures, on the sweep report's page machinery (``html.py``)."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any, Sequence

from harness.report.html import inline_figure, write_page

COLUMNS = (
    ("busy_in_band", "busy in band", "pct"),
    ("time_in_band", "time in band", "pct"),
    ("tracking_rms", "tracking RMS", ".4f"),
    ("step_response_s", "step response s", ".1f"),
    ("steps_reached", "steps reached", "s"),
    ("tok_s", "tok/s", ".1f"),
    ("j_per_token", "J/token", ".4f"),
    ("p50_s", "p50 s", ".2f"),
    ("p99_s", "p99 s", ".2f"),
    ("ttft_p50_s", "TTFT p50 s", ".2f"),
    ("ttft_p99_s", "TTFT p99 s", ".2f"),
    ("switches", "switches", "d"),
    ("clock_changes", "clock changes", "d"),
    ("errors", "errors", "d"),
)


def cell(v: Any, spec: str) -> str:
    if v is None:
        return "–"
    if spec == "pct":
        return f"{v:.1%}"
    return html.escape(str(v)) if spec in ("s", "d") else format(v, spec)


def mode_table(modes: dict[str, dict[str, Any]]) -> str:
    """One row per mode, the columns above."""
    head = "<tr><th>mode</th>" + "".join(f"<th>{html.escape(t)}</th>" for _, t, _ in COLUMNS) + "</tr>"
    rows = [
        f"<tr><td>{html.escape(name)}</td>" + "".join(f"<td>{cell(f.get(k), s)}</td>" for k, _, s in COLUMNS) + "</tr>"
        for name, f in modes.items()
    ]
    return f"<table>{head}{''.join(rows)}</table>"


def write_serve_html(path: Path, report: dict[str, Any], figures: Sequence[Path]) -> Path:
    """``serve_band.html``: the run's facts, per trace its table and notes, then every figure inline."""
    band = report["band"]
    parts = [
        f"<h1>Serving band benchmark</h1><p>commit <code>{html.escape(str(report.get('commit')))}</code>, "
        f"{html.escape(str(report.get('hardware')))}, time scale {report.get('time_scale')}, band "
        f"{band[0]}–{band[1]} of the enforced cap; twin figures, not a GPU's.</p>"
    ]
    for trace, t in report["traces"].items():
        notes = "".join(f"<li>{html.escape(str(n))}</li>" for n in t.get("notes", []))
        parts.append(f"<h2>{html.escape(trace)}</h2><ul>{notes}</ul>{mode_table(t['modes'])}")
    parts += [inline_figure(f) for f in figures]
    return write_page(path, "Serving band benchmark", parts)
