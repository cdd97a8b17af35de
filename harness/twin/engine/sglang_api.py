"""The twin engine's HTTP surface: sglang's native routes (``/generate`` with its SSE stream, server and model info,
``/flush_cache``, health) for both emulated versions, plus the OpenAI routes and ``/metrics``, on ``harness.core.httpserve``.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from typing import Any

from harness.core import promtext
from harness.core.httpserve import Request, Response, Router, Stream, error, sse
from harness.twin.engine import openai_api
from harness.twin.engine.loop_hint import parse_loop_hint
from harness.twin.engine.metrics import render_metrics
from harness.twin.engine.request import EngineRequest, iter_counts
from harness.twin.engine.scheduler import TwinEngine
from harness.twin.engine.sglang_contract import (
    prompt_type_error,
    sampling_contract_error,
    sampling_range_error,
    validation_error,
)
from harness.twin.engine.sglang_state import meta_info, server_info
from harness.twin.engine.tokens import count_tokens

Reply = Response | Stream | dict[str, Any] | list[Any]


def admit(eng: TwinEngine, req: Request) -> dict[str, Any] | Response:
    """The gate of every generation route: warmed up, a JSON object body, then the http500 fault."""
    if eng.status != "Up":
        return error(503, "server is starting")
    fastapi = eng.version == "0.5.23" and eng.args.twin_api == "sglang"  # FastAPI's validation answer, as 0.5.23's
    try:
        body = json.loads(req.raw.decode("utf-8")) if req.raw else {}
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        msg = f"invalid JSON: {exc.msg if isinstance(exc, json.JSONDecodeError) else exc}"
        return validation_error(f"JSON decode error: {msg}") if fastapi else error(400, msg)
    if not isinstance(body, dict):
        msg = f"request body must be a JSON object, got {type(body).__name__}"
        return validation_error(f"Input should be a dictionary: {msg}") if fastapi else error(400, msg)
    if "http500" in eng.faults:
        eng.http500_count += 1
        if eng.http500_count % eng.http500_every == 0:
            return error(500, "Internal Server Error (twin fault: http500)")
    return body


def generate(eng: TwinEngine, req: Request) -> Reply:
    """``/generate``: one prompt or a batch (text or input ids), plain or streamed."""
    body = admit(eng, req)
    if isinstance(body, Response):
        return body
    wrong_prompt = prompt_type_error(body)
    if wrong_prompt is not None:  # FastAPI's validation answer, as 0.5.23 rewrites it; on 0.5.2 the house's 400
        return validation_error(wrong_prompt) if eng.version == "0.5.23" else error(400, wrong_prompt)
    sp = body.get("sampling_params") or {}
    if not isinstance(sp, dict):
        return error(400, "sampling_params must be an object")
    if eng.version == "0.5.23":
        contract = sampling_contract_error(sp)
        if contract is not None:  # the schema gate answers a bare string
            return Response(400, {"error": contract})
    else:  # 0.5.2 has no schema gate; a wrong type is a 400 here rather than the twin's own crash
        wrong = sampling_contract_error(sp, unknown_ok=True)
        if wrong is not None:
            return error(400, f"sampling_params: {wrong}")
    try:
        hint = parse_loop_hint(req.headers)
    except ValueError as exc:
        return error(400, str(exc))
    text, ids = body.get("text"), body.get("input_ids")
    if text is None and ids is None:
        if eng.version == "0.5.23":
            return error(400, "Either text, input_ids or input_embeds should be provided.")
        return error(400, "Either text or input_ids should be provided.")
    if eng.args.skip_tokenizer_init and ids is None:
        return error(400, "input_ids must be provided with --skip-tokenizer-init")
    out_of_range = sampling_range_error(sp)
    if out_of_range is not None:
        return error(400, out_of_range)
    batch = isinstance(text, list) or (isinstance(ids, list) and bool(ids) and isinstance(ids[0], list))
    items: Any = (text if isinstance(text, list) else ids) if batch else [text if text is not None else ids]
    for item in items:
        tokens = count_tokens(item) if isinstance(item, str) else len(item)
        too_long = eng.context_refusal(tokens, sp.get("max_new_tokens"))
        if too_long is not None:
            return context_refused(eng, too_long, bool(body.get("stream")) and not batch)
    reqs = []
    for i, item in enumerate(items):
        rid = body.get("rid")
        rid = rid[i] if isinstance(rid, list) else (f"{rid}-{i}" if rid and batch else rid)
        one_hint = None if batch else hint  # a closed loop is one request per call
        if isinstance(item, str):
            reqs.append(eng.new_request(item, None, sp, rid, one_hint))
        else:
            reqs.append(eng.new_request(None, list(item), sp, rid, one_hint))
    if body.get("stream") and not batch:
        reqs[0].streaming = True
    for q in reqs:
        eng.submit(q)
    with_text = not eng.args.skip_tokenizer_init
    if body.get("stream") and not batch:
        return Stream(_sse_generate(eng, reqs[0], with_text))
    outs = []
    for q in reqs:
        q.wait_done()
        outs.append(_result(eng, q, with_text))
    return outs if batch else outs[0]


def context_refused(eng: TwinEngine, message: str, stream: bool) -> Response | Stream:
    """sglang's answer to a request past the context: a 400 ``{"error": {"message"}}``; a stream is refused inside
    it (sglang validates in the tokenizer, after the 200): one error event (0.5.23's with ``type``, ``code``,
    ``retryable``), then ``[DONE]``."""
    if not stream:
        return error(400, message)
    extra = {"type": "invalid_request_error", "code": 400, "retryable": False} if eng.version == "0.5.23" else {}
    return Stream(iter([sse({"error": {"message": message, **extra}}), sse("[DONE]")]))


def build_router(eng: TwinEngine) -> Router:
    """Every route of the engine, as the emulated sglang version has them."""
    r = Router()
    v523 = eng.version == "0.5.23"

    def health(req: Request) -> Response:
        if "slow-health" in eng.faults:
            time.sleep(float(os.environ.get("TWIN_SLOW_HEALTH_S", "5")))
        return Response(200 if eng.status == "Up" else 503, None, text="")

    def model_info(req: Request) -> dict[str, Any]:
        out = {
            "model_path": eng.args.model_path,
            "tokenizer_path": eng.args.tokenizer_path or eng.args.model_path,
            "is_generation": True,
            "preferred_sampling_params": None,
            "weight_version": "default",
            "twin": True,
        }
        if v523:
            out.update(
                {
                    "served_model_name": eng.model_id,
                    "load_format": eng.args.load_format,
                    "reasoning_parser": None,
                    "tool_call_parser": None,
                    "disaggregation_mode": "null",
                    "has_image_understanding": False,
                    "has_audio_understanding": False,
                    "model_type": "llama",  # the twin serves the profile's Llama target
                    "architectures": ["LlamaForCausalLM"],
                }
            )
        return out

    def flush(req: Request) -> Response:
        ok, msg = eng.flush_cache()
        return Response(200 if ok else 400, None, text=msg)

    def metrics(req: Request) -> Response:
        if not eng.args.enable_metrics:
            return error(404, "metrics are disabled (launch with --enable-metrics)")
        return Response(200, None, text=render_metrics(eng), content_type=promtext.CONTENT_TYPE)

    r.add("GET", "/health", health)
    r.add("GET", "/health_generate", health)
    if v523:
        r.add("GET", "/ready", lambda req: Response(200 if eng.status == "Up" else 503, None, text=""))
    r.add("POST,PUT", "/generate", lambda req: generate(eng, req))
    r.add("GET", "/get_server_info", lambda req: server_info(eng))
    r.add("GET", "/get_model_info", model_info)
    if v523:
        r.add("GET", "/server_info", lambda req: server_info(eng))
        r.add("GET", "/model_info", model_info)
    r.add("GET,POST", "/flush_cache", flush)
    openai_api.add_routes(r, eng, lambda req: admit(eng, req))
    r.add("GET", "/metrics", metrics)
    return r


def _result(eng: TwinEngine, q: EngineRequest, with_text: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if with_text:
        out["text"] = q.text()
    out["output_ids"] = q.ids()
    out["meta_info"] = meta_info(eng, q, final=True)
    return out


def _sse_generate(eng: TwinEngine, q: EngineRequest, with_text: bool) -> Iterator[str]:
    """sglang's ``/generate`` stream: 0.5.2 sends new ids and the whole text so far, 0.5.23 all ids so far (or,
    with ``--incremental-streaming-output``, new ids and new text); each chunk with its ``meta_info``."""
    sent_ids = 0
    cumulative_ids = eng.version == "0.5.23" and not getattr(eng.args, "incremental_streaming_output", False)
    incremental_text = eng.version == "0.5.23" and getattr(eng.args, "incremental_streaming_output", False)
    sent_text, first = 0, True
    try:
        for n, final in iter_counts(q):
            ids = q.ids(n)
            chunk: dict[str, Any] = {}
            if with_text:
                text = q.text() if final else q.raw_text(n)
                chunk["text"] = text[sent_text:] if incremental_text else text
                sent_text = len(text)
            chunk["output_ids"] = ids if cumulative_ids else ids[sent_ids:]
            chunk["meta_info"] = meta_info(eng, q, final=final, completion=n, first=first)
            sent_ids, first = n, False
            yield sse(chunk)
        yield sse("[DONE]")
    except GeneratorExit:
        if not q.done:
            eng.abort(q)
        raise
