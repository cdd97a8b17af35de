"""The front's ``GET /metrics`` (Prometheus text): what it answered per route and status, the completion tokens its
answers reported, the requests in flight, the routed config, switches, the utilization the control loop last read,
and per instance whether it is up and how many requests it runs. The engines' own ``sglang:`` metrics stay on the
instances (``--enable-metrics``); the GPU's on the sampler."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from harness.core import promtext
from harness.core.httpserve import Response

if TYPE_CHECKING:
    from harness.serve.front import Front


class FrontCounts:
    """Counters the front keeps as it answers (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.answers: dict[tuple[str, int], int] = {}
        self.completion_tokens = 0
        self.finished_requests = 0

    def answered(self, route: str, status: int) -> None:
        with self._lock:
            self.answers[(route, status)] = self.answers.get((route, status), 0) + 1

    def finished(self, tokens: int | None) -> None:
        """A request ended (a stream at its end); ``tokens``: the completion tokens its answer reported."""
        with self._lock:
            self.finished_requests += 1
            self.completion_tokens += tokens or 0


def _families(front: Front) -> list[Any]:
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    loop = front.loop
    counts = front.counts
    state = loop.describe()
    out: list[Any] = []
    with counts._lock:
        answers = sorted(counts.answers.items())
        tokens, finished = counts.completion_tokens, counts.finished_requests
    c = CounterMetricFamily(
        "harness_serve_requests", "Requests the front answered, by route and HTTP status.", labels=["route", "code"]
    )
    for (route, code), n in answers:
        c.add_metric([route, str(code)], n)
    out.append(c)
    out.append(CounterMetricFamily("harness_serve_finished_requests", "Requests that ended.", value=finished))
    out.append(
        CounterMetricFamily(
            "harness_serve_completion_tokens",
            "Completion tokens the engines' answers reported (usage or meta_info; a stream's only with usage).",
            value=tokens,
        )
    )
    out.append(
        GaugeMetricFamily("harness_serve_in_flight", "Requests in flight at the front.", value=state["in_flight"])
    )
    out.append(
        CounterMetricFamily("harness_serve_switches", "Config switches of the control loop.", value=state["switches"])
    )
    util = state.get("utilization")
    if isinstance(util, (int, float)):
        out.append(
            GaugeMetricFamily(
                "harness_serve_utilization", "Power / enforced cap the control loop last read.", value=util
            )
        )
    active = state.get("active")
    routed = GaugeMetricFamily("harness_serve_routed", "1 for the config requests are routed to.", labels=["config"])
    up = GaugeMetricFamily("harness_serve_instance_up", "1 while an instance is ready.", labels=["config"])
    running = GaugeMetricFamily("harness_serve_instance_in_flight", "Requests an instance runs.", labels=["config"])
    for inst in loop.pool.instances.values():
        cfg = inst.config
        name = f"{cfg.steps}:{cfg.topk}:{cfg.draft_tokens}"
        routed.add_metric([name], 1.0 if active == cfg.as_list() else 0.0)
        up.add_metric([name], 1.0 if inst.ready() else 0.0)
        running.add_metric([name], float(inst.in_flight))
    out += [routed, up, running]
    return out


def metrics_response(front: Front) -> Response:
    return Response(200, None, text=promtext.render(_families(front)), content_type=promtext.CONTENT_TYPE)
