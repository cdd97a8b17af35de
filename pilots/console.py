"""Console output of the pilots: a rich console sized for logs, summary tables, the all-servers-failed check."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from rich.console import Console
from rich.table import Table

from harness.core.errors import EngineLaunchError

if TYPE_CHECKING:
    from pilots.runner import PilotResult


def pilot_console(*, stderr: bool = False) -> Any:
    """A rich console; when output is not a terminal it is 160 columns wide (``COLUMNS`` overrides)."""
    stream = sys.stderr if stderr else sys.stdout
    width = None if stream.isatty() else int(os.environ.get("COLUMNS", "160"))
    return Console(emoji=False, stderr=stderr, highlight=False, width=width)


def check_result(result: PilotResult) -> None:
    """Raise ``EngineLaunchError`` when no config produced a trial because every server failed to start."""
    failed = [o for o in result.outcomes if o.summary.get("status") in ("server_start_error", "warmup_error")]
    if result.outcomes and len(failed) == len(result.outcomes):
        raise EngineLaunchError(
            f"every pilot server failed to start ({failed[0].name}: {failed[0].summary.get('error')})",
            fix=f"see the server logs under {result.run_dir / 'logs'}; outputs so far are in {result.run_dir}",
        )


def summary_table(title: str, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> Any:
    """A rich table; floats get 3 significant decimals, None prints as a dash."""
    table = Table(title=title, show_lines=False)
    text_cols = ("config", "task", "instance", "status", "patch", "evaluation", "success")
    rows = [[fmt(v) for v in r] for r in rows]
    for i, c in enumerate(columns):
        if c in text_cols:
            width = max([len(c)] + [len(r[i]) for r in rows if i < len(r)])
            table.add_column(c, justify="left", no_wrap=True, min_width=min(width, 40))
        else:
            table.add_column(c, justify="right")
    for r in rows:
        table.add_row(*r)
    return table


def fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:,.3f}" if abs(v) < 10 else f"{v:,.1f}"
    return str(v)
