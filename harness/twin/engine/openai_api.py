"""The twin engine's OpenAI-compatible routes (``/v1/models``, ``/v1/chat/completions``, ``/v1/completions``, plain
and SSE) as sglang serves them, with 0.5.23's ``sglext.spec_tokens_details``; ``chat_route`` serves the same chat
completion in vLLM's dialect (``chatcmpl-`` ids, ``stop_reason``, loop hints, the ``twin`` stamps) for vllm_api."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import unquote

from harness.core.httpserve import Request, Response, Router, Stream, error, sse
from harness.twin.engine.loop_hint import LoopHint, parse_loop_hint
from harness.twin.engine.request import EngineRequest, iter_counts
from harness.twin.engine.scheduler import TwinEngine
from harness.twin.engine.sglang_state import meta_info
from harness.twin.engine.tokens import count_tokens

Reply = Response | Stream | dict[str, Any]
Admit = Callable[[Request], dict[str, Any] | Response]


def add_routes(r: Router, eng: TwinEngine, admit: Admit) -> None:
    """Add the OpenAI routes to ``r``; ``admit`` is the engine's gate (status, JSON body, faults)."""

    def card() -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": eng.model_id,
            "object": "model",
            "created": int(eng.start_wall),
            "owned_by": "sglang-twin",
            "root": eng.model_id,
        }
        if eng.version == "0.5.23":
            out["parent"] = None
        return {**out, "max_model_len": eng.context_length(), "twin": True}

    def model(req: Request) -> Response | dict[str, Any]:
        """sglang's ``GET /v1/models/{model}``: the served model's card, else its 404."""
        wanted = unquote(req.params["model_id"])
        if wanted != eng.model_id:
            body = {"message": f"The model '{wanted}' does not exist", "type": "invalid_request_error"}
            return Response(404, {"error": {**body, "param": "model", "code": "model_not_found"}})
        return card()

    r.add("GET", "/v1/models", lambda req: {"object": "list", "data": [card()]})
    r.add("GET", "/v1/models/{model_id:path}", model)
    r.add("POST", "/v1/chat/completions", lambda req: _handle(eng, admit, req, "chat", "sglang"))
    r.add("POST", "/v1/completions", lambda req: _handle(eng, admit, req, "completion", "sglang"))


def chat_route(eng: TwinEngine, admit: Admit) -> Callable[[Request], Reply]:
    """``POST /v1/chat/completions`` as vLLM serves it (plain and SSE, ``stream_options.include_usage``)."""
    return lambda req: _handle(eng, admit, req, "chat", "vllm")


def _handle(eng: TwinEngine, admit: Admit, req: Request, kind: str, api: str) -> Reply:
    body = admit(req)
    if isinstance(body, Response):
        return body
    hint = vllm_gate(eng, req, body) if api == "vllm" else None
    if isinstance(hint, Response):
        return hint
    refused = _not_emulated(eng, body, api) or (_chat_limit_error(eng, body, api) if kind == "chat" else None)
    if refused is not None:
        return refused
    if kind == "chat":
        msgs = body.get("messages")
        if not isinstance(msgs, list) or not msgs:
            return refuse(eng, api, "messages must be a non-empty list", "messages")
        prompt: Any = _chat_prompt(msgs)
    else:
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1:
            prompt = prompt[0]
        if not isinstance(prompt, str):
            return refuse(eng, api, "prompt must be a string", "prompt")
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    if api == "sglang" and max_tokens is not None:
        too_long = eng.context_refusal(count_tokens(prompt), max_tokens)
        if too_long is not None and body.get("stream") and eng.version == "0.5.2":  # refused inside the stream
            failed = {"object": "error", "message": too_long, "type": "BadRequestError", "param": None, "code": 400}
            return Stream(iter([sse({"error": failed}), sse("[DONE]")]))
        if too_long is not None:  # 0.5.23 starts the stream first, so a refusal is a 400 before it
            return refuse(eng, api, too_long, "max_tokens")
    sp = {
        "temperature": body.get("temperature", 1.0),
        "max_new_tokens": max_tokens if max_tokens is not None else eng.context_length(),
        "stop": body.get("stop"),
        "ignore_eos": body.get("ignore_eos", False),
        "stop_token_ids": body.get("stop_token_ids"),
        "min_new_tokens": body.get("min_tokens", 0),
    }
    q = eng.new_request(prompt, None, sp, body.get("request_id") if api == "vllm" else None, hint)
    q.streaming = bool(body.get("stream"))
    eng.submit(q)
    details = api == "sglang" and eng.version == "0.5.23" and bool(body.get("return_spec_tokens_details"))
    if body.get("stream"):
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        return Stream(_sse_openai(eng, q, kind, include_usage, details, api))
    q.wait_done()
    return _openai_result(eng, q, kind, details, api)


def refuse(eng: TwinEngine, api: str, message: str, param: str) -> Response:
    """A 400 of the OpenAI routes: sglang 0.5.23's ``ErrorResponse`` body (``object``, ``message``, ``type``,
    ``param`` (null, as sglang leaves it), ``code`` at the top level), else the house's ``{"error": {"message",
    "param"}}``."""
    if api == "sglang" and eng.version == "0.5.23":
        body = {"object": "error", "message": message, "type": "BadRequestError", "param": None, "code": 400}
        return Response(400, body)
    return error(400, message, param=param)


def _not_emulated(eng: TwinEngine, body: dict[str, Any], api: str) -> Response | None:
    """A 400 for what a request asks that the twin would otherwise shrink silently (a real server answers it): more
    than one choice or prompt, log probabilities; and for token limits no server takes."""
    n = body.get("n", 1)
    if n != 1:
        return refuse(eng, api, f"n={n!r}: the twin engine answers one choice per request (n=1)", "n")
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) != 1:
        return refuse(
            eng, api, f"a list of {len(prompt)} prompts: the twin engine takes one prompt per request", "prompt"
        )
    if body.get("logprobs") not in (None, False, 0) or body.get("top_logprobs") not in (None, 0):
        return refuse(eng, api, "logprobs: the twin engine does not emulate log probabilities", "logprobs")
    for key in ("max_tokens", "max_completion_tokens"):
        value = body.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            return refuse(eng, api, f"{key} must be an integer >= 0, got {value!r}", key)
        if api == "vllm" and value > eng.context_length():
            return refuse(eng, api, f"{key}={value} exceeds the model's context length {eng.context_length()}", key)
    return None


def _chat_limit_error(eng: TwinEngine, body: dict[str, Any], api: str) -> Response | None:
    """sglang's chat route refuses a completion limit above the context length before it reads the prompt (0.5.2
    only when launched with ``--context-length``)."""
    limit = body.get("max_completion_tokens") or body.get("max_tokens")
    context = eng.context_length() if eng.version == "0.5.23" else eng.args.context_length
    if api != "sglang" or not limit or not context or limit <= context:
        return None
    message = f"max_completion_tokens is too large: {limit}.This model supports at most {context} completion tokens."
    return refuse(eng, api, message, "max_completion_tokens")


def vllm_gate(eng: TwinEngine, req: Request, body: dict[str, Any]) -> LoopHint | None | Response:
    """vLLM's 404 for another model's name (the twin answers to its path too), else the request's loop hint."""
    model = body.get("model")
    if model not in (None, eng.model_id, eng.args.model_path):
        return Response(
            404,
            {
                "error": {
                    "message": f"The model `{model}` does not exist.",
                    "type": "NotFoundError",
                    "param": "model",
                    "code": 404,
                }
            },
        )
    try:
        return parse_loop_hint(req.headers)
    except ValueError as exc:
        return error(400, str(exc))


def twin_stamps(q: EngineRequest) -> dict[str, Any]:
    """The twin's device-clock stamps of a finished request (``twin`` in vLLM-mode answers); {} before it finishes."""
    if q.sim.finish_ns is None:
        return {}
    return {
        "twin": {
            "received_ns": q.received_ns,
            "finish_ns": q.sim.finish_ns,
            "first_token_ns": q.sim.first_token_ns,
            "e2e_latency_s": (q.sim.finish_ns - q.received_ns) / 1e9,
        }
    }


def _chat_prompt(msgs: list[Any]) -> str:
    """The Llama-3 chat template over the messages (so prompt token counts match a real server's)."""
    parts = []
    for m in msgs:
        content = m.get("content") if isinstance(m, dict) else str(m)
        if isinstance(content, list):
            content = " ".join(str(c.get("text", "")) for c in content if isinstance(c, dict))
        parts.append(
            f"<|start_header_id|>{m.get('role', 'user') if isinstance(m, dict) else 'user'}<|end_header_id|>\n\n{content or ''}<|eot_id|>"
        )
    return "".join(parts) + "<|start_header_id|>assistant<|end_header_id|>\n\n"


def _finish_str(q: EngineRequest) -> str:
    fr = q.sim.finish_reason or {}
    return {"length": "length", "stop": "stop", "abort": "abort"}.get(fr.get("type", ""), "stop")


def usage_of(q: EngineRequest, api: str) -> dict[str, Any]:
    """The ``usage`` object of a request as sglang or vLLM (``api``) reports it."""
    out = {
        "prompt_tokens": q.sim.prompt_tokens,
        "completion_tokens": q.visible,
        "total_tokens": q.sim.prompt_tokens + q.visible,
        "prompt_tokens_details": None,
    }
    return out if api == "vllm" else {**out, "reasoning_tokens": 0}


def _ids(q: EngineRequest, kind: str, api: str) -> str:
    return q.sim.rid if api == "sglang" else f"{'chatcmpl' if kind == 'chat' else 'cmpl'}-{q.sim.rid}"


def _stop_field(q: EngineRequest, api: str) -> dict[str, Any]:
    """sglang's ``matched_stop`` (the stop string or token that ended it) or vLLM's ``stop_reason``."""
    fr = q.sim.finish_reason or {}
    matched = fr.get("matched") if fr.get("type") == "stop" else None
    return (
        {"matched_stop": matched}
        if api == "sglang"
        else {"stop_reason": matched if isinstance(matched, (str, int)) else None}
    )


def _spec_details(eng: TwinEngine, q: EngineRequest) -> dict[str, Any]:
    """0.5.23's ``sglext.spec_tokens_details``: the spec fields of ``meta_info`` plus the capped-draft statistics
    (DSpark's; 0 and empty for EAGLE3)."""
    meta = meta_info(eng, q, final=True)
    out = {k: v for k, v in meta.items() if k.startswith("spec_")}
    return {**out, "spec_cap_length": 0.0, "spec_block_accept_length": 0.0, "spec_cap_lens_histogram": []}


def _sglang_usage(eng: TwinEngine, q: EngineRequest) -> dict[str, Any]:
    """sglang's ``usage``; 0.5.23 adds ``completion_tokens_details`` (null without reasoning tokens)."""
    usage = usage_of(q, "sglang")
    return {**usage, "completion_tokens_details": None} if eng.version == "0.5.23" else usage


def _metadata(eng: TwinEngine, q: EngineRequest) -> dict[str, Any]:
    """sglang's ``metadata``; 0.5.23 adds the ``weight_versions`` spans of the output."""
    if eng.version != "0.5.23":
        return {"weight_version": "default"}
    return {"weight_version": "default", "weight_versions": [{"version": "default", "start": 0, "end": q.visible}]}


def _openai_result(eng: TwinEngine, q: EngineRequest, kind: str, details: bool, api: str) -> dict[str, Any]:
    text = q.text()
    if kind == "chat":
        message: dict[str, Any] = {"role": "assistant", "content": text, "reasoning_content": None}
        if api == "vllm":
            message["tool_calls"] = []
        elif eng.version != "0.5.23":  # 0.5.23 leaves out a null tool_calls
            message["tool_calls"] = None
        choice: dict[str, Any] = {
            "index": 0,
            "message": message,
            "logprobs": None,
            "finish_reason": _finish_str(q),
            **_stop_field(q, api),
        }
        obj = "chat.completion"
    else:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": _finish_str(q), **_stop_field(q, api)}
        obj = "text_completion"
    out: dict[str, Any] = {
        "id": _ids(q, kind, api),
        "object": obj,
        "created": int(time.time()),
        "model": eng.model_id,
        "choices": [choice],
        "usage": _sglang_usage(eng, q) if api == "sglang" else usage_of(q, api),
    }
    if api == "sglang":
        out["metadata"] = _metadata(eng, q)
    else:
        out.update(prompt_logprobs=None, **twin_stamps(q))
    if details:
        out["sglext"] = {"spec_tokens_details": _spec_details(eng, q)}
    return out


def _sse_openai(
    eng: TwinEngine, q: EngineRequest, kind: str, include_usage: bool, details: bool, api: str
) -> Iterator[str]:
    sent_text = 0
    obj = "chat.completion.chunk" if kind == "chat" else "text_completion"
    created, rid = int(time.time()), _ids(q, kind, api)
    first = True
    v523 = api == "sglang" and eng.version == "0.5.23"  # its chunks: reasoning_content, matched_stop, usage null
    try:
        for n, final in iter_counts(q):
            text = q.text() if final else q.raw_text(n)
            delta = text[sent_text:]
            sent_text = len(text)
            if kind == "chat":
                d: dict[str, Any] = {"role": "assistant", "content": delta} if first else {"content": delta}
                if v523:
                    d = {"reasoning_content": None, **d}
                choice: dict[str, Any] = {
                    "index": 0,
                    "delta": d,
                    "logprobs": None,
                    "finish_reason": _finish_str(q) if final else None,
                }
            else:
                choice = {
                    "index": 0,
                    "text": delta,
                    "logprobs": None,
                    "finish_reason": _finish_str(q) if final else None,
                }
            if api == "vllm":
                choice.update(_stop_field(q, api) if final else {"stop_reason": None})
            elif v523:
                choice.update(_stop_field(q, api) if final else {"matched_stop": None})
            chunk: dict[str, Any] = {
                "id": rid,
                "object": obj,
                "created": created,
                "model": eng.model_id,
                "choices": [choice],
            }
            if v523 and kind != "chat":
                chunk["usage"] = None
            if final and details:
                chunk["sglext"] = {"spec_tokens_details": _spec_details(eng, q)}
            if final and api == "vllm":
                chunk.update(twin_stamps(q))
            first = False
            yield sse(chunk)
        if include_usage:
            yield sse(
                {
                    "id": rid,
                    "object": obj,
                    "created": created,
                    "model": eng.model_id,
                    "choices": [],
                    "usage": _sglang_usage(eng, q) if api == "sglang" else usage_of(q, api),
                }
            )
        yield sse("[DONE]")
    except GeneratorExit:
        if not q.done:
            eng.abort(q)
        raise
