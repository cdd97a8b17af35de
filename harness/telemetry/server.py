"""The sampler's HTTP API (routes on the shared ``harness.core.httpserve`` layer). Every answer comes from the store; none
calls the probe."""

from __future__ import annotations

import json
import threading
from typing import Any

from harness.core import promtext
from harness.core.clocks import mono_ns, wall_ns
from harness.core.httpserve import BadRequest, Request, Response, Router, Server, error, make_server, serve_in_thread
from harness.telemetry.metrics import render_metrics
from harness.telemetry.sampler import SamplerCore
from harness.telemetry.windows import EDGE_MODELS

MAX_WAIT_S = 30.0
"""Longest ``/v1/window?wait_s=`` the sampler waits for a sample past the window (a longer one is a 400)."""
MAX_SAMPLES = 10_000
"""Largest ``/v1/samples?limit=`` (a larger one is a 400)."""


MAX_MARK_NAME = 256
"""Longest mark name the sampler keeps (marks live in memory and in the JSONL log)."""


def _dumps(obj: Any) -> bytes:
    """Compact JSON; a NaN or infinity is a bug in the store, never sent as a non-standard token."""
    return json.dumps(obj, separators=(",", ":"), allow_nan=False).encode()


def _is_timestamp(value: Any) -> bool:
    """A wall-clock ns instant: an integer >= 0 (JSON's ``true`` is not one, though Python's bool is an int)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def build_router(core: SamplerCore) -> Router:
    """The sampler's routes (docs/telemetry.md)."""
    r = Router()

    def window(req: Request) -> dict[str, Any]:
        start, end = req.int_param("start_ns", minimum=0), req.int_param("end_ns", minimum=0)
        if end <= start:
            raise BadRequest("end_ns must be after start_ns")
        wait_s = req.float_param("wait_s", 0.0, minimum=0.0, maximum=MAX_WAIT_S)
        model = req.query.get("edge_model") or "step"
        if model not in EDGE_MODELS:
            raise BadRequest(f"edge_model must be one of {', '.join(EDGE_MODELS)}")
        return core.window(start, end, wait_s=wait_s, edge_model=model).model_dump()

    def latest(req: Request) -> Response | dict[str, Any]:
        s = core.latest()
        return error(503, "no sample yet") if s is None else s.to_record()

    def samples(req: Request) -> dict[str, Any]:
        since = req.int_param("since_seq", -1, minimum=-1)
        limit = req.int_param("limit", 1000, minimum=1, maximum=MAX_SAMPLES)
        return {"samples": [rec.to_record() for rec in core.store.since(since, limit)]}

    def metrics(req: Request) -> Response:
        return Response(200, text=render_metrics(core), content_type=promtext.CONTENT_TYPE)

    def probe(ok: bool) -> Response:
        return Response(200 if ok else 503, {"ok": ok})

    def mark(req: Request) -> Response | dict[str, Any]:
        try:
            body = json.loads(req.raw or b"{}")
            name = body["name"]
            client_ns = body.get("wall_ns")
            if not isinstance(name, str):
                raise TypeError
            if not (client_ns is None or _is_timestamp(client_ns)):
                return error(400, f"wall_ns must be an integer >= 0 (wall-clock ns), got {json.dumps(client_ns)}")
            if not name or len(name) > MAX_MARK_NAME:
                return error(400, f"a mark name is 1 to {MAX_MARK_NAME} characters, got {len(name)}")
        except (ValueError, KeyError, TypeError, AttributeError):
            return error(400, 'body must be {"name": str, "wall_ns": int (optional)}')
        return core.mark(name, client_ns)

    r.add("GET", "/v1/window", window)
    r.add("GET", "/v1/latest", latest)
    r.add("GET", "/v1/samples", samples)
    r.add("GET", "/v1/now", lambda req: {"wall_ns": wall_ns(), "mono_ns": mono_ns()})
    r.add("GET", "/v1/info", lambda req: core.info())
    r.add("GET", "/metrics", metrics)
    r.add("GET", "/-/healthy", lambda req: probe(core.healthy()))
    r.add("GET", "/-/ready", lambda req: probe(core.ready()))
    r.add("POST", "/v1/marks", mark)
    return r


def start_server(core: SamplerCore, host: str = "127.0.0.1", port: int = 0) -> tuple[Server, threading.Thread]:
    """Bind and serve in a daemon thread; returns the server (``server.server_address`` has the real port)."""
    srv = make_server(host, port, build_router(core), server_header="harness-sampler", dumps=_dumps)
    return srv, serve_in_thread(srv, name="sampler-http")
