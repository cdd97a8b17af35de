"""The twin engine's ``/metrics``: sglang's metric names (its latency histograms from ``latency.py``), rendered by ``harness.core.promtext`` (``prometheus_client``
is imported on the first scrape, not at engine start: its ~60 ms import would otherwise land on the start-up path of
an engine that is launched once per sweep cell, most of them never scraped)."""

from __future__ import annotations

from typing import Any

from harness.core import promtext
from harness.twin.engine.scheduler import TwinEngine


def _families(eng: TwinEngine) -> list[Any]:
    """The metric families of one scrape, read under the engine's lock."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

    names = ["model_name", "engine_type", "tp_rank", "pp_rank"]
    values = [eng.model_id, "unified", "0", "0"]
    model = [eng.model_id]

    def gauge(name: str, doc: str, value: float) -> Any:
        g = GaugeMetricFamily(name, doc, labels=names)
        g.add_metric(values, value)
        return g

    def counter(name: str, doc: str, value: float, per_engine: bool = False) -> Any:
        c = CounterMetricFamily(name, doc, labels=names if per_engine else ["model_name"])
        c.add_metric(values if per_engine else model, value)
        return c

    with eng.lock:
        out = [
            gauge("sglang:num_running_reqs", "The number of running requests.", len(eng.decoder.running)),
            gauge("sglang:num_queue_reqs", "The number of requests in the waiting queue.", len(eng.decoder.waiting)),
            gauge("sglang:gen_throughput", "The generation throughput (token/s).", eng.last_gen_throughput),
            gauge(
                "sglang:spec_accept_length",
                "The average acceptance length of speculative decoding.",
                eng.decoder.last_interval_accept or 0.0,
            ),
            counter("sglang:prompt_tokens_total", "Number of prefill tokens processed.", eng.prompt_tokens_total),
            counter(
                "sglang:generation_tokens_total", "Number of generation tokens processed.", eng.generation_tokens_total
            ),
        ]
        lat = eng.latencies
        for name, doc, hist in (
            ("sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.", lat.ttft),
            ("sglang:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", lat.itl),
            (
                "sglang:request_time_per_output_token_seconds",
                "Per-request TPOT in seconds: (finished_time - first_token_time) / (completion_tokens - 1).",
                lat.tpot,
            ),
            ("sglang:e2e_request_latency_seconds", "Histogram of End-to-end request latency in seconds", lat.e2e),
        ):
            h = HistogramMetricFamily(name, doc, labels=["model_name"])
            h.add_metric(model, buckets=hist.buckets(), sum_value=hist.sum)
            out.append(h)
        if eng.version == "0.5.23" and not eng.cfg.is_baseline:
            out.append(
                counter(
                    "sglang:spec_verify_calls_total",
                    "Verification forward passes of speculative decoding.",
                    eng.decoder.cum_ct,
                    per_engine=True,
                )
            )
            out.append(gauge("sglang:spec_num_draft_tokens", "Draft tokens per verification.", eng.cfg.draft_tokens))
    return out


def render_metrics(eng: TwinEngine) -> str:
    """The ``/metrics`` body of the engine now."""
    return promtext.render(_families(eng))
