"""The recipe of a run with several passes (caps, clocks): per pass and batch size the fastest config inside the band,
and per batch size the pass it is fastest under (what ``--power-caps auto`` sweeps for)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

from rich.table import Table

from harness.grid import SpecConfig
from harness.report.passes import Pass

if TYPE_CHECKING:
    from harness.report.sweep import BatchSummary, CellSummary

SummaryGroups = Sequence[tuple[Pass, Sequence["BatchSummary"]]]


def _num(v: float | None, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def recipes(groups: SummaryGroups) -> dict[str, dict[str, Any]]:
    """Per pass (``Pass.id``: the cap in W, ``@clock`` with --sm-clocks) and batch size: the fastest config inside the
    band (``None`` when none is), as ``s,k,d`` lists."""
    return {
        key.id: {str(s.batch_size): (list(s.best_in_band.config) if s.best_in_band else None) for s in summaries}
        for key, summaries in groups
    }


def best_across(groups: SummaryGroups) -> dict[int, tuple[Pass, CellSummary]]:
    """Per batch size, the fastest in-band config over every pass and the pass (cap, clock) it is in band under:
    what ``--power-caps auto`` sweeps for (a batch size in band under no pass is absent)."""
    out: dict[int, tuple[Pass, CellSummary]] = {}
    for key, summaries in groups:
        for s in summaries:
            b = s.best_in_band
            if b is not None and (
                s.batch_size not in out or (b.speed_tok_s or 0) > (out[s.batch_size][1].speed_tok_s or 0)
            ):
                out[s.batch_size] = (key, b)
    return out


def recipe_table(groups: SummaryGroups) -> Table:
    """The recipe per pass: rows are batch sizes, columns passes, each cell the best config in the band (speed, u)."""
    what = "power cap" if all(k.clock is None for k, _ in groups) else "power cap and SM clock"
    t = Table(
        title=f"recipe per {what}: fastest config inside the band (~: closest when none is)", title_justify="left"
    )
    t.add_column("bs", justify="right")
    for key, _ in groups:
        t.add_column(key.label)
    t.add_column("across passes: pass, config")
    across = best_across(groups)
    by = {cap: {s.batch_size: s for s in summaries} for cap, summaries in groups}
    for bs in sorted({s.batch_size for _, summaries in groups for s in summaries}):
        cells = []
        for cap, _ in groups:
            s = by[cap].get(bs)
            c = s.best_in_band if s else None
            if c is not None:
                cells.append(
                    f"{SpecConfig(*c.config)} {_num(c.speed_tok_s, '.1f')} tok/s u={_num(c.utilization, '.2f')}"
                )
            elif s is not None and s.closest_to_band is not None:
                cells.append(
                    f"[dim]~{SpecConfig(*s.closest_to_band.config)} u={_num(s.closest_to_band.utilization, '.2f')}[/]"
                )
            else:
                cells.append("-")
        pick = across.get(bs)
        cells.append(f"{pick[0].label}: {SpecConfig(*pick[1].config)}" if pick else "[dim]none in band[/]")
        t.add_row(str(bs), *cells)
    return t
