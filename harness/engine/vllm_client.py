"""All HTTP to a vLLM(-compatible) server: the OpenAI ``/v1/completions`` route for generation, ``/metrics`` for the
speculative-decoding counters, ``/version``, ``/reset_prefix_cache``. Every vLLM difference from sglang lives here.

vLLM has no per-request accept length and no step-time record: the accept length of a cell is read from the
monotonic counters ``vllm:spec_decode_num_accepted_tokens_total`` and ``vllm:spec_decode_num_drafts_total`` as
1 + accepted / drafts over the interval since the previous ``server_info()`` (the bench reads it before and after a
cell), and the speed falls back to the window's tokens per second per request.
"""

from __future__ import annotations

import time
from typing import Any

from harness.engine.sglang_client import EngineClient, EngineRequestError, GenerateResult, ServerInfo

ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
DRAFTS = "vllm:spec_decode_num_drafts_total"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"


def counter_totals(text: str, names: tuple[str, ...] = (ACCEPTED, DRAFTS, DRAFT_TOKENS)) -> dict[str, float]:
    """Each named counter summed over its label sets, from Prometheus text (absent counters are left out)."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in names:
                out[sample.name] = out.get(sample.name, 0.0) + float(sample.value)
    return out


def accept_length(before: dict[str, float], after: dict[str, float]) -> float | None:
    """Tokens per target step between two counter readings: 1 + accepted / drafts (None without drafts)."""
    drafts = after.get(DRAFTS, 0.0) - before.get(DRAFTS, 0.0)
    if drafts <= 0:
        return None
    return 1.0 + (after.get(ACCEPTED, 0.0) - before.get(ACCEPTED, 0.0)) / drafts


class VllmClient(EngineClient):
    """HTTP client of one vLLM server (or the twin in vLLM mode) serving ``model``."""

    def __init__(
        self,
        base_url: str,
        version: str = "0.34.0",
        *,
        model: str = "default",
        request_timeout: float = 300.0,
        connect_timeout: float = 5.0,
    ) -> None:
        super().__init__(base_url, version, request_timeout=request_timeout, connect_timeout=connect_timeout)
        self.model = model
        self._counters: dict[str, float] = {}

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
        payload: dict[str, Any] = {
            "model": self.model,
            "prompt": input_ids if input_ids is not None else (text or ""),
            "max_tokens": max_new_tokens,
            "temperature": temperature,
            "ignore_eos": ignore_eos,
            "stream": stream,
        }
        if stream:
            payload["stream_options"] = {"include_usage": True}
        if rid is not None:
            payload["request_id"] = rid
        return "/v1/completions", payload

    def _from_chunks(self, chunks: list[dict[str, Any]]) -> GenerateResult:
        text, finish = "", None
        usage: dict[str, Any] = {}
        twin: dict[str, Any] = {}
        for chunk in chunks:
            for choice in chunk.get("choices") or []:
                text += choice.get("text") or ""
                finish = choice.get("finish_reason") or finish
            usage = chunk.get("usage") or usage
            twin = chunk.get("twin") or twin
        return _result(text, finish, usage, twin, chunks[0].get("id"))

    def _final(self, body: dict[str, Any]) -> GenerateResult:
        choice = (body.get("choices") or [{}])[0]
        return _result(
            choice.get("text") or "",
            choice.get("finish_reason"),
            body.get("usage") or {},
            body.get("twin") or {},
            body.get("id"),
        )

    def server_info(self) -> ServerInfo:
        """The accept length since the previous call (from ``/metrics``) and the server's ``/version``."""
        counters = counter_totals(self._request("GET", "/metrics", timeout=30.0).text)
        accept = accept_length(self._counters, counters)
        self._counters = counters
        version = self._request("GET", "/version").json().get("version")
        return ServerInfo(avg_spec_accept_length=accept, version=version, raw={"counters": counters})

    def flush_cache(self, attempts: int = 10, pause_s: float = 0.2) -> None:
        """``POST /reset_prefix_cache`` (registered in vLLM's dev mode, which the harness launches it in); the spec
        counters are monotonic, so the accept-length interval restarts at the next ``server_info()``.

        vLLM 0.34 answers 200 ``{"success": false}`` while blocks are still held (running requests, KV transfers;
        ``vllm/entrypoints/serve/dev/cache/api_router.py``): retried, then an error. vLLM 0.11 answers an empty 200
        without checking (``vllm/entrypoints/openai/api_server.py``), so there is nothing to check there."""
        for _ in range(attempts):
            resp = self._request("POST", "/reset_prefix_cache", timeout=30.0)
            try:
                body = resp.json() if resp.content.strip() else None
            except ValueError:
                body = None
            if not (isinstance(body, dict) and body.get("success") is False):
                return
            time.sleep(pause_s)
        raise EngineRequestError(
            f'POST {self.base_url}/reset_prefix_cache kept answering {{"success": false}} '
            f"({attempts} tries, {pause_s:g} s apart): the server still holds KV blocks",
            "http",
            200,
            fix="a request is still running on the server; wait for it or raise the flush attempts",
        )

    def model_info(self) -> dict[str, Any]:
        return {"models": self.models(), "version": self.version}

    def chat(self, messages: list[dict[str, Any]], **kw: Any) -> dict[str, Any]:
        """``/v1/chat/completions`` for this client's model (vLLM answers 404 to any other name)."""
        kw.setdefault("model", self.model)
        return super().chat(messages, **kw)


def _result(
    text: str, finish: str | None, usage: dict[str, Any], twin: dict[str, Any], rid: str | None
) -> GenerateResult:
    """A finished completion; the twin in vLLM mode adds its device-clock stamps under ``twin`` (real vLLM: none)."""
    stamped = twin.get("received_ns") is not None and twin.get("finish_ns") is not None
    return GenerateResult(
        text=text,
        prompt_tokens=usage.get("prompt_tokens"),
        completion_tokens=int(usage.get("completion_tokens") or 0),
        e2e_latency_s=twin.get("e2e_latency_s"),
        finish_reason=finish,
        rid=rid,
        server_received_ns=twin.get("received_ns") if stamped else None,
        server_finish_ns=twin.get("finish_ns") if stamped else None,
        server_first_token_ns=twin.get("first_token_ns") if stamped else None,
        server_clock="twin_device" if stamped else None,
    )
