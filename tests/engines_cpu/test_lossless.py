"""The real sglang 0.5.23 EAGLE3 on this CPU is lossless: at temperature 0 its output equals the output without
speculation token for token, with partial acceptance at topk 1 and topk 4 (so rejections and non-first tree
branches are exercised), and the accept lengths are what the tiny drafts are built for (4.0 / partial / ~1).

One server without speculation gives the reference; each speculative config costs one more launch (~35-45 s here).
Run with `make engines-cpu` (or HARNESS_ENGINES_PYTHON=<engines venv python> pytest tests/engines_cpu).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from _prompts import PROMPTS
from _server import http_json, start_sglang

MAX_NEW_TOKENS = 40
SAMPLING = {"temperature": 0, "max_new_tokens": MAX_NEW_TOKENS}


def generate(base: str) -> tuple[list[list[int]], list[dict]]:
    """Greedy output ids and meta_info of every prompt: all prompts as one batch, then the first one alone
    (a radix-cache hit); the lone request's output must equal its batched one."""
    batch = http_json(base + "/generate", {"text": PROMPTS, "sampling_params": SAMPLING})
    single = http_json(base + "/generate", {"text": PROMPTS[0], "sampling_params": SAMPLING})
    ids = [item["output_ids"] for item in batch]
    assert single["output_ids"] == ids[0], "a lone request decoded differently from the same prompt in a batch"
    return ids, [item["meta_info"] for item in batch] + [single["meta_info"]]


@pytest.fixture(scope="module")
def reference(engines_python: Path, tiny_models: dict[str, Path], server_logs: Path) -> list[list[int]]:
    """Greedy outputs of the target without speculation."""
    with start_sglang(engines_python, tiny_models["target"], log_path=server_logs / "no-spec.log") as base:
        ids, _ = generate(base)
        chat = http_json(
            base + "/v1/chat/completions",
            {"messages": [{"role": "user", "content": PROMPTS[1]}], "temperature": 0, "max_tokens": 8},
        )
    assert all(len(out) == MAX_NEW_TOKENS for out in ids), [len(out) for out in ids]
    assert len({tuple(out) for out in ids}) == len(PROMPTS), "the target should not answer every prompt alike"
    assert chat["choices"][0]["message"]["content"].strip(), chat
    return ids


def accept_lengths(base: str, metas: list[dict]) -> tuple[list[float], float]:
    """Per-request spec_accept_length from meta_info and the server's avg_spec_accept_length."""
    per_request = [float(m["spec_accept_length"]) for m in metas]
    info = http_json(base + "/get_server_info")
    return per_request, float(info["internal_states"][0]["avg_spec_accept_length"])


# (draft, (steps, topk, draft tokens), lowest and highest allowed mean accept length)
CASES = [
    ("draft-partial", (3, 1, 4), 1.3, 3.7),
    ("draft-partial", (3, 4, 8), 1.3, 3.9),
    ("draft-full", (3, 1, 4), 4.0, 4.0),
    ("draft-none", (3, 1, 4), 1.0, 1.2),
]


@pytest.mark.parametrize(
    ("draft", "config", "low", "high"), CASES, ids=[f"{d}-{'-'.join(map(str, c))}" for d, c, _, _ in CASES]
)
def test_eagle3_matches_no_speculation(
    engines_python: Path,
    tiny_models: dict[str, Path],
    server_logs: Path,
    reference: list[list[int]],
    draft: str,
    config: tuple[int, int, int],
    low: float,
    high: float,
) -> None:
    log = server_logs / f"{draft}-{'-'.join(map(str, config))}.log"
    with start_sglang(
        engines_python, tiny_models["target"], draft=tiny_models[draft], config=config, log_path=log
    ) as base:
        http_json(base + "/flush_cache", None)  # resets the server's accept-length average (warm-up included)
        ids, metas = generate(base)
        per_request, server_avg = accept_lengths(base, metas)
    for prompt, want, got in zip(PROMPTS, reference, ids):
        assert got == want, f"EAGLE3 {draft} {config} changed the greedy output of {prompt!r}"
    mean = sum(per_request) / len(per_request)
    print(f"{draft} {config}: accept length per request {per_request}, mean {mean:.3f}, server {server_avg:.3f}")
    assert low - 1e-6 <= mean <= high + 1e-6, (mean, per_request)
    assert low - 1e-6 <= server_avg <= high + 1e-6, (server_avg, per_request)
    if low == high:  # every draft token accepted: exactly `steps + 1` tokens per verify
        assert all(abs(x - low) < 1e-6 for x in per_request), per_request
