"""A small threaded HTTP/1.1 server with JSON helpers and a route table (stdlib only, starts in milliseconds)."""

from __future__ import annotations

import json
import re
import signal
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable
from urllib.parse import parse_qs, urlsplit


class Request:
    """What a route handler sees."""

    def __init__(self, handler: "JsonHandler", method: str) -> None:
        self.handler = handler
        self.method = method
        parts = urlsplit(handler.path)
        self.path = parts.path
        self.query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        self.params: dict[str, str] = {}
        length = int(handler.headers.get("Content-Length") or 0)
        self.raw = handler.rfile.read(length) if length > 0 else b""

    def json(self) -> Any:
        if not self.raw:
            return {}
        return json.loads(self.raw)


class Response:
    def __init__(self, status: int = 200, body: Any = None, *, text: str | None = None, content_type: str | None = None) -> None:
        self.status = status
        self.body = body
        self.text = text
        self.content_type = content_type


class Stream:
    """A chunked streaming response: ``chunks`` yields str pieces (e.g. SSE lines)."""

    def __init__(self, chunks, content_type: str = "text/event-stream") -> None:
        self.chunks = chunks
        self.content_type = content_type


Route = Callable[[Request], "Response | Stream | dict | list"]


class Router:
    def __init__(self) -> None:
        self._routes: list[tuple[set[str], re.Pattern, Route]] = []

    def add(self, methods: str, pattern: str, fn: Route) -> None:
        regex = re.compile("^" + re.sub(r"\{(\w+)\}", r"(?P<\1>[^/]+)", pattern) + "$")
        self._routes.append((set(methods.split(",")), regex, fn))

    def match(self, method: str, path: str) -> tuple[Route | None, dict[str, str], bool]:
        path_known = False
        for methods, regex, fn in self._routes:
            m = regex.match(path)
            if m:
                path_known = True
                if method in methods:
                    return fn, m.groupdict(), True
        return None, {}, path_known


class JsonHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Small responses must not wait for delayed ACKs (Nagle): at time scale 20, 40 ms of wall latency is 0.8 s of
    # twin time. Headers and body also go out in one buffered write (handle_one_request flushes).
    disable_nagle_algorithm = True
    wbufsize = 64 * 1024
    router: Router
    server_header = "twin"

    def log_message(self, fmt: str, *args: Any) -> None:  # quiet: servers log their own events
        return

    def _dispatch(self, method: str) -> None:
        try:
            req = Request(self, method)
        except Exception:  # noqa: BLE001 - whatever a malformed request breaks in parsing, the answer is 400
            self._send(Response(400, {"error": {"message": "bad request"}}))
            return
        fn, params, known = self.router.match(method, req.path)
        if fn is None:
            status = 405 if known else 404
            self._send(Response(status, {"error": {"message": f"{method} {req.path}: {'method not allowed' if known else 'not found'}"}}))
            return
        req.params = params
        try:
            out = fn(req)
        except json.JSONDecodeError as exc:
            out = Response(400, {"error": {"message": f"invalid JSON body: {exc.msg}"}})
        except Exception as exc:  # noqa: BLE001 - a bug in a route must not kill the server thread silently: 500
            out = Response(500, {"error": {"message": f"internal error: {type(exc).__name__}: {exc}"}})
        if isinstance(out, Stream):
            self._stream(out)
        else:
            self._send(out if isinstance(out, Response) else Response(200, out))

    def _send(self, resp: Response) -> None:
        if resp.text is not None:
            data = resp.text.encode()
            ctype = resp.content_type or "text/plain; charset=utf-8"
        elif resp.body is None:
            data = b""
            ctype = resp.content_type or "application/json"
        else:
            data = json.dumps(resp.body).encode()
            ctype = resp.content_type or "application/json"
        try:
            self.send_response(resp.status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Server", self.server_header)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _stream(self, st: Stream) -> None:
        try:
            self.send_response(200)
            self.send_header("Content-Type", st.content_type)
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Transfer-Encoding", "chunked")
            self.send_header("Server", self.server_header)
            self.end_headers()
            for piece in st.chunks:
                data = piece.encode()
                if data:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                    self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
            close = getattr(st.chunks, "close", None)
            if close:
                close()

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    def do_HEAD(self) -> None:
        self._dispatch("GET")


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128


def make_server(host: str, port: int, router: Router, server_header: str = "twin") -> Server:
    handler = type("Handler", (JsonHandler,), {"router": router, "server_header": server_header})
    return Server((host, port), handler)


def serve_until_signal(server: Server, on_stop: Callable[[], None] | None = None) -> None:
    """Serve until SIGTERM/SIGINT, then shut down cleanly."""
    stop = threading.Event()

    def _handler(signum: int, frame: Any) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, _handler)
    signal.signal(signal.SIGINT, _handler)
    t = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    try:
        while not stop.wait(0.2):
            if not t.is_alive():
                break
    finally:
        if on_stop:
            on_stop()
        server.shutdown()
        server.server_close()
