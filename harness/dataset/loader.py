"""The one loader every consumer uses (train, evaluate, report, merge, export, compare): validate's checks, then
the rows a consumer may use and what it set aside."""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Literal

from pydantic import Field

from harness.core.errors import DataError, UsageError
from harness.dataset.source import Layout, ReadRows, invalid_window, window_summary
from harness.dataset.validate import inspect
from harness.runs.rows import SweepRow

WindowRule = Literal["exclude", "keep", "fail"]
"""What consumers do with successful rows whose measurement window is invalid (``window_valid`` false)."""

WINDOW_RULE_HELP = (
    "successful rows whose measurement window is invalid: exclude (default), keep (use as measured) or fail"
)
"""The ``--invalid-windows`` help and fix hint (one text for every consumer command)."""

CONSUMER_SOFT_CODES = frozenset(
    {
        "config_missing",
        "batch_size_missing",
        "index_gap",
        "baseline_missing",
        "baseline_failed",
        "unplanned_missing",
        "dataset_missing",
        "dataset_mismatch",
        "dataset_unreadable",
        "manifest",
    }
)
"""Validation errors a consumer may proceed past (as warnings): an unfinished run, a stale derived dataset.jsonl, an
unreadable manifest. Every other validation error (schema, non-finite numbers, key order, duplicate cells, index
conflicts, invalid configs) stops every consumer."""


class Loaded(ReadRows):
    """A dataset read by the one loader: all records, the resolved rows it hands to consumers, what it set aside."""

    layout: Layout
    excluded: list[SweepRow] = Field(default_factory=list)  # invalid-window rows left out (``windows="exclude"``)
    flagged: list[SweepRow] = Field(default_factory=list)  # invalid-window rows kept (``windows="keep"``)
    warnings: list[str] = Field(default_factory=list)

    @property
    def n_superseded(self) -> int:
        return len(self.all_rows) - len(self.rows) - len(self.excluded)

    def notes(self) -> list[str]:
        """One line per thing a consumer should tell the user (exclusions, kept invalid windows, warnings)."""
        out = [f"{w}" for w in self.warnings]
        if self.excluded:
            out.append(
                f"{len(self.excluded)} rows with an invalid measurement window excluded ({window_summary(self.excluded)}); "
                "--invalid-windows keep uses them"
            )
        if self.flagged:
            out.append(
                f"{len(self.flagged)} rows with an invalid measurement window kept by --invalid-windows keep "
                f"({window_summary(self.flagged)})"
            )
        return out


def print_notes(loaded: Loaded) -> None:
    """Print the loader's notes to stderr (yellow), for every consumer command."""
    from rich.console import Console

    console = Console(emoji=False, stderr=True, highlight=False, soft_wrap=True)
    for note in loaded.notes():
        console.print("[yellow]note:[/] ", end="")
        console.print(note, markup=False)


def load(path: str | Path, *, published_only: bool = False, windows: WindowRule = "exclude") -> Loaded:
    """The one loader every consumer uses (train, evaluate, report, merge, export, compare).

    It runs ``validate``'s checks (a run folder against the grid its manifest planned) and raises one DataError
    listing the problems unless all of them are in ``CONSUMER_SOFT_CODES`` (those become warnings). A torn last line,
    NaN or infinity, duplicate cells and conflicting indexes always stop it. ``published_only`` requires configs from
    the 19 published actions. ``windows`` decides the fate of successful rows with an invalid measurement window.
    """
    if windows not in ("exclude", "keep", "fail"):
        raise UsageError(f"--invalid-windows must be exclude, keep or fail, got {windows!r}", fix=WINDOW_RULE_HELP)
    insp = inspect(path, subset=not published_only)
    report = insp.report
    fatal = [i for i in report.errors if i.code not in CONSUMER_SOFT_CODES]
    if fatal:
        listed = "; ".join(f"{i.code}{f' at {i.where}' if i.where else ''}: {i.message}" for i in fatal[:4])
        more = f" (+{len(fatal) - 4} more)" if len(fatal) > 4 else ""
        raise DataError(
            f"{insp.path} cannot be used: {listed}{more}",
            fix=f"harness dataset validate {path} lists every problem; fix or remove those rows",
        )
    warnings = [
        f"{i.code}: {i.message}" + (f" ({i.where})" if i.where else "")
        for i in report.errors
        if i.code in CONSUMER_SOFT_CODES
    ][:5]
    bad = [r for r in insp.rows if invalid_window(r)]
    if bad and windows == "fail":
        raise DataError(
            f"{insp.path}: {len(bad)} rows have an invalid measurement window ({window_summary(bad)})",
            fix="--invalid-windows exclude leaves them out, --invalid-windows keep uses them as measured",
        )
    rows = [r for r in insp.rows if not (windows == "exclude" and invalid_window(r))]
    return Loaded(
        path=insp.path,
        layout=report.layout,
        records=insp.records,
        all_rows=insp.all_rows,
        rows=rows,
        excluded=bad if windows == "exclude" else [],
        flagged=bad if windows == "keep" else [],
        warnings=warnings,
    )


def load_many(
    paths: Iterable[str | Path], *, published_only: bool = False, windows: WindowRule = "exclude"
) -> list[SweepRow]:
    out: list[SweepRow] = []
    for p in paths:
        loaded = load(p, published_only=published_only, windows=windows)
        print_notes(loaded)
        out.extend(loaded.rows)
    return out
