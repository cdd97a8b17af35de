"""The energy band of the reports, and why a batch size has no config in it: one line that says where the configs sit
and the command that finds one (the band is relative to the enforced cap, so a lower cap moves a config into it)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from harness.grid import SpecConfig

if TYPE_CHECKING:
    from harness.report.sweep import CellSummary

BAND = (0.95, 0.98)
BAND_MID = (BAND[0] + BAND[1]) / 2


def no_band_hint(cells: Sequence[CellSummary], cap_w: float, batch_size: int) -> str | None:
    """None when a measured config is in the band (or none was measured); else why none is, and how to find one."""
    measured = [
        c for c in cells if c.utilization is not None and c.speed_tok_s is not None and c.avg_power_watts is not None
    ]
    if not measured or any(c.in_band for c in measured):
        return None
    below = [c for c in measured if (c.utilization or 0.0) < BAND[0]]
    above = [c for c in measured if (c.utilization or 0.0) > BAND[1]]
    where = []
    if above:
        low = min(above, key=lambda c: c.utilization or 0.0)
        where.append(f"{len(above)} above it (lowest {SpecConfig(*low.config)} at {low.utilization:.3f})")
    if below:
        high = max(below, key=lambda c: c.utilization or 0.0)
        where.append(f"{len(below)} below it (highest {SpecConfig(*high.config)} at {high.utilization:.3f})")
    line = f"none in band at {cap_w:g} W: " + ", ".join(where) + "."
    if not below:
        return line + (
            " Every config draws more than the band: the full grid (all 19 configs) or locked SM clocks "
            "(--sm-clocks) draw less."
        )
    fastest = max(below, key=lambda c: c.speed_tok_s or 0.0)
    watts = fastest.avg_power_watts or 0.0
    cap = round(watts / BAND_MID)
    return line + (
        f" The band is relative to the enforced cap: {SpecConfig(*fastest.config)}, the fastest below it, drew "
        f"{watts:.1f} W, {watts / cap:.3f} of {cap} W; find it by rerunning with --batch-sizes {batch_size} "
        f"--power-caps {cap}."
    )
