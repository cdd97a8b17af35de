"""Serving traces with the Azure LLM inference trace schema (``TIMESTAMP,ContextTokens,GeneratedTokens``): read,
cut to a window and rescaled in rate for a replay against ``harness serve``.

A 1-B model on a laptop GPU cannot serve the Azure trace's raw rate (5.5 requests/s of ~1,000-token contexts), so a
replay divides the arrival rate by a factor it states (``rate_scale``: 0.1 = a tenth of the requests per second,
each inter-arrival ten times longer). Each request keeps its context length (a prompt of that many tokens) and its
generated count (``max_tokens``, ``ignore_eos``).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from harness.core.errors import DataError

COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")


@dataclass(frozen=True)
class TraceRequest:
    """One request: seconds since the trace's first, its context and generated token counts."""

    t_s: float
    context_tokens: int
    generated_tokens: int


@dataclass(frozen=True)
class Replay:
    """A replay plan: arrivals in twin seconds from 0, per request its tokens, and how it was cut and scaled."""

    arrivals_s: list[float]
    context_tokens: list[int]
    generated_tokens: list[int]
    rate_scale: float
    window_s: tuple[float, float]
    """The slice of the trace replayed, seconds since its first request."""


def _stamp(text: str, where: str) -> float:
    """``2023-11-16 18:15:46.6805900`` (UTC, no zone; up to 9 fractional digits) -> epoch seconds."""
    body, _, frac = text.strip().partition(".")
    try:
        t = datetime.strptime(body, "%Y-%m-%d %H:%M:%S").replace(tzinfo=timezone.utc).timestamp()
        return t + (float("0." + frac) if frac else 0.0)
    except ValueError:
        raise DataError(
            f"{where}: TIMESTAMP {text!r} is not 'YYYY-MM-DD HH:MM:SS[.fraction]'",
            fix="give the Azure trace schema: TIMESTAMP (UTC), ContextTokens, GeneratedTokens",
        ) from None


def read_trace(path: str | Path) -> list[TraceRequest]:
    """Every request of an Azure-schema CSV, in time order; a missing column or a bad value names its line."""
    p = Path(path)
    if not p.is_file():
        raise DataError(f"trace {p} does not exist", fix="give a CSV with columns " + ",".join(COLUMNS))
    out: list[tuple[float, int, int]] = []
    with p.open(newline="") as fh:
        rows = csv.DictReader(fh)
        missing = [c for c in COLUMNS if c not in (rows.fieldnames or [])]
        if missing:
            raise DataError(
                f"trace {p} lacks column(s) {', '.join(missing)} (has {', '.join(rows.fieldnames or []) or 'none'})",
                fix="give the Azure LLM inference trace schema: " + ",".join(COLUMNS),
            )
        for i, row in enumerate(rows, start=2):
            where = f"{p.name} line {i}"
            try:
                ctx, gen = int(row["ContextTokens"]), int(row["GeneratedTokens"])
            except (TypeError, ValueError):
                raise DataError(
                    f"{where}: ContextTokens / GeneratedTokens must be integers, got "
                    f"{row['ContextTokens']!r} / {row['GeneratedTokens']!r}",
                    fix="fix or drop that line",
                ) from None
            if ctx < 0 or gen < 0:
                raise DataError(f"{where}: negative token count", fix="fix or drop that line")
            out.append((_stamp(row["TIMESTAMP"] or "", where), ctx, gen))
    if not out:
        raise DataError(f"trace {p} has no requests", fix="give a CSV with at least one request")
    out.sort()
    t0 = out[0][0]
    return [TraceRequest(t - t0, c, g) for t, c, g in out]


def offered_tok_s(reqs: list[TraceRequest]) -> float:
    """Generated tokens per second of the trace at its own rate."""
    span = reqs[-1].t_s - reqs[0].t_s
    return sum(r.generated_tokens for r in reqs) / span if span > 0 else float("inf")


def rate_scale_for(reqs: list[TraceRequest], target_tok_s: float) -> float:
    """The rate scale at which the trace offers ``target_tok_s`` generated tokens per second."""
    if target_tok_s <= 0:
        raise ValueError("target tokens/s must be positive")
    return target_tok_s / offered_tok_s(reqs)


def plan_replay(
    reqs: list[TraceRequest],
    rate_scale: float,
    duration_s: float,
    start_s: float = 0.0,
    max_generated: int | None = None,
    min_generated: int = 1,
) -> Replay:
    """Requests of the trace from ``start_s`` (trace seconds) whose scaled arrival falls in the first ``duration_s``
    twin seconds; generated counts clipped to [``min_generated``, ``max_generated``] (an engine's max)."""
    if rate_scale <= 0 or duration_s <= 0:
        raise ValueError("rate_scale and duration_s must be positive")
    end = start_s + duration_s * rate_scale
    picked = [r for r in reqs if start_s <= r.t_s < end]
    top = max_generated if max_generated is not None else max((r.generated_tokens for r in picked), default=1)
    return Replay(
        arrivals_s=[(r.t_s - start_s) / rate_scale for r in picked],
        context_tokens=[max(1, r.context_tokens) for r in picked],
        generated_tokens=[min(top, max(min_generated, r.generated_tokens)) for r in picked],
        rate_scale=rate_scale,
        window_s=(start_s, end),
    )


def prompt_of(tokens: int) -> str:
    """A prompt of about ``tokens`` tokens (the twin counts a BOS plus one per 4-letter word; a real tokenizer a
    similar number for these words)."""
    return " ".join(["data"] * max(0, tokens - 1))
