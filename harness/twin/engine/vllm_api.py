"""The twin engine's HTTP surface in vLLM mode: vLLM's OpenAI server routes (``/health``, ``/ping``, ``/version``,
``/v1/models``, ``/v1/completions`` plain and SSE, ``/v1/chat/completions`` (openai_api's chat route in vLLM's
dialect), ``/reset_prefix_cache``) and ``/metrics`` with vLLM's
speculative-decoding counters, on ``harness.core.httpserve``. Twin extras: ``twin`` (device-clock stamps of each
completion, which real vLLM does not give) and ``owned_by: vllm-twin``."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from harness.core import promtext
from harness.core.httpserve import Request, Response, Router, Stream, error, sse
from harness.twin.engine.openai_api import Reply, chat_route, twin_stamps, usage_of, vllm_gate
from harness.twin.engine.request import EngineRequest, iter_counts
from harness.twin.engine.scheduler import TwinEngine
from harness.twin.engine.sglang_api import admit


def completions(eng: TwinEngine, req: Request) -> Reply:
    """``POST /v1/completions``: one prompt (text or token ids), whole or streamed; honours the bench's loop hints."""
    body = admit(eng, req)
    if isinstance(body, Response):
        return body
    hint = vllm_gate(eng, req, body)
    if isinstance(hint, Response):
        return hint
    prompt = body.get("prompt")
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], str):
        prompt = prompt[0]
    if not isinstance(prompt, (str, list)):
        return error(400, "prompt must be a string or a list of token ids")
    max_tokens = body.get("max_tokens")
    sp = {
        "temperature": body.get("temperature", 1.0),
        "max_new_tokens": 16 if max_tokens is None else max_tokens,
        "stop": body.get("stop"),
        "ignore_eos": bool(body.get("ignore_eos", False)),
        "min_new_tokens": body.get("min_tokens", 0),
    }
    text, ids = (prompt, None) if isinstance(prompt, str) else (None, [int(t) for t in prompt])
    q = eng.new_request(text, ids, sp, body.get("request_id"), hint)
    q.streaming = bool(body.get("stream"))
    eng.submit(q)
    if body.get("stream"):
        return Stream(_sse(eng, q, bool((body.get("stream_options") or {}).get("include_usage"))))
    q.wait_done()
    return _chunk(
        eng,
        q,
        {"index": 0, "text": q.text(), "logprobs": None, "finish_reason": _finish(q), "stop_reason": None},
        usage=True,
        twin=True,
    )


def _finish(q: EngineRequest) -> str:
    return "length" if (q.sim.finish_reason or {}).get("type") == "length" else "stop"


def _chunk(
    eng: TwinEngine, q: EngineRequest, choice: dict[str, Any] | None, *, usage: bool, twin: bool
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": f"cmpl-{q.sim.rid}",
        "object": "text_completion",
        "created": int(time.time()),
        "model": eng.model_id,
        "choices": [choice] if choice else [],
    }
    if usage:
        out["usage"] = usage_of(q, "vllm")
    return {**out, **twin_stamps(q)} if twin else out


def _sse(eng: TwinEngine, q: EngineRequest, include_usage: bool) -> Iterator[str]:
    """vLLM's completion stream: text deltas, the finish reason on the last one, then the usage chunk."""
    sent = 0
    try:
        for n, final in iter_counts(q):
            text = q.text() if final else q.raw_text(n)
            choice = {
                "index": 0,
                "text": text[sent:],
                "logprobs": None,
                "finish_reason": _finish(q) if final else None,
                "stop_reason": None,
            }
            sent = len(text)
            yield sse(_chunk(eng, q, choice, usage=False, twin=final))
        if include_usage:
            yield sse(_chunk(eng, q, None, usage=True, twin=False))
        yield sse("[DONE]")
    except GeneratorExit:
        if not q.done:
            eng.abort(q)
        raise


def _families(eng: TwinEngine) -> list[Any]:
    """vLLM's metric families of one scrape (names as vLLM's V1 engine exports them)."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    labels, values = ["model_name", "engine"], [eng.model_id, "0"]

    def family(kind: Any, name: str, doc: str, value: float) -> Any:
        f = kind(name, doc, labels=labels)
        f.add_metric(values, value)
        return f

    with eng.lock:
        d = eng.decoder
        out = [
            family(
                GaugeMetricFamily,
                "vllm:num_requests_running",
                "Number of requests in model execution batches.",
                len(d.running),
            ),
            family(
                GaugeMetricFamily,
                "vllm:num_requests_waiting",
                "Number of requests waiting to be processed.",
                len(d.waiting),
            ),
            family(
                CounterMetricFamily,
                "vllm:prompt_tokens",
                "Number of prefill tokens processed.",
                eng.prompt_tokens_total,
            ),
            family(
                CounterMetricFamily,
                "vllm:generation_tokens",
                "Number of generation tokens processed.",
                eng.generation_tokens_total,
            ),
        ]
        if not eng.cfg.is_baseline:
            accepted = sum(d.accepted_per_pos)
            out += [
                family(
                    CounterMetricFamily,
                    "vllm:spec_decode_num_drafts",
                    "Number of spec decoding drafts.",
                    d.spec_drafts_total,
                ),
                family(
                    CounterMetricFamily,
                    "vllm:spec_decode_num_draft_tokens",
                    "Number of draft tokens.",
                    d.spec_drafts_total * eng.cfg.steps,
                ),
                family(
                    CounterMetricFamily, "vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.", accepted
                ),
            ]
            per_pos = CounterMetricFamily(
                "vllm:spec_decode_num_accepted_tokens_per_pos",
                "Accepted tokens per draft position.",
                labels=[*labels, "position"],
            )
            for pos, n in enumerate(d.accepted_per_pos):
                per_pos.add_metric([*values, str(pos)], n)
            out.append(per_pos)
    return out


def build_vllm_router(eng: TwinEngine) -> Router:
    """Every route of the engine in vLLM mode."""
    r = Router()
    version = str(getattr(eng.args, "vllm_version", None) or "0.34.0")

    def health(req: Request) -> Response:
        return Response(200 if eng.status == "Up" else 503, None, text="")

    def models(req: Request) -> dict[str, Any]:
        return {
            "object": "list",
            "data": [
                {
                    "id": eng.model_id,
                    "object": "model",
                    "created": int(eng.start_wall),
                    "owned_by": "vllm-twin",
                    "root": eng.args.model_path,
                    "parent": None,
                    "max_model_len": eng.context_length(),
                    "twin": True,
                }
            ],
        }

    def reset(req: Request) -> dict[str, Any]:
        """vLLM 0.34's dev route: 200 ``{"success": false}`` while requests hold blocks (the twin: pending requests)."""
        ok, _ = eng.flush_cache()
        return {"success": ok}

    r.add("GET", "/health", health)
    r.add("GET,POST", "/ping", health)
    r.add("GET", "/version", lambda req: {"version": version, "twin": True})
    r.add("GET", "/v1/models", models)
    r.add("POST", "/v1/completions", lambda req: completions(eng, req))
    r.add("POST", "/v1/chat/completions", chat_route(eng, lambda req: admit(eng, req)))
    r.add("POST", "/reset_prefix_cache", reset)
    r.add(
        "GET",
        "/metrics",
        lambda req: Response(200, None, text=promtext.render(_families(eng)), content_type=promtext.CONTENT_TYPE),
    )
    return r
