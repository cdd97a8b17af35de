"""What a report must say before its numbers: where the rows come from (the GPU-free twin, a CPU, a GPU) and which
rows it left out, per cell, so "1/1" never hides two repeats dropped for an invalid measurement window; and that a
run folder's manifest is readable."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any, Sequence

from harness.dataset.loader import Loaded
from harness.report.passes import Pass, pass_groups
from harness.runs.rows import SweepRow

TWIN_NOTE = "rows from the GPU-free twin: simulated from the published measurements, not measured on a GPU"
CPU_NOTE = "rows from an engine on this host's CPU: speeds of a CPU, energy only where RAPL exists"


def provenance(rows: Sequence[SweepRow]) -> dict[str, Any]:
    """Engines, hardware and the world the rows were measured in (``twin``, ``cpu`` or ``gpu``), with a note."""
    hardware = sorted({r.hardware for r in rows if r.hardware})
    engines = sorted({r.engine.kind for r in rows if r.engine is not None})
    if "twin" in engines or any(h.startswith("twin:") for h in hardware):
        world, note = "twin", TWIN_NOTE
    elif hardware and all(h.startswith("cpu:") for h in hardware):
        world, note = "cpu", CPU_NOTE
    else:
        world, note = "gpu", None
    return {"world": world, "twin": world == "twin", "engines": engines, "hardware": hardware, "note": note}


def excluded_counts(loaded: Loaded, fallback_w: float, override_w: float | None) -> Counter[tuple[str, int, tuple]]:
    """Invalid-window rows left out, per (pass label, batch size, config)."""
    out: Counter[tuple[str, int, tuple]] = Counter()
    for key, group in pass_groups(loaded.excluded, fallback_w, override_w):
        for r in group:
            out[(key.label, r.batch_size, r.config.as_tuple())] += 1
    return out


def mark_excluded(groups: Sequence[tuple[Pass, Sequence[Any]]], counts: Counter[tuple[str, int, tuple]]) -> None:
    """Set each cell summary's ``n_excluded`` from ``counts``."""
    for key, summaries in groups:
        for s in summaries:
            for c in s.cells:
                c.n_excluded = counts.get((key.label, c.batch_size, tuple(c.config)), 0)


def rows_accounting(loaded: Loaded) -> dict[str, Any]:
    """How many rows the report used, left out and why (summary.json and report.html)."""
    return {
        "used": len(loaded.rows),
        "excluded_invalid_window": len(loaded.excluded),
        "kept_invalid_window": len(loaded.flagged),
        "superseded": loaded.n_superseded,
        "notes": loaded.notes(),
    }


def check_manifest(src: Path) -> None:
    """A sweep run folder's manifest is read as ``status`` and ``--resume`` read it: one that is not JSON, not a
    manifest, or holds unusable options is refused (a DataError, or the option's own OptionError), never ignored."""
    from harness.core.errors import HarnessError
    from harness.dataset import resolve_input
    from harness.runs.manifest import MANIFEST, read_options
    from harness.runs.rows import RowStore

    if not (src.is_dir() and (src / MANIFEST).is_file() and resolve_input(src).name == RowStore.ROWS):
        return  # a rows file, a pilot run or a folder of rows without a manifest: nothing planned to check
    try:
        read_options(src)
    except HarnessError as exc:
        exc.fix = f"{exc.fix}; or report the rows alone: harness report sweep {src / RowStore.ROWS}"
        raise
