"""Prometheus text exposition (format 0.0.4) of metric families, through ``prometheus_client``.

The twin engine's and the sampler's ``/metrics`` build their families per scrape and render them here; both import
``prometheus_client`` inside the scrape, so a process that is never scraped never loads it (the twin engine is
launched once per sweep cell: its start-up path stays free of it).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def render(families: Sequence[Any]) -> str:
    """The exposition text of ``families`` (``prometheus_client.core.*MetricFamily``), in order."""
    from prometheus_client.exposition import generate_latest
    from prometheus_client.registry import Collector

    class _Scrape(Collector):
        def collect(self) -> Sequence[Any]:
            return families

    return generate_latest(_Scrape()).decode()
