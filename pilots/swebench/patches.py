"""Patch extraction from a model answer, and predictions in swebench's format.

``extract_patch`` follows the spirit of swebench's ``extract_diff`` (tags, then fences, then a raw diff) but,
unlike it, returns None for prose: a result must contain a file header pair (``--- ``/``+++ ``) and a hunk.
"""

from __future__ import annotations

import re
from typing import Any

from harness.grid import SpecConfig

SPECIAL_TOKENS = ("<|eot_id|>", "<|end_of_text|>", "<|eom_id|>", "</s>")
_TAG_RE = re.compile(r"<(patch|diff)>\s*\n?(.*?)(?:</\1>|\Z)", re.S)
_FENCE_RE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)(?:\n```|\Z)", re.S)
_DIFF_START_RE = re.compile(r"^(diff --git |--- a/|--- /dev/null)", re.M)


def _looks_like_diff(text: str) -> bool:
    has_headers = re.search(r"^--- ", text, re.M) and re.search(r"^\+\+\+ ", text, re.M)
    has_hunk = re.search(r"^@@ -\d+(?:,\d+)? \+\d+(?:,\d+)? @@", text, re.M)
    return bool(has_headers and has_hunk)


def _from_start(text: str) -> str | None:
    m = _DIFF_START_RE.search(text)
    if not m:
        return None
    body = text[m.start() :]
    fence = re.search(r"^```", body, re.M)
    if fence:
        body = body[: fence.start()]
    return body


def extract_patch(answer: str | None) -> str | None:
    """The unified diff in a model answer, or None when there is none (prose, empty, broken diff)."""
    if not answer:
        return None
    text = answer
    for tok in SPECIAL_TOKENS:
        text = text.replace(tok, "")
    candidates: list[str] = []
    candidates += [m.group(2) for m in _TAG_RE.finditer(text)]
    fenced = list(_FENCE_RE.finditer(text))
    candidates += [m.group(2) for m in fenced if m.group(1).lower() in ("diff", "patch")]
    candidates += [m.group(2) for m in fenced if m.group(1).lower() not in ("diff", "patch")]
    candidates.append(text)
    for cand in candidates:
        body = _from_start(cand)
        if body and _looks_like_diff(body):
            body = body.rstrip("\n") + "\n"
            return body
    return None


def model_name(config_name: str, config: SpecConfig) -> str:
    """``model_name_or_path`` of a config's predictions (one name per config, as in the published pilot)."""
    base = f"energy-llms-swebench-{config_name.replace('_', '-')}"
    return base if config.is_baseline else f"{base}-{config.steps}-{config.topk}-{config.draft_tokens}"


def prediction(instance_id: str, config_name: str, config: SpecConfig, patch: str | None) -> dict[str, Any]:
    """One swebench prediction; a missing patch is the empty string (swebench counts it as an empty patch)."""
    return {
        "instance_id": instance_id,
        "model_name_or_path": model_name(config_name, config),
        "model_patch": patch or "",
    }
