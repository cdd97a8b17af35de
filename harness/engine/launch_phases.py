"""A launch's phases from the server's own log: imports, weights, CUDA graphs, the rest (memory pool, warm-up).

sglang prints ``Load weight end. elapsed=0.44 s`` (0.5.23, ``srt/model_executor/model_runner.py``) and ``Capture
{name} CUDA graph end. elapsed=12.31 s`` (0.5.23, ``model_runner_components/cuda_graph_setup.py``; the draft's in
``speculative/eagle_worker_v2.py``), older versions ``Capture cuda graph end. Time elapsed: 12.31 s``, and ``The
server is fired up and ready to roll!``. Where a line has no elapsed figure, the phase is the time between its begin
and end lines' stamps (one-second resolution). Imports are what comes before the first ``Load weight begin``. The twin
engine prints the same lines with its own clock's figures.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone
from pathlib import Path

_STAMP = re.compile(r"^\[(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2})")
_WEIGHT_BEGIN = re.compile(r"Load weight begin")
_WEIGHT_END = re.compile(r"Load weight end\.(?:.*?elapsed=([\d.]+) s)?")
_GRAPH_BEGIN = re.compile(r"Capture .*?graph begin", re.IGNORECASE)
_GRAPH_END = re.compile(r"Capture .*?graph end\.(?:\s*(?:elapsed=|Time elapsed: )([\d.]+) s)?", re.IGNORECASE)
_READY = re.compile(r"fired up and ready to roll")
PARTS = ("imports", "weights", "cuda_graphs", "other")
"""The launch's parts, in order; they sum to the launch."""


def _stamp(line: str) -> float | None:
    m = _STAMP.match(line)
    if not m:
        return None
    return datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S").replace(tzinfo=timezone.utc).timestamp()


def _span(lines: list[tuple[float | None, str]], begin: re.Pattern[str], end: re.Pattern[str]) -> float:
    """Seconds of the ``begin``..``end`` phases: each end line's elapsed figure, else the stamps' difference."""
    total, opened = 0.0, None
    for ts, text in lines:
        if begin.search(text):
            opened = ts
            continue
        m = end.search(text)
        if m:
            if m.group(1) is not None:
                total += float(m.group(1))
            elif opened is not None and ts is not None:
                total += max(0.0, ts - opened)
            opened = None
    return total


def launch_phases(log_text: str, launch_s: float) -> dict[str, float] | None:
    """The parts of a launch that took ``launch_s`` seconds (start to ready), from its log; None when the log has no
    ``Load weight begin`` (not a launch log, or an engine that says nothing)."""
    lines = [(_stamp(line), line) for line in log_text.splitlines()]
    stamps = [(ts, text) for ts, text in lines if ts is not None]
    first_weight = next((ts for ts, text in stamps if _WEIGHT_BEGIN.search(text)), None)
    ready = next((ts for ts, text in stamps if _READY.search(text)), None)
    if first_weight is None:
        return None
    after_imports = (ready - first_weight) if ready is not None else None
    imports = max(0.0, launch_s - after_imports) if after_imports is not None else 0.0
    weights = _span(lines, _WEIGHT_BEGIN, _WEIGHT_END)
    graphs = _span(lines, _GRAPH_BEGIN, _GRAPH_END)
    other = max(0.0, launch_s - imports - weights - graphs)
    return {"imports": imports, "weights": weights, "cuda_graphs": graphs, "other": other}


def read_launch_phases(log_path: str | Path | None, launch_s: float) -> dict[str, float] | None:
    """``launch_phases`` of a log file (None when it cannot be read)."""
    if log_path is None:
        return None
    try:
        text = Path(log_path).read_text(errors="replace")
    except OSError:
        return None
    return launch_phases(text, launch_s)
