"""The sampler's HTTP API (stdlib ``ThreadingHTTPServer``). Every answer comes from the store; none calls the probe."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from harness.telemetry.metrics import render_metrics
from harness.telemetry.sampler import SamplerCore
from harness.telemetry.windows import EDGE_MODELS
from harness.timeutil import mono_ns, wall_ns

MAX_WAIT_S = 30.0
MAX_SAMPLES = 10_000


class _BadRequest(Exception):
    pass


def _int_param(q: dict[str, list[str]], name: str, default: int | None = None) -> int:
    vals = q.get(name)
    if not vals:
        if default is None:
            raise _BadRequest(f"missing query parameter {name}")
        return default
    try:
        return int(vals[0])
    except ValueError:
        raise _BadRequest(f"{name} must be an integer (epoch ns), got {vals[0]!r}") from None


def _float_param(q: dict[str, list[str]], name: str, default: float) -> float:
    vals = q.get(name)
    if not vals:
        return default
    try:
        return float(vals[0])
    except ValueError:
        raise _BadRequest(f"{name} must be a number, got {vals[0]!r}") from None


class SamplerHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, addr: tuple[str, int], core: SamplerCore) -> None:
        self.core = core
        super().__init__(addr, _Handler)


class _Handler(BaseHTTPRequestHandler):
    server: SamplerHTTPServer
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body are separate writes: no 40 ms delayed-ACK stalls

    def log_message(self, fmt: str, *args: Any) -> None:  # quiet access log
        return

    def _send(self, status: int, body: bytes, ctype: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _json(self, status: int, obj: Any) -> None:
        self._send(status, json.dumps(obj, separators=(",", ":"), allow_nan=False).encode())

    def _error(self, status: int, message: str) -> None:
        self._json(status, {"error": {"message": message}})

    def do_GET(self) -> None:  # the name BaseHTTPRequestHandler dispatches to
        core = self.server.core
        url = urlsplit(self.path)
        q = parse_qs(url.query)
        try:
            if url.path == "/v1/window":
                start, end = _int_param(q, "start_ns"), _int_param(q, "end_ns")
                if end <= start:
                    raise _BadRequest("end_ns must be after start_ns")
                wait_s = min(MAX_WAIT_S, max(0.0, _float_param(q, "wait_s", 0.0)))
                model = (q.get("edge_model") or ["step"])[0]
                if model not in EDGE_MODELS:
                    raise _BadRequest(f"edge_model must be one of {', '.join(EDGE_MODELS)}")
                self._json(200, core.window(start, end, wait_s=wait_s, edge_model=model).model_dump())
            elif url.path == "/v1/latest":
                s = core.latest()
                if s is None:
                    self._error(503, "no sample yet")
                else:
                    self._json(200, s.to_record())
            elif url.path == "/v1/samples":
                since = _int_param(q, "since_seq", -1)
                limit = min(MAX_SAMPLES, max(1, _int_param(q, "limit", 1000)))
                self._json(200, {"samples": [r.to_record() for r in core.store.since(since, limit)]})
            elif url.path == "/v1/now":
                self._json(200, {"wall_ns": wall_ns(), "mono_ns": mono_ns()})
            elif url.path == "/v1/info":
                self._json(200, core.info())
            elif url.path == "/metrics":
                self._send(200, render_metrics(core).encode(), "text/plain; version=0.0.4; charset=utf-8")
            elif url.path == "/-/healthy":
                ok = core.healthy()
                self._json(200 if ok else 503, {"ok": ok})
            elif url.path == "/-/ready":
                ok = core.ready()
                self._json(200 if ok else 503, {"ok": ok})
            else:
                self._error(404, f"no such path {url.path}")
        except _BadRequest as exc:
            self._error(400, str(exc))

    def do_POST(self) -> None:
        url = urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if url.path != "/v1/marks":
            self._error(404, f"no such path {url.path}")
            return
        try:
            body = json.loads(raw or b"{}")
            name = body["name"]
            client_ns = body.get("wall_ns")
            if not isinstance(name, str) or (client_ns is not None and not isinstance(client_ns, int)):
                raise TypeError
        except (ValueError, KeyError, TypeError):
            self._error(400, 'body must be {"name": str, "wall_ns": int (optional)}')
            return
        self._json(200, self.server.core.mark(name, client_ns))


def start_server(core: SamplerCore, host: str = "127.0.0.1", port: int = 0) -> tuple[SamplerHTTPServer, threading.Thread]:
    """Bind and serve in a daemon thread; returns the server (``server.server_address`` has the real port)."""
    srv = SamplerHTTPServer((host, port), core)
    t = threading.Thread(target=srv.serve_forever, name="sampler-http", daemon=True)
    t.start()
    return srv, t
