"""sglang's request gates as the twin answers them: 0.5.23's ``/generate`` schema contract on ``sampling_params``
(``srt/entrypoints/api_contract.py``: serde's error text, a 400 whose ``error`` is that string),
``SamplingParams.verify``'s ranges (a 400 ``{"error": {"message"}}``) and FastAPI's request-validation body (0.5.23: a
body that is not JSON or not an object)."""

from __future__ import annotations

import math
from typing import Any

from harness.core.httpserve import Response

SAMPLING_FIELDS_0523: dict[str, str] = {
    "max_new_tokens": "i64",
    "stop": "str-or-list",
    "stop_token_ids": "i64-list",
    "stop_regex": "str-or-list",
    "temperature": "f64",
    "top_p": "f64",
    "top_k": "i64",
    "min_p": "f64",
    "frequency_penalty": "f64",
    "presence_penalty": "f64",
    "repetition_penalty": "f64",
    "min_new_tokens": "i64",
    "n": "i64",
    "json_schema": "a string",
    "regex": "a string",
    "ebnf": "a string",
    "structural_tag": "a string",
    "ignore_eos": "a boolean",
    "skip_special_tokens": "a boolean",
    "spaces_between_special_tokens": "a boolean",
    "no_stop_trim": "a boolean",
    "stream_interval": "i64",
    "logit_bias": "a map",
    "sampling_seed": "i64",
    "custom_params": "any",
    "beam_width": "i64",
    "watermark": "a map",
    "choice": "str-list",
}
"""0.5.23's ``SamplingParams`` contract (``sglang/api/v1/api_types.py``): every field, in its order, and its type."""


def _unexpected(v: Any) -> str:
    """serde's ``Unexpected`` display of a JSON value (as the contract's error text has it)."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return f"boolean `{'true' if v else 'false'}`"
    if isinstance(v, int):
        return f"integer `{v}`"
    if isinstance(v, float):
        return f"floating point `{v}`"
    if isinstance(v, str):
        return f'string "{v}"'
    return "sequence" if isinstance(v, list) else "map"


def _type_error(v: Any, kind: str) -> str | None:
    """serde's "invalid type" text when ``v`` is not of ``kind`` (None: it is)."""
    is_int = isinstance(v, int) and not isinstance(v, bool)
    checks = {
        "i64": (is_int, "i64"),
        "f64": ((is_int or isinstance(v, float)), "f64"),
        "a string": (isinstance(v, str), "a string"),
        "a boolean": (isinstance(v, bool), "a boolean"),
        "a map": (isinstance(v, dict), "a map"),
    }
    if kind in checks:
        ok, expected = checks[kind]
        return None if ok else f"invalid type: {_unexpected(v)}, expected {expected}"
    if kind == "str-or-list" and not isinstance(v, list):
        ok = isinstance(v, str)
        return (
            None if ok else f"invalid type: {_unexpected(v)}, expected a value or an array of values for StringOrList"
        )
    if not isinstance(v, list):
        return f"invalid type: {_unexpected(v)}, expected a sequence"
    item = "i64" if kind == "i64-list" else "a string"
    return next((e for e in (_type_error(x, item) for x in v) if e), None)


def sampling_contract_error(sp: dict[str, Any], unknown_ok: bool = False) -> str | None:
    """0.5.23's contract violation in one ``sampling_params`` object (an unknown field, unless ``unknown_ok``, or a
    wrong type), or None."""
    for key, value in sp.items():
        kind = SAMPLING_FIELDS_0523.get(key)
        if kind is None and unknown_ok:
            continue
        if kind is None:
            listed = ", ".join(f"`{k}`" for k in SAMPLING_FIELDS_0523)
            return f"unknown field `{key}`, expected one of {listed}"
        if value is not None and kind != "any":
            err = _type_error(value, kind)
            if err:
                return err
    return None


def _number(sp: dict[str, Any], key: str, default: float | None) -> float | None:
    v = sp.get(key, default)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else default


def sampling_range_error(sp: dict[str, Any]) -> str | None:
    """sglang's ``SamplingParams.verify`` on the ranges of the numbers the twin reads, or None."""
    temperature, top_p = _number(sp, "temperature", 1.0), _number(sp, "top_p", 1.0)
    min_p, min_new = _number(sp, "min_p", 0.0), _number(sp, "min_new_tokens", 0.0)
    max_new = _number(sp, "max_new_tokens", None)
    if temperature is not None and (not math.isfinite(temperature) or temperature < 0.0):
        return f"temperature must be a non-negative finite number, got {sp.get('temperature')}."
    if top_p is not None and not 0.0 < top_p <= 1.0:
        return f"top_p must be in (0, 1], got {sp.get('top_p')}."
    if min_p is not None and not 0.0 <= min_p <= 1.0:
        return f"min_p must be in [0, 1], got {sp.get('min_p')}."
    if min_new is not None and min_new < 0:
        return f"min_new_tokens must be in [0, max_new_tokens], got {sp.get('min_new_tokens')}."
    if max_new is not None:
        if max_new < 0:
            return f"max_new_tokens must be at least 0, got {sp.get('max_new_tokens')}."
        if min_new is not None and min_new > max_new:
            return (
                f"min_new_tokens must be in [0, max_new_tokens({sp.get('max_new_tokens')})], "
                f"got {sp.get('min_new_tokens')}."
            )
    return None


def validation_error(message: str) -> Response:
    """FastAPI's request-validation 400 as sglang 0.5.23 rewrites it (``ErrorResponse``)."""
    body = {"object": "error", "message": message, "type": "Bad Request", "param": None, "code": 400}
    return Response(400, body)


def prompt_type_error(body: dict[str, Any]) -> str | None:
    """What is wrong with the types of a ``/generate`` body's prompt fields, naming the field, or None. sglang's
    ``GenerateReqInput`` types them (``text``: a string or a list of strings; ``input_ids``: a list of ints or a list
    of such lists), so FastAPI refuses a wrong one before the route runs (0.5.23: before its schema gate)."""
    text, ids = body.get("text"), body.get("input_ids")
    if text is not None and not isinstance(text, (str, list)):
        return f"text must be a string or a list of strings, got {_unexpected(text)}"
    for i, item in enumerate(text if isinstance(text, list) else []):
        if not isinstance(item, str):
            return f"text[{i}] must be a string, got {_unexpected(item)}"
    if ids is not None and not isinstance(ids, list):
        return f"input_ids must be a list of token ids or a list of such lists, got {_unexpected(ids)}"
    ids = ids or []
    flat = not ids or not isinstance(ids[0], list)
    rows = [("input_ids", ids)] if flat else [(f"input_ids[{i}]", row) for i, row in enumerate(ids)]
    for name, row in rows:
        if not isinstance(row, list):
            return f"{name} must be a list of token ids, got {_unexpected(row)}"
        for j, token in enumerate(row):
            if not isinstance(token, int) or isinstance(token, bool):
                return f"{name}[{j}] must be an integer token id, got {_unexpected(token)}"
    return None


def context_length_error(
    version: str, context_len: int, input_tokens: int, max_new_tokens: Any, reserved: int
) -> str | None:
    """``TokenizerManager._validate_one_request``'s refusal of a prompt, or of a prompt plus ``max_new_tokens``, past
    the context length (no ``--allow-auto-truncate``), or None. 0.5.23 counts the EAGLE draft slots (``reserved``)
    with the input and refuses a total above the context; 0.5.2 refuses one that reaches it."""
    if version == "0.5.23":
        input_tokens += reserved
    if input_tokens >= context_len:
        return f"The input ({input_tokens} tokens) is longer than the model's context length ({context_len} tokens)."
    if not isinstance(max_new_tokens, (int, float)) or isinstance(max_new_tokens, bool):
        return None
    total = max_new_tokens + input_tokens
    if total > context_len or (version != "0.5.23" and total >= context_len):
        return (
            f"Requested token count exceeds the model's maximum context length of {context_len} tokens. "
            f"You requested a total of {total} tokens: {input_tokens} tokens from the input messages and "
            f"{max_new_tokens} tokens for the completion. Please reduce the number of tokens in the input messages "
            "or the completion to fit within the limit."
        )
    return None
