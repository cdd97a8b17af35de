"""The passes of a sweep report: grid rows grouped by the device settings they ran under (the enforced power cap and,
with ``--sm-clocks``, the locked SM clock). Utilization is always against the pass's cap."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Sequence

from harness.runs.rows import SweepRow, pass_of


@dataclass(frozen=True)
class Pass:
    """One group of a report: the cap (W) its rows ran under and, when the sweep locked clocks, the SM clock label
    (``1410``, or ``max`` for unlocked; None when clocks were not swept)."""

    cap_w: float
    clock: str | None = None

    @property
    def label(self) -> str:
        """``60 W``; ``60 W, SM 1410 MHz``; ``60 W, SM unlocked``."""
        if self.clock is None:
            return f"{self.cap_w:g} W"
        return f"{self.cap_w:g} W, SM " + ("unlocked" if self.clock == "max" else f"{self.clock} MHz")

    @property
    def id(self) -> str:
        """Key of ``recipes`` and summary.json: ``60`` (as before clocks existed), or ``60@1410`` / ``60@max``."""
        return f"{self.cap_w:g}" + (f"@{self.clock}" if self.clock is not None else "")

    @property
    def slug(self) -> str:
        """File name part: ``cap60w``, or ``cap60w_clk1410mhz`` / ``cap60w_clkmax``."""
        clock = "" if self.clock is None else ("_clkmax" if self.clock == "max" else f"_clk{self.clock}mhz")
        return f"cap{self.cap_w:g}w{clock}"

    @property
    def sm_clock_mhz(self) -> float | None:
        if self.clock is None or self.clock == "max":
            return None
        return float(self.clock)

    def sort_key(self) -> tuple[float, int, float]:
        """Caps ascending; per cap unlocked first, then clocks descending."""
        return self.cap_w, 0 if self.clock in (None, "max") else 1, -(self.sm_clock_mhz or 0.0)


PassGroup = tuple[Pass, list[SweepRow]]


def pass_groups(rows: Sequence[SweepRow], fallback_w: float, override_w: float | None = None) -> list[PassGroup]:
    """Grid rows grouped by the pass they ran under (the row's enforced limit, else ``fallback_w``, and its locked
    SM clock), lowest cap first; with ``override_w`` (``--power-limit``) every row counts at that cap."""
    grid = [r for r in rows if not r.is_pilot]
    groups: dict[Pass, list[SweepRow]] = defaultdict(list)
    for r in grid:
        cap = float(override_w) if override_w is not None else round(float(r.power_limit_w or fallback_w), 1)
        groups[Pass(cap, pass_of(r).clock)].append(r)
    if not groups:
        return [(Pass(float(override_w) if override_w is not None else fallback_w), [])]
    return sorted(groups.items(), key=lambda kv: kv[0].sort_key())
