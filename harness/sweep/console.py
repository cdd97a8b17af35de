"""Sweep console output: a live rich progress line on a TTY, plain lines otherwise."""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn


def _fmt(x: float | None, spec: str) -> str:
    return "-" if x is None else format(x, spec)


class SweepConsole:
    """Progress of a sweep: ``start(total)``, ``cell_started(...)``, ``cell_done(...)``, ``note(...)``, ``close()``."""

    def __init__(self, *, stream: TextIO | None = None, force_plain: bool | None = None, quiet: bool = False) -> None:
        self.stream = stream or sys.stderr
        self.console = Console(emoji=False, file=self.stream, highlight=False, soft_wrap=True)
        self.live = (not quiet) and not force_plain and self.console.is_terminal
        self.quiet = quiet
        self.total = 0
        self.done = 0
        self._t0 = time.monotonic()
        self._measured = 0
        self._progress: Progress | None = None
        self._task: Any = None
        self._last = ""

    def start(self, total: int, already_done: int = 0) -> None:
        self.total = total
        self.done = already_done
        self._t0 = time.monotonic()
        if self.live:
            self._progress = Progress(
                TextColumn("[bold]sweep"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TextColumn("eta"),
                TimeRemainingColumn(),
                TextColumn("{task.description}"),
                console=self.console,
                transient=False,
            )
            self._progress.start()
            self._task = self._progress.add_task("", total=total, completed=already_done)
        else:
            self.line(f"sweep: {total} cells, {already_done} already done")

    def eta_s(self) -> float | None:
        if self._measured == 0:
            return None
        per = (time.monotonic() - self._t0) / self._measured
        return per * max(0, self.total - self.done)

    def line(self, text: str) -> None:
        if self.quiet:
            return
        if self._progress is not None:
            self._progress.console.print(text, markup=False)
        else:
            print(text, file=self.stream, flush=True)

    def cell_started(self, cell_id: str, config: str, batch_size: int, repeat: int) -> None:
        desc = f"{cell_id} cfg {config} bs {batch_size} rep {repeat} | last {self._last}"
        if self._progress is not None:
            self._progress.update(self._task, description=desc)

    def cell_done(
        self,
        cell_id: str,
        config: str,
        batch_size: int,
        repeat: int,
        *,
        speed: float | None,
        j_per_tok: float | None,
        error: str | None,
        retry_mf: float | None = None,
    ) -> None:
        self.done += 1
        self._measured += 1
        eta = self.eta_s()
        self._last = "ERROR" if error else f"{_fmt(speed, '.1f')} tok/s {_fmt(j_per_tok, '.4f')} J/tok"
        retry = f" (retry at mem {retry_mf:g})" if retry_mf else ""
        status = f"error: {error}" if error else f"speed {_fmt(speed, '.1f')} tok/s  {_fmt(j_per_tok, '.4f')} J/tok"
        text = (
            f"[{self.done}/{self.total}] {cell_id} cfg {config} bs {batch_size} rep {repeat}: {status}{retry}"
            f"  eta {_fmt(eta, '.0f')} s"
        )
        if self._progress is not None:
            self._progress.update(self._task, completed=self.done)
            if error:
                self.line(text)
        else:
            self.line(text)

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None


def batch_size_table(rows: list[Any], power_limit_w: float | None = None) -> Any:
    """A per-batch-size summary (baseline, reference (3,4,8), fastest config, configs in the 0.95-0.98 band)."""
    from collections import defaultdict
    from statistics import fmean

    from rich.table import Table

    cells: dict[int, dict[tuple[int, int, int], list[Any]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        if not r.error and r.speed_tok_s is not None:
            cells[r.batch_size][(r.steps, r.topk, r.num_draft_tokens)].append(r)

    def mean(rs: list[Any], attr: str) -> float | None:
        xs = [getattr(r, attr) for r in rs if getattr(r, attr) is not None]
        return fmean(xs) if xs else None

    def util(rs: list[Any]) -> float | None:
        p = mean(rs, "avg_power_watts")
        limit = power_limit_w or mean(rs, "power_limit_w")
        return p / limit if p is not None and limit else None

    def show(cfg: tuple[int, int, int] | None, rs: list[Any]) -> str:
        if not rs:
            return "-"
        u = util(rs)
        return (
            f"{cfg} {_fmt(mean(rs, 'speed_tok_s'), '.1f')} tok/s {_fmt(mean(rs, 'joules_per_token'), '.4f')} J/tok"
            + (f" u={u:.2f}" if u is not None else "")
        )

    t = Table(title="per batch size (means over repeats)", title_justify="left")
    for col in ("bs", "baseline", "reference (3,4,8)", "fastest", "in band 0.95-0.98"):
        t.add_column(col)
    for bs in sorted(cells):
        by = cells[bs]
        best = max(by, key=lambda c: mean(by[c], "speed_tok_s") or 0.0)
        band = [c for c in by if (u := util(by[c])) is not None and 0.95 <= u <= 0.98]
        t.add_row(
            str(bs),
            show((0, 0, 0), by.get((0, 0, 0), [])),
            show((3, 4, 8), by.get((3, 4, 8), [])),
            show(best, by[best]),
            ", ".join(str(c) for c in band) or "-",
        )
    return t
