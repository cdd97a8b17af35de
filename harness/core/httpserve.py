"""The one small HTTP layer of the house's services (twin GPU, twin engine, sampler): a route table, JSON in and
out, one error shape (``{"error": {"message": ...}}``), chunked streams, a threaded stdlib server that starts in
milliseconds (the twin engine is launched once per sweep cell, so no framework import on its start-up path).
"""

from __future__ import annotations

import hmac
import json
import math
import re
import sys
import threading
from collections.abc import Iterable, Mapping
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, TypeVar, Union
from urllib.parse import parse_qs, urlsplit

from harness.core.stopflag import StopFlag


class BadRequest(Exception):
    """Raised by a route for input it refuses: the answer is 400 with this message."""


class Request:
    """What a route handler sees: method, path, last value of each query parameter, path parameters, headers, body."""

    def __init__(self, handler: BaseHTTPRequestHandler, method: str) -> None:
        self.method = method
        parts = urlsplit(handler.path)
        self.path = parts.path
        self.query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        self.params: dict[str, str] = {}
        self.headers: Message = handler.headers
        length = int(handler.headers.get("Content-Length") or 0)
        self.raw = handler.rfile.read(length) if length > 0 else b""

    def json(self) -> dict[str, Any]:
        """The JSON object of the body ({} when empty). Every route takes an object: a body that is not UTF-8, not
        JSON (``json.JSONDecodeError``) or not an object is a 400 naming what it got."""
        if not self.raw:
            return {}
        try:
            text = self.raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise BadRequest(f"the body is not UTF-8 (byte {exc.start}): send a JSON object") from None
        body = json.loads(text)
        if not isinstance(body, dict):
            raise BadRequest(f"the body must be a JSON object, got {type(body).__name__}")
        return body

    def int_param(
        self, name: str, default: int | None = None, *, minimum: int | None = None, maximum: int | None = None
    ) -> int:
        """An integer query parameter; missing (without a default), malformed (``true``, ``1.5``) or outside
        ``minimum``..``maximum`` raises ``BadRequest``."""
        val = self.query.get(name)
        if val is None:
            if default is None:
                raise BadRequest(f"missing query parameter {name}")
            return default
        try:
            number = int(val)
        except ValueError:
            raise BadRequest(f"{name} must be an integer, got {val!r}") from None
        return _in_range(name, number, minimum, maximum)

    def float_param(
        self, name: str, default: float, *, minimum: float | None = None, maximum: float | None = None
    ) -> float:
        """A finite number query parameter (default when missing); malformed, ``nan``/``inf`` or outside
        ``minimum``..``maximum`` raises ``BadRequest``."""
        val = self.query.get(name)
        if val is None:
            return default
        try:
            number = float(val)
        except ValueError:
            raise BadRequest(f"{name} must be a number, got {val!r}") from None
        if not math.isfinite(number):
            raise BadRequest(f"{name} must be a finite number, got {val!r}")
        return _in_range(name, number, minimum, maximum)


_Number = TypeVar("_Number", int, float)


def _in_range(name: str, value: _Number, minimum: _Number | None, maximum: _Number | None) -> _Number:
    """``value``, or ``BadRequest`` naming ``name`` and its allowed range."""
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        allowed = (
            f"between {minimum} and {maximum}"
            if minimum is not None and maximum is not None
            else (f"at least {minimum}" if minimum is not None else f"at most {maximum}")
        )
        raise BadRequest(f"{name} must be {allowed}, got {value}")
    return value


class Response:
    """A complete answer: a JSON ``body``, or ``text`` (with its content type)."""

    def __init__(
        self, status: int = 200, body: Any = None, *, text: str | None = None, content_type: str | None = None
    ) -> None:
        self.status = status
        self.body = body
        self.text = text
        self.content_type = content_type


class Stream:
    """A chunked streaming answer: ``chunks`` yields str pieces (e.g. SSE events); closed if the client goes away."""

    def __init__(self, chunks: Iterable[str], content_type: str = "text/event-stream") -> None:
        self.chunks = chunks
        self.content_type = content_type


def error(status: int, message: str, **extra: Any) -> Response:
    """The house's error answer: ``{"error": {"message": ..., **extra}}``."""
    return Response(status, {"error": {"message": message, **extra}})


def sse(obj: Any) -> str:
    """One server-sent event carrying ``obj`` (a str goes as is, e.g. ``[DONE]``; anything else as JSON)."""
    return "data: " + (obj if isinstance(obj, str) else json.dumps(obj)) + "\n\n"


Handler = Callable[[Request], Union[Response, Stream, Mapping[str, Any], list[Any]]]


class Router:
    """Routes by method and path pattern (``/v1/engines/{eid}`` binds ``req.params["eid"]``; ``{name:path}`` takes
    the rest of the path, slashes included, as a model id such as ``org/model`` needs)."""

    def __init__(self) -> None:
        self._routes: list[tuple[set[str], re.Pattern[str], Handler]] = []

    def add(self, methods: str, pattern: str, fn: Handler) -> None:
        """Route ``methods`` (comma-separated, e.g. ``"GET,POST"``) on ``pattern`` to ``fn``."""
        regex = re.compile(
            "^" + re.sub(r"\{(\w+)\}", r"(?P<\1>[^/]+)", re.sub(r"\{(\w+):path\}", r"(?P<\1>.+)", pattern)) + "$"
        )
        self._routes.append((set(methods.split(",")), regex, fn))

    def match(self, method: str, path: str) -> tuple[Handler | None, dict[str, str], bool]:
        """(handler, path params, whether the path is known at all: a known path with another method is 405)."""
        path_known = False
        for methods, regex, fn in self._routes:
            m = regex.match(path)
            if m:
                path_known = True
                if method in methods:
                    return fn, m.groupdict(), True
        return None, {}, path_known


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj).encode()


LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1", "[::1]"})
READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def _hostname(value: str) -> str:
    """The host of a ``Host`` header (``127.0.0.1:8000``, ``[::1]:80``) or of an ``Origin`` URL, lower-cased."""
    if "://" in value:
        value = urlsplit(value).netloc
    if value.startswith("["):
        return value[: value.find("]") + 1].lower()
    return value.rsplit(":", 1)[0].lower() if value.count(":") == 1 else value.lower()


def cross_site_refusal(method: str, headers: Message, bound_host: str) -> str | None:
    """Why a state-changing request to a service bound to loopback is refused, else None. A web page the user has
    open can send ``POST``s to 127.0.0.1 (a "simple" cross-site request: ``text/plain``, no preflight) or reach it
    under a hostile name through DNS rebinding; such a request carries a foreign ``Origin`` or ``Host``. Programs
    (httpx, the openai client, curl) send neither, or loopback ones. Services bound beyond loopback (an explicit
    opt-in) are guarded by their API key instead."""
    if method in READ_METHODS or bound_host not in LOOPBACK_NAMES:
        return None
    origin = headers.get("Origin")
    if origin == "null":
        return "cross-site request refused: an opaque Origin (null)"
    if origin and _hostname(origin) not in LOOPBACK_NAMES:
        return f"cross-site request refused: Origin {origin!r} is not this machine"
    host = headers.get("Host")
    if host and _hostname(host) not in LOOPBACK_NAMES:
        return f"request refused: Host {host!r} is not a loopback name (this service listens on {bound_host} only)"
    return None


class JsonHandler(BaseHTTPRequestHandler):
    """Dispatches every request through ``router``; subclasses set ``router``, ``server_header`` and ``dumps``."""

    protocol_version = "HTTP/1.1"
    # Small responses must not wait for delayed ACKs (Nagle): at time scale 20, 40 ms of wall latency is 0.8 s of
    # twin time. Headers and body also go out in one buffered write (handle_one_request flushes).
    disable_nagle_algorithm = True
    wbufsize = 64 * 1024
    router: Router
    server_header = "harness"
    api_key: str | None = None
    """With a key, every route but ``open_paths`` needs ``Authorization: Bearer <key>`` (as sglang's and vLLM's
    ``--api-key``); 401 otherwise."""
    open_paths: frozenset[str] = frozenset({"/health"})
    dumps: Callable[[Any], bytes] = staticmethod(_dumps)

    def version_string(self) -> str:  # the one ``Server`` header (send_response writes it)
        return self.server_header

    def log_message(self, format: str, *args: Any) -> None:  # quiet: services log their own events
        return

    def _key_given(self, req: Request) -> bool:
        scheme, _, token = (req.headers.get("Authorization") or "").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), str(self.api_key).encode())

    def _dispatch(self, method: str) -> None:
        try:
            req = Request(self, method)
        except Exception:  # noqa: BLE001 - whatever a malformed request breaks in parsing, the answer is 400
            self._send(error(400, "bad request"))
            return
        bound = self.server.server_address
        refused = cross_site_refusal(method, req.headers, str(bound[0] if isinstance(bound, tuple) else bound))
        if refused is not None:
            self._send(error(403, refused))
            return
        if self.api_key is not None and req.path not in self.open_paths and not self._key_given(req):
            self._send(error(401, "invalid or missing API key: send Authorization: Bearer <key>"))
            return
        fn, params, known = self.router.match(method, req.path)
        if fn is None:
            status = 405 if known else 404
            self._send(error(status, f"{method} {req.path}: {'method not allowed' if known else 'not found'}"))
            return
        req.params = params
        out: Response | Stream | Mapping[str, Any] | list[Any]
        try:
            out = fn(req)
        except BadRequest as exc:
            out = error(400, str(exc))
        except json.JSONDecodeError as exc:
            out = error(400, f"invalid JSON body: {exc.msg}")
        except Exception as exc:  # noqa: BLE001 - a bug in a route must not kill the server thread silently: 500
            out = error(500, f"internal error: {type(exc).__name__}: {exc}")
        if isinstance(out, Stream):
            self._stream(out)
        else:
            self._send(out if isinstance(out, Response) else Response(200, out))

    def _send(self, resp: Response) -> None:
        if resp.text is not None:
            data = resp.text.encode()
            ctype = resp.content_type or "text/plain; charset=utf-8"
        else:
            data = b"" if resp.body is None else self.dumps(resp.body)
            ctype = resp.content_type or "application/json"
        try:
            self.send_response(resp.status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
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
            close = getattr(st.chunks, "close", None)  # a generator: run its cleanup (e.g. abort the request)
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
    """Threaded (a daemon thread per connection), address reuse, a deep accept queue for a burst of clients."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hung up mid-response (timeout, cancelled stream) is routine, not a traceback in the log."""
        if isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            return
        super().handle_error(request, client_address)


def make_server(
    host: str,
    port: int,
    router: Router,
    server_header: str = "harness",
    dumps: Callable[[Any], bytes] = _dumps,
    api_key: str | None = None,
) -> Server:
    """Bind ``router`` on host:port (0 = any free port: ``server.server_address[1]``); OSError if it cannot bind.
    With ``api_key``, every route but ``/health`` needs it as a bearer token."""
    attrs = {"router": router, "server_header": server_header, "dumps": staticmethod(dumps), "api_key": api_key}
    handler = type("Handler", (JsonHandler,), attrs)
    return Server((host, port), handler)


def serve_in_thread(server: Server, name: str = "http") -> threading.Thread:
    """Serve in a daemon thread (stop with ``server.shutdown()`` then ``server.server_close()``)."""
    t = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, name=name, daemon=True)
    t.start()
    return t


def serve_until_signal(server: Server, on_stop: Callable[[], None] | None = None) -> None:
    """Serve until SIGTERM/SIGINT, then shut down cleanly."""
    stop = StopFlag().stop_on_signals()
    t = serve_in_thread(server)
    try:
        while not stop.wait(0.2):
            if not t.is_alive():
                break
    finally:
        if on_stop:
            on_stop()
        server.shutdown()
        server.server_close()
