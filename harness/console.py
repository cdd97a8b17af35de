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
        self.console = Console(file=self.stream, highlight=False, soft_wrap=True)
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
            self._progress = Progress(TextColumn("[bold]sweep"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                                      TextColumn("eta"), TimeRemainingColumn(), TextColumn("{task.description}"),
                                      console=self.console, transient=False)
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

    def cell_done(self, cell_id: str, config: str, batch_size: int, repeat: int, *, speed: float | None,
                  j_per_tok: float | None, error: str | None, retry_mf: float | None = None) -> None:
        self.done += 1
        self._measured += 1
        eta = self.eta_s()
        self._last = "ERROR" if error else f"{_fmt(speed, '.1f')} tok/s {_fmt(j_per_tok, '.4f')} J/tok"
        retry = f" (retry at mem {retry_mf:g})" if retry_mf else ""
        status = f"error: {error}" if error else f"speed {_fmt(speed, '.1f')} tok/s  {_fmt(j_per_tok, '.4f')} J/tok"
        text = (f"[{self.done}/{self.total}] {cell_id} cfg {config} bs {batch_size} rep {repeat}: {status}{retry}"
                f"  eta {_fmt(eta, '.0f')} s")
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
