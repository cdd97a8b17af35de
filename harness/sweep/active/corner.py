"""The low-step corner: measured when the fitted draft head is weaker or slower than the start profile's.

The start profile (the published board) favours deep trees, and the calibration set measures 3- and 5-step trees at
the smallest batch size, so the fewest-step configs there are the model's extrapolation. On a board whose draft
head accepts less or steps slower, that corner can hold the recipe ((1,4,4) beat (3,4,8) on a twin with first-token
acceptance 0.42 and a 1.5 ms draft step), and an extrapolated estimate with the model's in-sample error does not
open it. So when the fitted first-token acceptance is below the start's by more than ``ACCEPT_DROP`` (relative), or
the fitted draft step time above it by more than ``DRAFT_RISE``, every batch size without a measured fewest-step
config gets its best-predicted fewest-step config measured (once): the fit then pins the draft's cost and acceptance
at one step, and the ordinary open-rival rule takes over.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from harness.sweep.active.estimate import CellEstimate
from harness.twin.profile import TwinProfile

ACCEPT_DROP = 0.1
"""Relative drop of the fitted ``accept_first`` below the start profile's that opens the low-step corner."""
DRAFT_RISE = 0.15
"""Relative rise of the fitted ``draft_step_ms`` above the start profile's that opens it."""


@dataclass(frozen=True)
class Corner:
    """The low-step cells worth measuring, and why (empty when the draft head is like the start profile's)."""

    cells: tuple[CellEstimate, ...]
    reason: str


def draft_departure(fitted: TwinProfile, start: TwinProfile) -> str | None:
    """Why the fitted draft head differs from the start's (``None`` when it does not, by the thresholds above)."""
    acc, acc0 = fitted.perf.accept_first, start.perf.accept_first
    step, step0 = fitted.perf.draft_step_ms, start.perf.draft_step_ms
    why = []
    if acc < acc0 * (1 - ACCEPT_DROP):
        why.append(f"fitted first-token acceptance {acc:.2f} < start {acc0:.2f}")
    if step > step0 * (1 + DRAFT_RISE):
        why.append(f"fitted draft step {step:.2f} ms > start {step0:.2f} ms")
    return "; ".join(why) or None


def low_step_corner(fitted: TwinProfile, start: TwinProfile, cells: Sequence[CellEstimate]) -> Corner:
    """Per batch size with no fewest-step spec config measured, the best-predicted one (when the draft departs)."""
    why = draft_departure(fitted, start)
    if why is None:
        return Corner((), "")
    spec = [c for c in cells if c.config != (0, 0, 0) and c.prediction.fits]
    if not spec:
        return Corner((), why)
    fewest = min(c.config[0] for c in spec)
    out = []
    for bs in sorted({c.batch_size for c in spec}):
        low = [c for c in spec if c.batch_size == bs and c.config[0] == fewest]
        if low and not any(c.measured for c in low):
            out.append(max(low, key=lambda c: c.reward))
    return Corner(tuple(out), why)
