"""Latency histograms of the twin engine's ``/metrics``, with sglang 0.5.23's names and buckets
(``sglang/srt/observability/metrics_collector.py``): time to first token, inter-token latency, per-request time per
output token and end-to-end latency, all in twin seconds."""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

TTFT_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400)
E2E_BUCKETS: tuple[float, ...] = TTFT_BUCKETS + (600, 1200, 1800, 2400)
_ITL_FINE = (0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.060, 0.080, 0.100)
ITL_BUCKETS: tuple[float, ...] = _ITL_FINE + (0.200, 0.400, 0.600, 0.800, 1.000, 2.000, 4.000, 6.000, 8.000)


@dataclass
class Histogram:
    """A Prometheus histogram's state: per-bucket counts (not cumulative; the last is +Inf), sum and count."""

    bounds: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    sum: float = 0.0
    count: int = 0

    def __post_init__(self) -> None:
        self.counts = [0] * (len(self.bounds) + 1)

    def observe(self, value: float, times: int = 1) -> None:
        """``times`` observations of ``value`` (sglang observes a chunk's interval / its tokens once per token)."""
        if times <= 0:
            return
        self.counts[bisect.bisect_left(self.bounds, value)] += times
        self.sum += value * times
        self.count += times

    def buckets(self) -> list[tuple[str, int]]:
        """Cumulative ``(le, count)`` pairs ending with ``+Inf``, as ``HistogramMetricFamily`` takes them."""
        out, acc = [], 0
        for bound, n in zip((*map(str, map(float, self.bounds)), "+Inf"), self.counts, strict=True):
            acc += n
            out.append((bound, acc))
        return out


@dataclass
class Latencies:
    """The engine's four latency histograms; ``finished`` records one request (device-clock ns)."""

    ttft: Histogram = field(default_factory=lambda: Histogram(TTFT_BUCKETS))
    itl: Histogram = field(default_factory=lambda: Histogram(ITL_BUCKETS))
    tpot: Histogram = field(default_factory=lambda: Histogram(ITL_BUCKETS))
    e2e: Histogram = field(default_factory=lambda: Histogram(E2E_BUCKETS))

    def finished(self, received_ns: int, first_token_ns: int | None, finish_ns: int, tokens: int) -> None:
        """One finished request: e2e always; TTFT once it had a token; with n > 1 tokens, its mean interval
        (finish - first token) / (n - 1) as TPOT once and as n - 1 inter-token latencies."""
        self.e2e.observe((finish_ns - received_ns) / 1e9)
        if first_token_ns is None or tokens <= 0:
            return
        self.ttft.observe((first_token_ns - received_ns) / 1e9)
        if tokens > 1:
            mean = (finish_ns - first_token_ns) / 1e9 / (tokens - 1)
            self.tpot.observe(mean)
            self.itl.observe(mean, tokens - 1)
