"""The twin engine's OpenAI-compatible routes (``/v1/models``, ``/v1/chat/completions``, ``/v1/completions``, plain
and SSE) as sglang serves them, with 0.5.23's ``sglext.spec_tokens_details``."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

from harness.httpserve import Request, Response, Router, Stream, error, sse
from harness.twin.engine import TwinEngine
from harness.twin.engine_request import EngineRequest, iter_counts
from harness.twin.sglang_state import meta_info


def add_routes(r: Router, eng: TwinEngine, admit: Callable[[Request], dict[str, Any] | Response]) -> None:
    """Add the OpenAI routes to ``r``; ``admit`` is the engine's gate (status, JSON body, faults)."""

    def models(req: Request) -> dict[str, Any]:
        return {"object": "list", "data": [{"id": eng.model_id, "object": "model", "created": int(eng.start_wall),
                                            "owned_by": "sglang-twin", "root": eng.model_id, "max_model_len": eng.context_length(),
                                            "twin": True}]}

    def completion(kind: str) -> Callable[[Request], Response | Stream | dict[str, Any]]:
        def handler(req: Request) -> Response | Stream | dict[str, Any]:
            body = admit(req)
            if isinstance(body, Response):
                return body
            if kind == "chat":
                msgs = body.get("messages")
                if not isinstance(msgs, list) or not msgs:
                    return error(400, "messages must be a non-empty list")
                prompt: Any = _chat_prompt(msgs)
            else:
                prompt = body.get("prompt")
                if isinstance(prompt, list):
                    prompt = prompt[0] if prompt else ""
                if not isinstance(prompt, str):
                    return error(400, "prompt must be a string")
            max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
            sp = {"temperature": body.get("temperature", 1.0), "max_new_tokens": max_tokens if max_tokens is not None else eng.context_length(),
                  "stop": body.get("stop"), "ignore_eos": body.get("ignore_eos", False), "stop_token_ids": body.get("stop_token_ids"),
                  "min_new_tokens": body.get("min_tokens", 0)}
            q = eng.new_request(prompt, None, sp)
            q.streaming = bool(body.get("stream"))
            eng.submit(q)
            details = eng.version == "0.5.23" and bool(body.get("return_spec_tokens_details"))
            if body.get("stream"):
                include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
                return Stream(_sse_openai(eng, q, kind, include_usage, details))
            q.wait_done()
            return _openai_result(eng, q, kind, details)

        return handler

    r.add("GET", "/v1/models", models)
    r.add("POST", "/v1/chat/completions", completion("chat"))
    r.add("POST", "/v1/completions", completion("completion"))


def _chat_prompt(msgs: list[Any]) -> str:
    """The Llama-3 chat template over the messages (so prompt token counts match a real server's)."""
    parts = []
    for m in msgs:
        content = m.get("content") if isinstance(m, dict) else str(m)
        if isinstance(content, list):
            content = " ".join(str(c.get("text", "")) for c in content if isinstance(c, dict))
        parts.append(f"<|start_header_id|>{m.get('role', 'user') if isinstance(m, dict) else 'user'}<|end_header_id|>\n\n{content or ''}<|eot_id|>")
    return "".join(parts) + "<|start_header_id|>assistant<|end_header_id|>\n\n"


def _finish_str(q: EngineRequest) -> str:
    fr = q.sim.finish_reason or {}
    return {"length": "length", "stop": "stop", "abort": "abort"}.get(fr.get("type", ""), "stop")


def _usage(q: EngineRequest) -> dict[str, Any]:
    return {"prompt_tokens": q.sim.prompt_tokens, "completion_tokens": q.visible, "total_tokens": q.sim.prompt_tokens + q.visible,
            "prompt_tokens_details": None, "reasoning_tokens": 0}


def _spec_details(eng: TwinEngine, q: EngineRequest) -> dict[str, Any]:
    meta = meta_info(eng, q, final=True)
    return {k: v for k, v in meta.items() if k.startswith("spec_")}


def _openai_result(eng: TwinEngine, q: EngineRequest, kind: str, details: bool) -> dict[str, Any]:
    fr = q.sim.finish_reason or {}
    matched = fr.get("matched") if fr.get("type") == "stop" else None
    text = q.text()
    if kind == "chat":
        choice: dict[str, Any] = {"index": 0, "message": {"role": "assistant", "content": text, "reasoning_content": None, "tool_calls": None},
                  "logprobs": None, "finish_reason": _finish_str(q), "matched_stop": matched}
        obj = "chat.completion"
    else:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": _finish_str(q), "matched_stop": matched}
        obj = "text_completion"
    out: dict[str, Any] = {"id": q.sim.rid, "object": obj, "created": int(time.time()), "model": eng.model_id, "choices": [choice],
           "usage": _usage(q), "metadata": {"weight_version": "default"}}
    if details:
        out["sglext"] = {"spec_tokens_details": _spec_details(eng, q)}
    return out


def _sse_openai(eng: TwinEngine, q: EngineRequest, kind: str, include_usage: bool, details: bool) -> Iterator[str]:
    sent_text = 0
    obj = "chat.completion.chunk" if kind == "chat" else "text_completion"
    created = int(time.time())
    first = True
    try:
        for n, final in iter_counts(q):
            text = q.text() if final else q.raw_text(n)
            delta = text[sent_text:]
            sent_text = len(text)
            if kind == "chat":
                d = {"role": "assistant", "content": delta} if first else {"content": delta}
                choice: dict[str, Any] = {"index": 0, "delta": d, "logprobs": None, "finish_reason": _finish_str(q) if final else None}
            else:
                choice = {"index": 0, "text": delta, "logprobs": None, "finish_reason": _finish_str(q) if final else None}
            chunk: dict[str, Any] = {"id": q.sim.rid, "object": obj, "created": created, "model": eng.model_id, "choices": [choice]}
            if final and details:
                chunk["sglext"] = {"spec_tokens_details": _spec_details(eng, q)}
            first = False
            yield sse(chunk)
        if include_usage:
            yield sse({"id": q.sim.rid, "object": obj, "created": created, "model": eng.model_id, "choices": [], "usage": _usage(q)})
        yield sse("[DONE]")
    except GeneratorExit:
        if not q.done:
            eng.abort(q)
        raise
