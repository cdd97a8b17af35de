"""The front (OpenAI's ``/v1/chat/completions``, ``/v1/completions``, ``/v1/models``, ``/v1/models/{id}``, sglang's
native ``/generate``, plain and SSE; its own ``/metrics``) on ``harness/core/httpserve.py``: each request goes to the
instance the control loop routes to. When the connection to an
instance breaks before any answer came back and the instance is found dead (its process exited, or it stopped
answering ``/health``), it is marked lost and the request is sent again to the next route: completions have no side
effects, so a client sees an error only for a stream whose tokens had already started (an error event, then the
end) or when every instance is lost (503). A broken connection to a live instance is a 502. An instance gets at most
``max_running`` requests at once (its ``--max-running-requests``); the rest wait at the front for the config routed
when a slot frees, so a switch under overload does not leave a queue behind on the old instance."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import unquote

import httpx

from harness.core.http import http_client
from harness.core.httpserve import BadRequest, Request, Response, Router, Server, Stream, error, make_server
from harness.serve.control_loop import ControlLoop
from harness.serve.front_metrics import FrontCounts, metrics_response
from harness.serve.pool import Instance

SERVER_HEADER = "harness-serve"


def accept_length_of(obj: Any) -> float | None:
    """A response's (or final chunk's) ``sglext.spec_tokens_details.spec_accept_length`` (sglang >= 0.5.23)."""
    if not isinstance(obj, dict):
        return None
    val = ((obj.get("sglext") or {}).get("spec_tokens_details") or {}).get("spec_accept_length")
    return float(val) if isinstance(val, (int, float)) else None


def completion_tokens_of(obj: Any) -> int | None:
    """A response's ``usage.completion_tokens`` or, from ``/generate``, ``meta_info.completion_tokens`` (cumulative in
    its stream chunks); the offered load the closed loop estimates is requests x tokens."""
    if not isinstance(obj, dict):
        return None
    val = (obj.get("usage") or {}).get("completion_tokens")
    if val is None:
        val = (obj.get("meta_info") or {}).get("completion_tokens")
    return int(val) if isinstance(val, int) and not isinstance(val, bool) else None


def generate_accept_of(obj: Any) -> float | None:
    """``meta_info.spec_accept_length`` of a ``/generate`` answer (sglang >= 0.5.23 reports it there)."""
    val = ((obj.get("meta_info") or {}) if isinstance(obj, dict) else {}).get("spec_accept_length")
    return float(val) if isinstance(val, (int, float)) and not isinstance(val, bool) else None


_JSON_TYPES = {
    str: "a string",
    int: "a number",
    float: "a number",
    bool: "a boolean",
    list: "a list",
    dict: "an object",
}


def _json_type(value: Any) -> str:
    return "null" if value is None else _JSON_TYPES.get(type(value), type(value).__name__)


def chat_messages_error(messages: Any) -> str | None:
    """Why OpenAI's chat ``messages`` is refused, naming the field, else None: a non-empty list of objects, each with
    a string ``role`` and a ``content`` that is a string or a list of content parts (objects); an assistant message
    carrying ``tool_calls`` may have none. An engine would otherwise template whatever came (a 200)."""
    if not isinstance(messages, list) or not messages:
        return f"messages must be a non-empty list of message objects, got {_json_type(messages)}"
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict):
            return f"messages[{i}] must be an object with role and content, got {_json_type(msg)}"
        if not isinstance(msg.get("role"), str):
            return f"messages[{i}].role must be a string, got {_json_type(msg.get('role'))}"
        content = msg.get("content")
        if content is None and msg["role"] == "assistant" and msg.get("tool_calls"):
            continue
        if isinstance(content, list) and all(isinstance(part, dict) for part in content):
            continue
        if not isinstance(content, str):
            return f"messages[{i}].content must be a string or a list of content parts, got {_json_type(content)}"
    return None


class Front:
    """The routes over a ``ControlLoop``; ``ask_accept`` asks engines for per-request spec details (the adaptive
    emulation needs the accept length) and hides them from clients that did not ask."""

    def __init__(
        self,
        loop: ControlLoop,
        *,
        request_timeout_s: float = 600.0,
        ask_accept: bool = False,
        max_running: int | None = None,
    ) -> None:
        self.loop = loop
        self.ask_accept = ask_accept
        self.max_running = max_running
        self._slots = threading.Condition()
        self.counts = FrontCounts()
        self.http = http_client(
            timeout=httpx.Timeout(request_timeout_s, connect=2.0),
            trust_env=False,
            limits=httpx.Limits(max_connections=512, max_keepalive_connections=0),
        )

    def router(self) -> Router:
        r = Router()
        r.add("GET", "/health", self.health)
        r.add("GET", "/serve/state", lambda req: self.loop.describe())
        r.add("GET", "/metrics", lambda req: metrics_response(self))
        r.add("GET", "/v1/models", self.models)
        r.add("GET", "/v1/models/{model_id:path}", self.model)
        for path in ("/v1/chat/completions", "/v1/completions", "/generate"):
            r.add("POST", path, self._counted(path))
        return r

    def _counted(self, path: str) -> Callable[[Request], Response | Stream]:
        def handle(req: Request) -> Response | Stream:
            try:
                out = self.forward(req, path)
            except BaseException as exc:  # answered by httpserve: a bad body 400, anything else 500
                self.counts.answered(path, 400 if isinstance(exc, BadRequest) else 500)
                raise
            self.counts.answered(path, out.status if isinstance(out, Response) else 200)
            return out

        return handle

    def model(self, req: Request) -> Response | dict[str, Any]:
        """OpenAI's ``GET /v1/models/{id}``: the model object of the instances' list, or OpenAI's 404."""
        listed = self.models(req)
        if isinstance(listed, Response):
            return listed
        wanted = unquote(req.params["model_id"])
        for card in listed.get("data") or []:
            if isinstance(card, dict) and card.get("id") == wanted:
                return card
        body = {
            "message": f"The model '{wanted}' does not exist",
            "type": "invalid_request_error",
            "param": "model",
            "code": "model_not_found",
        }
        return Response(404, {"error": body})

    def health(self, req: Request) -> Response:
        alive = self.loop.pool.alive()
        return Response(200 if alive else 503, {"ok": bool(alive), "alive": sorted(c.as_list() for c in alive)})

    def models(self, req: Request) -> Response | dict[str, Any]:
        for _ in range(len(self.loop.pool.instances)):
            inst = self.loop.route()
            if inst is None:
                break
            try:
                return self.http.get(inst.base_url + "/v1/models").json()
            except httpx.ConnectError as exc:
                self.loop.lost(inst, f"connection refused: {exc}")
            except (httpx.HTTPError, ValueError) as exc:
                return error(502, f"engine instance {inst.config} failed: {type(exc).__name__}: {exc}")
        return error(503, "no engine instance is alive")

    def forward(self, req: Request, path: str) -> Response | Stream:
        body = req.json()
        if not isinstance(body, dict):
            return error(400, "the body must be a JSON object")
        if path == "/v1/chat/completions":
            wrong = chat_messages_error(body.get("messages"))
            if wrong is not None:
                return error(400, wrong, param="messages")
        client_asked = bool(body.get("return_spec_tokens_details"))
        if self.ask_accept and path != "/generate":  # /generate reports the accept length in meta_info
            body["return_spec_tokens_details"] = True
        self.loop.request_started()
        streaming = False
        accept: float | None = None
        tokens: int | None = None
        try:
            for _ in range(len(self.loop.pool.instances)):
                inst = self._admit()
                if inst is None:
                    break
                try:
                    out, accept, tokens = self._send(inst, path, body, client_asked)
                except httpx.TransportError as exc:
                    self._release(inst)
                    if not isinstance(exc, httpx.ConnectError) and not inst.confirm_dead():
                        return error(
                            502, f"engine instance {inst.config} failed mid-request: {type(exc).__name__}: {exc}"
                        )
                    self.loop.lost(inst, f"{type(exc).__name__}: {exc}")
                    continue
                except BaseException:
                    self._release(inst)
                    raise
                streaming = isinstance(out, Stream)  # a stream calls request_finished and releases its slot at its end
                if not streaming:
                    self._release(inst)
                return out
            return error(503, "no engine instance is alive", fix="restart harness serve")
        finally:
            if not streaming:
                self.loop.request_finished(accept, tokens)
                self.counts.finished(tokens)

    def _send(
        self, inst: Instance, path: str, body: dict[str, Any], client_asked: bool
    ) -> tuple[Response | Stream, float | None, int | None]:
        """One try on ``inst`` (its slot held by the caller): (response, accept length, completion tokens); a broken
        connection (``httpx.TransportError``) propagates to ``forward``."""
        if body.get("stream"):
            resp = self.http.send(self.http.build_request("POST", inst.base_url + path, json=body), stream=True)
            if resp.status_code != 200:
                data = resp.read()
                resp.close()
                return Response(resp.status_code, _json_or_text(data)), None, None
            return Stream(self._relay(inst, resp, client_asked)), None, None
        resp = self.http.post(inst.base_url + path, json=body)
        payload = _json_or_text(resp.content)
        accept = accept_length_of(payload) or generate_accept_of(payload)
        if isinstance(payload, dict) and not client_asked:
            payload.pop("sglext", None)
        return Response(resp.status_code, payload), accept, completion_tokens_of(payload)

    def _admit(self) -> Instance | None:
        """The routed instance, with one of its ``max_running`` slots taken (None: every instance is lost). Requests
        beyond what an instance runs at once wait here, not in its queue, and go to whichever config is routed when
        a slot frees: after a switch under overload only the running batch drains on the old instance. With one
        engine at a time they also wait here while the routed config is being relaunched."""
        with self._slots:
            while True:
                inst = self.loop.route()
                if inst is None:
                    return None
                if inst.ready() and (self.max_running is None or inst.in_flight < self.max_running):
                    inst.enter()
                    return inst
                self._slots.wait(0.05)

    def _release(self, inst: Instance) -> None:
        inst.leave()
        with self._slots:
            self._slots.notify_all()

    def _relay(self, inst: Instance, resp: httpx.Response, client_asked: bool) -> Iterator[str]:
        accept: float | None = None
        tokens: int | None = None
        try:
            for line in resp.iter_lines():
                if line.startswith("data: ") and '"sglext"' in line:
                    obj = json.loads(line[6:])
                    accept = accept_length_of(obj) or accept
                    if not client_asked:
                        obj.pop("sglext", None)
                        line = "data: " + json.dumps(obj)
                elif line.startswith("data: ") and '"completion_tokens"' in line:  # usage (include_usage), meta_info
                    obj = _json_or_text(line[6:].encode())
                    tokens = completion_tokens_of(obj) or tokens
                    accept = generate_accept_of(obj) or accept
                yield line + "\n"
        except httpx.HTTPError as exc:  # the instance died mid-stream: an error event (OpenAI's shape), then the end
            failed = {
                "message": f"engine instance {inst.config} failed mid-stream: {exc}",
                "type": "server_error",
                "param": None,
                "code": 502,
            }
            yield "data: " + json.dumps({"error": failed}) + "\n\n" + "data: [DONE]\n\n"
        finally:
            resp.close()
            self._release(inst)
            self.loop.request_finished(accept, tokens)
            self.counts.finished(tokens)

    def close(self) -> None:
        self.http.close()


def _json_or_text(data: bytes) -> Any:
    try:
        return json.loads(data)
    except ValueError:
        return {"error": {"message": data.decode(errors="replace")[:500]}}


def make_front_server(front: Front, host: str, port: int, api_key: str | None = None) -> Server:
    return make_server(host, port, front.router(), server_header=SERVER_HEADER, api_key=api_key)
