"""``harness serve``'s routes beyond OpenAI's three (issue 38 B4): sglang's native ``/generate`` (what sglang's
bench_serving drives), the front's ``/metrics`` and ``GET /v1/models/{id}``; and the engine's latency histograms."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import openai
import pytest
from _serve_helpers import PROMPTS, B, serve_session
from prometheus_client.parser import text_string_to_metric_families


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


def _value(samples: dict, name: str, **labels: str) -> float:
    want = {k: v for k, v in labels.items()}
    hits = [v for (n, lab), v in samples.items() if n == name and want.items() <= dict(lab).items()]
    assert len(hits) == 1, (name, labels, hits)
    return hits[0]


def _wrongly_typed_chat_messages_are_a_400(url: str) -> None:
    """Issue 45: a string, a list of numbers, a message without a string or list content were answered 200 (the
    engine templated whatever came); the front refuses them, naming the field, before any engine sees them."""
    for messages, says in (
        ("hello", "messages must be a non-empty list of message objects, got a string"),
        ([], "messages must be a non-empty list of message objects, got a list"),
        ([1, 2], "messages[0] must be an object with role and content, got a number"),
        ([{"role": "user"}], "messages[0].content must be a string or a list of content parts, got null"),
        ([{"role": "user", "content": "hi"}, {"role": "user", "content": 5}], "messages[1].content must be a string"),
        ([{"role": "user", "content": {"text": "hi"}}], "messages[0].content must be a string or a list"),
        ([{"content": "hi"}], "messages[0].role must be a string, got null"),
    ):
        r = httpx.post(url + "/v1/chat/completions", json={"messages": messages, "max_tokens": 4}, timeout=30)
        assert r.status_code == 400, (messages, r.text)
        assert r.json()["error"]["message"].startswith(says) and r.json()["error"]["param"] == "messages", r.text
    parts = [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
    ok = httpx.post(url + "/v1/chat/completions", json={"messages": parts, "max_tokens": 4}, timeout=30)
    assert ok.status_code == 200, ok.text


def test_generate_models_by_id_and_metrics(tmp_path: Path) -> None:
    args = ("--enable-metrics", "--served-model-name", "twin-llama")
    with serve_session(tmp_path, {1: B}, engine_args=args) as s:
        plain = httpx.post(s.url + "/generate", json={"text": PROMPTS[0], "sampling_params": {"max_new_tokens": 8}})
        assert plain.status_code == 200, plain.text
        out = plain.json()
        assert out["text"] and out["meta_info"]["completion_tokens"] == 8 and len(out["output_ids"]) == 8

        chunks = []
        body = {"text": PROMPTS[1], "sampling_params": {"max_new_tokens": 6, "ignore_eos": True}, "stream": True}
        with httpx.stream("POST", s.url + "/generate", json=body, timeout=60) as r:
            assert r.status_code == 200
            chunks = [line[6:] for line in r.iter_lines() if line.startswith("data: ")]
        assert chunks[-1] == "[DONE]" and len(chunks) >= 2
        last = json.loads(chunks[-2])
        assert last["meta_info"]["completion_tokens"] == 6 and last["meta_info"]["finish_reason"]["type"] == "length"
        bad = httpx.post(s.url + "/generate", json={"sampling_params": {"max_new_tokens": 4}})
        assert bad.status_code == 400  # the engine's own answer, passed on
        assert httpx.post(s.url + "/generate", content=b"[1, 2]").status_code == 400  # the front's own

        client = openai.OpenAI(base_url=s.url + "/v1", api_key="unused", max_retries=0)
        assert [m.id for m in client.models.list()] == ["twin-llama"]
        card = client.models.retrieve("twin-llama")
        assert card.id == "twin-llama" and card.object == "model"
        with pytest.raises(openai.NotFoundError):
            client.models.retrieve("no-such-model")
        missing = httpx.get(s.url + "/v1/models/org/no-such-model")  # ids with a slash reach the route too
        assert missing.status_code == 404 and missing.json()["error"]["code"] == "model_not_found"

        front = httpx.get(s.url + "/metrics")
        assert front.status_code == 200 and front.headers["content-type"].startswith("text/plain")
        fs = _samples(front.text)
        assert _value(fs, "harness_serve_requests_total", route="/generate", code="200") == 2
        assert _value(fs, "harness_serve_requests_total", route="/generate", code="400") == 2
        assert _value(fs, "harness_serve_completion_tokens_total") == 8 + 6
        assert _value(fs, "harness_serve_instance_up", config="3:2:4") == 1
        assert _value(fs, "harness_serve_routed", config="3:2:4") == 1

        inst = s.pool.get(B)
        text = httpx.get(inst.base_url + "/metrics").text
        for fam in (
            "time_to_first_token",
            "inter_token_latency",
            "request_time_per_output_token",
            "e2e_request_latency",
        ):
            assert f"# TYPE sglang:{fam}_seconds histogram" in text
        es = _samples(text)
        requests = _value(es, "sglang:e2e_request_latency_seconds_count")
        assert requests >= 2 and _value(es, "sglang:time_to_first_token_seconds_count") == requests
        assert _value(es, "sglang:time_to_first_token_seconds_bucket", le="+Inf") == requests
        generated = _value(es, "sglang:generation_tokens_total")
        # one inter-token interval per token after each request's first, as sglang counts them
        assert _value(es, "sglang:inter_token_latency_seconds_count") == generated - requests
        assert (
            0
            < _value(es, "sglang:inter_token_latency_seconds_sum")
            < _value(es, "sglang:e2e_request_latency_seconds_sum")
        )
        _wrongly_typed_chat_messages_are_a_400(s.url)
