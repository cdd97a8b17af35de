"""How well a serving mode held the band, pure: over 1-s windows of utilization (avg power / enforced cap) and
whether requests were in flight throughout each (busy), the shares in the band, the tracking error and the step
response; latency percentiles of the finished requests."""

from __future__ import annotations

import math
from statistics import median
from typing import Sequence

from harness.serve.utilization_model import band_distance


def share(flags: Sequence[bool]) -> float | None:
    return round(sum(flags) / len(flags), 4) if flags else None


def band_figures(
    us: Sequence[float | None], busy: Sequence[bool], band: tuple[float, float], steps: Sequence[int] = ()
) -> dict[str, float | int | str | None]:
    """``time_in_band`` (all valid windows), ``busy_in_band`` (busy windows), ``busy_share``, ``tracking_rms``
    (RMS over busy windows of the distance to the band, 0 inside), ``mean_u``, and the step response: for each step
    (a window index: a load phase edge, or a busy stretch starting after an idle window), the seconds until the
    first busy window wholly in the band (its end), if it comes before the next step and within 10 s
    (``step_response_s``: the median over the steps that reached it; ``steps_reached``: ``k/n``)."""
    if len(us) != len(busy):
        raise ValueError("one busy flag per window")
    valid = [u for u in us if u is not None]
    bus = [u for u, b in zip(us, busy) if b and u is not None]
    inside = lambda u: band[0] <= u <= band[1]  # noqa: E731
    starts = sorted(set(steps) | {i for i in range(1, len(busy)) if busy[i] and not busy[i - 1]})
    reached: list[float] = []
    for j, s in enumerate(starts):
        stop = min(starts[j + 1] if j + 1 < len(starts) else len(us), s + 10)
        hit = next((i for i in range(s, stop) if busy[i] and us[i] is not None and inside(us[i])), None)
        if hit is not None:
            reached.append(float(hit - s + 1))
    return {
        "time_in_band": share([inside(u) for u in valid]),
        "busy_in_band": share([inside(u) for u in bus]),
        "busy_share": round(len(bus) / len(valid), 4) if valid else None,
        "tracking_rms": round(math.sqrt(sum(band_distance(u, band) ** 2 for u in bus) / len(bus)), 4) if bus else None,
        "mean_u": round(sum(valid) / len(valid), 4) if valid else None,
        "step_response_s": median(reached) if reached else None,
        "steps_reached": f"{len(reached)}/{len(starts)}",
    }


def percentile(xs: Sequence[float], q: float) -> float | None:
    """The ``q`` quantile (nearest rank, no interpolation) rounded to ms; None for no values."""
    s = sorted(xs)
    return round(s[min(len(s) - 1, int(q * len(s)))], 3) if s else None
