"""Steady-state windows (ML.ENERGY style) beside the measured window of a cell.

The measured window ([first request received, last request finished]) includes the ramp-up, while the first batch
fills, and the drain, while the last requests finish with a shrinking batch. The steady-state window keeps only the
part where the server runs a full batch: from the B-th request's first token to the (N-B)-th request's first token
(first-token instants sorted; B = batch size, N = requests). It is non-empty only when N > 2B (``min_requests``).

Its energy is the sampler's counter delta over those edges (``TelemetrySource.window``); its tokens are the output
tokens generated inside it, estimated per request by spreading the request's tokens evenly between its first token
and its finish (no per-token timestamps exist without streaming); J/token = energy / those tokens.
"""

from __future__ import annotations

from typing import Sequence

from pydantic import BaseModel

from harness.telemetry.windows import WindowStats

WindowKind = str  # "measured" | "steady"


class RequestSpan(BaseModel):
    """One request on one clock (ns): its first token, its finish and its output tokens."""

    first_token_ns: int
    finish_ns: int
    tokens: int


class WindowEnergy(BaseModel):
    """Energy over one window of a cell (what feeds ``energy_joules`` when this window is the selected one)."""

    kind: str
    start_ns: int | None = None
    end_ns: int | None = None
    duration_s: float | None = None
    energy_j: float | None = None
    avg_power_w: float | None = None
    tokens: float | None = None
    joules_per_token: float | None = None
    valid: bool | None = None
    reasons: list[str] = []
    source: str | None = None
    """Where the edges came from: ``server`` or ``client`` stamps (``harness.world.bench``)."""


def min_requests(batch_size: int) -> int:
    """The fewest requests with a non-empty steady-state window at ``batch_size`` (N > 2B)."""
    return 2 * batch_size + 1


def steady_edges(first_token_ns: Sequence[int], batch_size: int) -> tuple[int, int] | None:
    """(B-th first token, (N-B)-th first token) in the given clock, or None when that window is empty."""
    ts = sorted(int(t) for t in first_token_ns)
    n, b = len(ts), int(batch_size)
    if b < 1 or n - b <= b:
        return None
    start, end = ts[b - 1], ts[n - b - 1]
    return (start, end) if end > start else None


def tokens_in(spans: Sequence[RequestSpan], start_ns: int, end_ns: int) -> float:
    """Output tokens generated inside [start_ns, end_ns]: each request's tokens spread evenly over [first token,
    finish] (a request that finished in its first-token instant counts whole if that instant is inside)."""
    total = 0.0
    for s in spans:
        a, z = s.first_token_ns, max(s.finish_ns, s.first_token_ns)
        if z == a:
            total += s.tokens if start_ns <= a <= end_ns else 0.0
            continue
        overlap = max(0, min(z, end_ns) - max(a, start_ns))
        total += s.tokens * overlap / (z - a)
    return total


def window_energy(
    kind: str, window: WindowStats, tokens: float | None, start_ns: int, end_ns: int, source: str | None = None
) -> WindowEnergy:
    """A ``WindowEnergy`` from a sampler window and the tokens generated inside it."""
    energy, duration = window.energy_j, window.duration_s
    return WindowEnergy(
        kind=kind, start_ns=start_ns, end_ns=end_ns, duration_s=duration, energy_j=energy,
        avg_power_w=energy / duration if energy is not None and duration else None, tokens=tokens,
        joules_per_token=energy / tokens if energy is not None and tokens else None,
        valid=window.valid, reasons=list(window.reasons), source=source,
    )  # fmt: skip
