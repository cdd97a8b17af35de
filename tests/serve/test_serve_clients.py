"""``harness serve`` judged by the official ``openai`` client (issue 38 B), and the operator's guard it shares with
sglang and vLLM (``--api-key``, B5): every route but /health needs the key; beyond loopback it is required."""

from __future__ import annotations

from pathlib import Path

import httpx
import openai
import pytest
from _serve_helpers import PROMPTS, B, serve_session

from harness.cli import main
from harness.grid import BASELINE


def test_the_openai_client_with_an_api_key(tmp_path: Path) -> None:
    with serve_session(tmp_path, {1: B}, api_key="sk-test-123") as s:
        client = openai.OpenAI(base_url=s.url + "/v1", api_key="sk-test-123", max_retries=0)
        chat = client.chat.completions.create(
            model="default", messages=[{"role": "user", "content": PROMPTS[0]}], max_tokens=12
        )
        assert chat.choices[0].message.content and chat.usage is not None and chat.usage.completion_tokens == 12
        text = client.completions.create(model="default", prompt=PROMPTS[1], max_tokens=6)
        assert text.choices[0].text and text.choices[0].finish_reason == "length"
        chunks = list(
            client.chat.completions.create(
                model="default", messages=[{"role": "user", "content": "hi"}], max_tokens=5, stream=True
            )
        )
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) and chunks[-1].choices
        assert [m.id for m in client.models.list()][0].startswith("twin:")

        wrong = openai.OpenAI(base_url=s.url + "/v1", api_key="sk-wrong", max_retries=0)
        with pytest.raises(openai.AuthenticationError):
            wrong.chat.completions.create(model="default", messages=[{"role": "user", "content": "hi"}], max_tokens=4)
        assert httpx.get(s.url + "/serve/state").status_code == 401  # every route but health
        assert httpx.get(s.url + "/health").status_code == 200


def test_serving_beyond_loopback_needs_a_key(capsys) -> None:
    code = main(["serve", "--picks", "1=0:0:0", "--host", "0.0.0.0"])
    err = capsys.readouterr().err
    assert code == 2 and "--api-key" in err and "beyond this machine" in err


def test_a_stream_cut_by_a_dead_instance_ends_in_an_error_clients_count(tmp_path: Path) -> None:
    """Issue 38 B3: when the instance behind a stream died, the front's error event had no type or code and no
    ``[DONE]`` followed, so load tools (aiperf) counted the request as a success with no output."""
    import json
    import os
    import signal

    with serve_session(tmp_path, {1: B}) as s:
        events: list[str] = []
        with httpx.stream(
            "POST", s.url + "/v1/completions", json={"prompt": PROMPTS[0], "max_tokens": 4000, "stream": True, "ignore_eos": True},
            timeout=60,
        ) as r:  # fmt: skip
            for line in r.iter_lines():
                if line.startswith("data: "):
                    events.append(line[6:])
                    if len(events) == 3:  # tokens have started: only now is the instance's death the client's
                        server = s.pool.get(B).server
                        assert server is not None
                        os.kill(server.pid, signal.SIGKILL)
        assert events[-1] == "[DONE]" and len(events) < 1000, events[-3:]  # cut short: 4000 tokens never came
        err = json.loads(events[-2])["error"]
        assert err["type"] == "server_error" and err["code"] == 502 and "failed mid-stream" in err["message"]
        client = openai.OpenAI(base_url=s.url + "/v1", api_key="unused", max_retries=0)
        with pytest.raises(openai.APIError):  # the official client raises on such a stream, as it should
            stream = client.completions.create(
                model="default", prompt=PROMPTS[0], max_tokens=4000, stream=True, extra_body={"ignore_eos": True}
            )
            for i, _ in enumerate(stream):
                if i == 2:
                    server = s.pool.get(BASELINE).server
                    assert server is not None
                    os.kill(server.pid, signal.SIGKILL)
