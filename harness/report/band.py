"""The energy band of the reports, and why a batch size has no config in it: one line that says where the configs sit
and the command that finds one (the band is relative to the enforced cap, so a lower cap moves a config into it)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from harness.gpu.band import BAND, BAND_MID, clamp_cap, in_band
from harness.grid import SpecConfig

if TYPE_CHECKING:
    from harness.report.sweep import CellSummary

__all__ = ["BAND", "BAND_MID", "board_limits_of", "no_band_hint"]


def no_band_hint(
    cells: Sequence[CellSummary],
    cap_w: float,
    batch_size: int,
    limits: tuple[float | None, float | None] = (None, None),
) -> str | None:
    """None when a measured config is in the band (or none was measured); else why none is, and how to find one:
    a cap inside the board's constraints ``limits`` (min, max watts; from the run's manifest when known)."""
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
    lo, hi = limits
    cap = clamp_cap(watts / BAND_MID, lo, hi)
    if lo is not None and hi is not None and not in_band(min(watts, cap), cap):
        return line + (
            f" {SpecConfig(*fastest.config)}, the fastest below it, drew {watts:.1f} W: no cap inside this GPU's "
            f"{lo:g}-{hi:g} W limits puts it in the band (a locked SM clock only lowers power)."
        )
    inside = f" (inside this GPU's {lo:g}-{hi:g} W limits)" if lo is not None and hi is not None else ""
    return line + (
        f" The band is relative to the enforced cap: {SpecConfig(*fastest.config)}, the fastest below it, drew "
        f"{watts:.1f} W, {watts / cap:.3f} of {cap:g} W; find it by rerunning with --batch-sizes {batch_size} "
        f"--power-caps {cap:g}{inside}, or --power-caps auto."
    )


def manifest_json(run_dir: Path | None) -> dict[str, Any]:
    """A run folder's manifest as JSON ({} when there is none or it does not parse: a published file alone)."""
    path = None if run_dir is None else run_dir / "manifest.json"
    if path is None or not path.is_file():
        return {}
    try:
        m = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return m if isinstance(m, dict) else {}


def manifest_section(run_dir: Path | None, key: str) -> Any:
    """One section of a run folder's manifest (None when absent)."""
    return manifest_json(run_dir).get(key)


def board_limits_of(run_dir: Path | None) -> tuple[float | None, float | None]:
    """The board's power-limit constraints (min, max W) a run's manifest recorded (its cap controller's or its band
    probe's), else (None, None): a published file alone does not say them."""
    m = manifest_json(run_dir)
    if not m:
        return None, None
    probe = ((m.get("preflight") or {}).get("probe") or {}).get("band") or {}
    for limits in ((m.get("power_cap") or {}).get("limits"), probe.get("limits")):
        if isinstance(limits, dict) and limits.get("min_w") is not None and limits.get("max_w") is not None:
            return float(limits["min_w"]), float(limits["max_w"])
    return None, None
