"""All HTTP to an sglang(-compatible) server. Every difference between sglang versions lives in this module.

- ``/get_server_info`` (0.5.2) became ``/server_info`` (0.5.6+; the old name is a deprecated alias).
- Per-request accept length: 0.5.2 exposes only ``spec_verify_ct`` (accept length = completion_tokens /
  spec_verify_ct); 0.5.4+ also ``spec_accept_length``; 0.5.12+ omits the spec fields when ``spec_verify_ct`` is 0.
- Streaming ``output_ids`` are deltas on 0.5.2 and cumulative on 0.5.23: only ``meta_info.completion_tokens`` is used.

Every call has a timeout; a request still running after ``request_timeout`` seconds is cut and raised as an
``EngineRequestError`` of kind ``timeout``.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any, Literal

import httpx
from pydantic import BaseModel

from harness.core.errors import HarnessError
from harness.core.http import http_client
from harness.engine.version import version_tuple

ErrorKind = Literal["timeout", "http", "connection", "protocol"]


class EngineRequestError(HarnessError):
    """A request to the server failed: timed out, refused, an HTTP error status, or an unreadable answer."""

    exit_code = 4

    def __init__(self, message: str, kind: ErrorKind, status: int | None = None, fix: str | None = None) -> None:
        super().__init__(message, fix=fix)
        self.kind = kind
        self.status = status


class GenerateResult(BaseModel):
    """One finished ``/generate`` request."""

    text: str = ""
    prompt_tokens: int | None = None
    completion_tokens: int = 0
    e2e_latency_s: float | None = None
    """Server-side latency from meta_info (seconds of the engine's clock); None when the server gives none."""
    client_latency_s: float = 0.0
    """Wall seconds from sending the request to its last byte, as seen by the harness."""
    ttft_s: float | None = None
    accept_length: float | None = None
    spec_verify_ct: int | None = None
    finish_reason: str | None = None
    rid: str | None = None
    server_received_ns: int | None = None
    """When the server received the request, in ns of ``server_clock`` (None when the server does not say)."""
    server_finish_ns: int | None = None
    """When the server finished the request, same clock."""
    server_first_token_ns: int | None = None
    """When the server emitted the request's first token, same clock (twin: ``twin_first_token_ns``; sglang:
    ``request_received_ts + first_token_latency`` with ``--enable-metrics`` on 0.5.23)."""
    client_sent_wall_ns: int | None = None
    """UTC epoch ns when the harness sent the request (its first-token and finish instants: + ``ttft_s`` / latency)."""
    server_clock: str | None = None
    """``twin_device`` (the twin's scaled device clock: ``twin_received_ns``/``twin_finish_ns``) or ``wall`` (UTC
    epoch: sglang's ``request_received_ts``/``request_finished_ts`` with ``--enable-metrics``)."""


class ServerInfo(BaseModel):
    """The counters of ``/get_server_info`` (or ``/server_info``) the sweep reads."""

    avg_spec_accept_length: float | None = None
    step_time_dict: dict[str, list[float]] = {}
    version: str | None = None
    attention_backend: str | None = None
    """The backend the server resolved: 0.5.2 reports it in ``internal_states[0]`` (the scheduler's copy, set when
    the model runner picks a default; the top level echoes the launch flag), newer versions at the top level."""
    overlap_schedule: bool | None = None
    """Whether the server runs the overlap scheduler, as it says (``not disable_overlap_schedule`` of the server args
    it resolved: sglang turns it off for EAGLE up to 0.5.11 and for speculation on CPU in 0.5.23,
    ``srt/arg_groups/speculative_hook.py``); None when it does not say."""
    raw: dict[str, Any] = {}


def server_info_path(version: str) -> str:
    return "/server_info" if version_tuple(version) >= (0, 5, 6) else "/get_server_info"


def parse_meta_info(meta: dict[str, Any]) -> dict[str, Any]:
    """Token counts, latency, finish reason and per-request accept length from a final ``meta_info``."""
    completion = int(meta.get("completion_tokens") or 0)
    verify = meta.get("spec_verify_ct")
    accept = meta.get("spec_accept_length")
    if accept is None and verify:
        accept = completion / float(verify)
    finish = meta.get("finish_reason")
    if isinstance(finish, dict):
        finish = finish.get("type")
    latency = meta.get("e2e_latency")
    received, finished, server_clock = _server_stamps(meta)
    return {
        "server_first_token_ns": _first_token_stamp(meta, received, server_clock),
        "prompt_tokens": meta.get("prompt_tokens"),
        "completion_tokens": completion,
        "e2e_latency_s": float(latency) if latency is not None else None,
        "accept_length": float(accept) if accept is not None else None,
        "spec_verify_ct": int(verify) if verify is not None else None,
        "finish_reason": finish,
        "rid": meta.get("id"),
        "server_received_ns": received,
        "server_finish_ns": finished,
        "server_clock": server_clock,
    }


def _server_stamps(meta: dict[str, Any]) -> tuple[int | None, int | None, str | None]:
    """Server-side receive/finish instants: the twin's device-clock ns, else sglang's epoch-second timestamps."""
    try:
        if meta.get("twin_received_ns") is not None and meta.get("twin_finish_ns") is not None:
            return int(meta["twin_received_ns"]), int(meta["twin_finish_ns"]), "twin_device"
        if meta.get("request_received_ts") is not None and meta.get("request_finished_ts") is not None:
            return int(float(meta["request_received_ts"]) * 1e9), int(float(meta["request_finished_ts"]) * 1e9), "wall"
    except (TypeError, ValueError):
        pass
    return None, None, None


def _first_token_stamp(meta: dict[str, Any], received: int | None, server_clock: str | None) -> int | None:
    """The first-token instant on the server's clock: the twin's stamp, else sglang's receive + first-token latency."""
    try:
        if server_clock == "twin_device" and meta.get("twin_first_token_ns") is not None:
            return int(meta["twin_first_token_ns"])
        if server_clock == "wall" and received is not None and meta.get("first_token_latency") is not None:
            return received + int(float(meta["first_token_latency"]) * 1e9)
    except (TypeError, ValueError):
        pass
    return None


def parse_server_info(body: dict[str, Any]) -> ServerInfo:
    """Read ``internal_states[0]`` (both versions); fall back to top-level keys (older servers)."""
    states = body.get("internal_states") or [{}]
    state = states[0] if isinstance(states, list) and states and isinstance(states[0], dict) else {}
    accept = state.get("avg_spec_accept_length", body.get("avg_spec_accept_length"))
    steps = state.get("step_time_dict", body.get("step_time_dict")) or {}
    backend = state.get("attention_backend") or body.get("attention_backend")
    disabled = state.get("disable_overlap_schedule", body.get("disable_overlap_schedule"))
    return ServerInfo(
        avg_spec_accept_length=float(accept) if accept is not None else None,
        step_time_dict={str(k): [float(x) for x in v] for k, v in steps.items()},
        version=body.get("version"),
        attention_backend=str(backend) if backend else None,
        overlap_schedule=not disabled if isinstance(disabled, bool) else None,
        raw=body,
    )


def _error_message(resp: httpx.Response) -> str:
    try:
        body = resp.json()
        err = body.get("error", body) if isinstance(body, dict) else body
        msg = err.get("message", err) if isinstance(err, dict) else err
        return str(msg)[:500]
    except (ValueError, json.JSONDecodeError):
        return resp.text[:500]


class EngineClient:
    """HTTP client of one server at ``base_url`` speaking sglang ``version``."""

    def __init__(
        self, base_url: str, version: str = "0.5.2", *, request_timeout: float = 300.0, connect_timeout: float = 5.0
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.version = version
        self.request_timeout = float(request_timeout)
        self.connect_timeout = float(connect_timeout)
        self._http = http_client(
            base_url=self.base_url, timeout=httpx.Timeout(10.0, connect=connect_timeout), trust_env=False
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "EngineClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- plumbing -----------------------------------------------------------------------------------------------
    def _request(self, method: str, path: str, *, timeout: float = 10.0, **kw: Any) -> httpx.Response:
        try:
            resp = self._http.request(method, path, timeout=httpx.Timeout(timeout, connect=self.connect_timeout), **kw)
        except httpx.TimeoutException:
            raise EngineRequestError(
                f"{method} {self.base_url}{path} timed out after {timeout:g} s", "timeout"
            ) from None
        except httpx.HTTPError as exc:
            raise EngineRequestError(
                f"{method} {self.base_url}{path} failed: {exc}", "connection", fix="is the server running? see its log"
            ) from None
        if resp.status_code >= 400:
            raise EngineRequestError(
                f"HTTP {resp.status_code} from {method} {path}: {_error_message(resp)}", "http", resp.status_code
            )
        return resp

    # --- endpoints ----------------------------------------------------------------------------------------------
    def health(self, timeout: float = 5.0) -> bool:
        """True when ``/health`` answers 200 (503 while starting, refused before binding)."""
        try:
            return (
                self._http.get(
                    "/health", timeout=httpx.Timeout(timeout, connect=min(timeout, self.connect_timeout))
                ).status_code
                == 200
            )
        except httpx.HTTPError:
            return False

    def server_info(self) -> ServerInfo:
        return parse_server_info(self._request("GET", server_info_path(self.version), timeout=30.0).json())

    def flush_cache(self, attempts: int = 10, pause_s: float = 0.2) -> None:
        """Reset the radix cache and the accept-length counters (``step_time_dict`` is never reset)."""
        last: EngineRequestError | None = None
        for _ in range(attempts):
            try:
                self._request("POST", "/flush_cache", timeout=30.0)
                return
            except EngineRequestError as exc:
                if exc.status != 400:
                    raise
                last = exc  # requests still pending: wait and retry
                time.sleep(pause_s)
        assert last is not None
        raise last

    def models(self) -> list[str]:
        body = self._request("GET", "/v1/models").json()
        return [m.get("id") for m in body.get("data", [])]

    def model_info(self) -> dict[str, Any]:
        path = "/model_info" if version_tuple(self.version) >= (0, 5, 6) else "/get_model_info"
        return self._request("GET", path).json()

    def chat(
        self,
        messages: list[dict[str, Any]],
        *,
        max_tokens: int = 128,
        temperature: float = 0.0,
        model: str = "default",
        timeout: float | None = None,
        **extra: Any,
    ) -> dict[str, Any]:
        """``/v1/chat/completions`` (non-streaming); returns the JSON body (``choices``, ``usage``)."""
        body = {"model": model, "messages": messages, "max_tokens": max_tokens, "temperature": temperature, **extra}
        return self._request("POST", "/v1/chat/completions", json=body, timeout=timeout or self.request_timeout).json()

    def generate(
        self,
        text: str | None = None,
        *,
        input_ids: list[int] | None = None,
        max_new_tokens: int = 512,
        temperature: float = 0.0,
        ignore_eos: bool = True,
        stream: bool = True,
        rid: str | None = None,
        timeout: float | None = None,
        headers: dict[str, str] | None = None,
    ) -> GenerateResult:
        """One ``/generate`` request; raises ``EngineRequestError`` (timeout, HTTP status, connection, protocol).
        ``headers``: extra HTTP headers (the bench's closed-loop hints for the twin; sglang ignores them)."""
        path, payload = self._generate_request(text, input_ids, max_new_tokens, temperature, ignore_eos, stream, rid)
        limit = float(timeout or self.request_timeout)
        sent_wall = time.time_ns()
        t0 = time.monotonic()
        timed_out = threading.Event()
        try:
            with self._http.stream(
                "POST", path, json=payload, headers=headers, timeout=httpx.Timeout(limit, connect=self.connect_timeout)
            ) as resp:

                def expire() -> None:
                    timed_out.set()
                    resp.close()

                watchdog = threading.Timer(limit, expire)
                watchdog.daemon = True
                watchdog.start()
                try:
                    if resp.status_code >= 400:
                        resp.read()
                        raise EngineRequestError(
                            f"HTTP {resp.status_code} from POST {path}: {_error_message(resp)}",
                            "http",
                            resp.status_code,
                        )
                    if stream:
                        out = self._read_stream(resp, t0, limit)
                    else:
                        resp.read()
                        out = self._final(resp.json())
                finally:
                    watchdog.cancel()
        except EngineRequestError:
            raise
        except (httpx.TimeoutException, httpx.StreamClosed, httpx.ReadError, httpx.RemoteProtocolError) as exc:
            if timed_out.is_set() or isinstance(exc, httpx.TimeoutException) or time.monotonic() - t0 >= limit:
                raise EngineRequestError(
                    f"request to {self.base_url}{path} did not finish within --request-timeout "
                    f"{limit:g} s (runaway generation or hung server)",
                    "timeout",
                    fix="raise --request-timeout if the server is just slow",
                ) from None
            raise EngineRequestError(
                f"connection to {self.base_url}{path} broke mid-request: {exc!r}", "connection"
            ) from None
        except Exception as exc:  # the watchdog closing the stream can surface as many types; unknown ones re-raise
            if timed_out.is_set():
                raise EngineRequestError(
                    f"request to {self.base_url}{path} did not finish within --request-timeout "
                    f"{limit:g} s (runaway generation or hung server)",
                    "timeout",
                    fix="raise --request-timeout if the server is just slow",
                ) from None
            if isinstance(exc, httpx.HTTPError):
                raise EngineRequestError(
                    f"POST {self.base_url}{path} failed: {exc!r}",
                    "connection",
                    fix="is the server running? see its log",
                ) from None
            if isinstance(exc, (ValueError, KeyError, TypeError, AttributeError)):
                raise EngineRequestError(f"unreadable {path} answer: {exc!r}", "protocol") from None
            raise
        out.client_latency_s = time.monotonic() - t0
        out.client_sent_wall_ns = sent_wall
        return out

    def _generate_request(
        self,
        text: str | None,
        input_ids: list[int] | None,
        max_new_tokens: int,
        temperature: float,
        ignore_eos: bool,
        stream: bool,
        rid: str | None,
    ) -> tuple[str, dict[str, Any]]:
        """The route and JSON body of one generation (sglang: native ``/generate``)."""
        payload: dict[str, Any] = {
            "sampling_params": {"temperature": temperature, "max_new_tokens": max_new_tokens, "ignore_eos": ignore_eos},
            "stream": stream,
        }
        if input_ids is not None:
            payload["input_ids"] = input_ids
        else:
            payload["text"] = text or ""
        if rid is not None:
            payload["rid"] = rid
        return "/generate", payload

    def _from_chunks(self, chunks: list[dict[str, Any]]) -> GenerateResult:
        """The result of a finished stream (sglang: every chunk carries the whole ``meta_info`` so far)."""
        return self._final(chunks[-1])

    def _read_stream(self, resp: httpx.Response, t0: float, limit: float) -> GenerateResult:
        chunks: list[dict[str, Any]] = []
        ttft: float | None = None
        for line in resp.iter_lines():
            if time.monotonic() - t0 > limit:
                raise httpx.ReadTimeout("request deadline passed")
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                break
            chunk = json.loads(data)
            if isinstance(chunk, dict) and "error" in chunk:
                err = chunk["error"]
                msg = err.get("message", err) if isinstance(err, dict) else err
                raise EngineRequestError(f"server error in the generation stream: {msg}", "http", 500)
            if ttft is None:
                ttft = time.monotonic() - t0
            chunks.append(chunk)
        if not chunks:
            raise EngineRequestError("the generation stream ended without any data", "protocol")
        out = self._from_chunks(chunks)
        out.ttft_s = ttft
        if out.finish_reason is None:
            raise EngineRequestError("the generation stream ended before the request finished", "protocol")
        return out

    def _final(self, body: dict[str, Any]) -> GenerateResult:
        if isinstance(body, list):
            body = body[0]
        meta = parse_meta_info(body.get("meta_info") or {})
        return GenerateResult(text=body.get("text") or "", **meta)
