"""What the real-load-tool tests share (tests/clients/conftest.py has the fixtures): the load, the tokenizer path,
the servers as ``Target``s. About the tests: the real load tools (``make clients``, docs/serve.md): the official openai client, NVIDIA's aiperf,
guidellm and sglang's bench_serving, each a process of its own venv, against a twin engine and ``harness serve`` on
loopback.

They run only when HARNESS_CLIENTS_PYTHON names the clients venv's interpreter (``.ci/clients.sh`` builds the venv
from requirements-clients.txt and sets it); otherwise every test here is skipped, so the default suite needs none
of the tools. bench_serving runs with the engines-cpu venv's interpreter (HARNESS_ENGINES_PYTHON), the sglang that
ships it. The test process imports none of the tools: it starts them, reads their own export files, and asks the
servers what they served.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx
from _loadgen import Recorder, client, one_request
from prometheus_client.parser import text_string_to_metric_families

from harness.grid import SpecConfig

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
TOKENIZER = REPO / "harness" / "data" / "twin_tokenizer"
CLIENTS_PYTHON_ENV = "HARNESS_CLIENTS_PYTHON"
SKIP_REASON = "real load tools: run `make clients` (builds their pinned venv)"
MODEL_NAME = "twin-llama"
CONFIG = SpecConfig(3, 4, 8)
MODEL = ["--model-path", "unsloth/Llama-3.2-1B-Instruct", "--dtype", "float16"]
SPEC = ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path",
        "rescommons/SpecForge-EAGLE3-Llama-3.2-1B-Instruct", "--speculative-num-steps", "3",
        "--speculative-eagle-topk", "4", "--speculative-num-draft-tokens", "8"]  # fmt: skip
# one bounded load for every tool: 16 requests, 4 at a time, 64 prompt tokens, 32 output tokens (ignore_eos)
REQUESTS, CONCURRENCY, ISL, OSL = 16, 4, 64, 32
TIME_SCALE = 1.0  # wall seconds are twin seconds: every tool's tok/s is the engine's


@dataclass
class Target:
    """A server a tool is pointed at, and the engines behind it (whose counters say what was served)."""

    name: str
    url: str
    engines: list[str]
    sampler: str | None = None  # a sampler on the twin GPU (the engine fixture's): dcgm-exporter names on /metrics

    def generated(self) -> float:
        """Completion tokens the engines behind it have generated so far (their ``/metrics``)."""
        total = 0.0
        for url in self.engines:
            for fam in text_string_to_metric_families(httpx.get(url + "/metrics", timeout=10).text):
                total += sum(s.value for s in fam.samples if s.name == "sglang:generation_tokens_total")
        return total

    def harness_tok_s(self, prompt: str) -> float:
        """The harness's own figure for the same load: its load generator's closed loop (``tests/_loadgen.py``, ``one_request``:
        /v1/completions, ignore_eos), REQUESTS requests CONCURRENCY at a time, completion tokens / wall span."""
        rec = Recorder()
        with client(self.url) as http, ThreadPoolExecutor(CONCURRENCY) as pool:
            done = list(pool.map(lambda _: one_request(http, prompt, OSL, rec), range(REQUESTS)))
        assert all(d.ok for d in done), [d.error for d in done if not d.ok]
        return sum(d.tokens for d in done) / (max(d.end_s for d in done) - min(d.start_s for d in done))
