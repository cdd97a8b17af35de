"""``harness serve`` in front of two real sglang 0.5.23 instances on this CPU (no_spec and EAGLE3 (3,1,4)), judged
by the official ``openai`` client: chat and completions, streamed and not, and a load-driven switch in the log."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import openai
from _engine_helpers import processes_mentioning

REPO = Path(__file__).resolve().parents[2]
STANDIN = REPO / "tests" / "engines_cpu" / "standin"


def _wait_url(proc: subprocess.Popen, timeout_s: float) -> str:
    """The URL of the ``serving on URL`` line of the front's stdout."""
    assert proc.stdout is not None
    deadline, buf = time.monotonic() + timeout_s, b""
    while time.monotonic() < deadline and proc.poll() is None:
        ready, _, _ = select.select([proc.stdout], [], [], 0.5)
        if ready:
            buf += os.read(proc.stdout.fileno(), 4096)
            for line in buf.decode(errors="replace").splitlines():
                if line.startswith("serving on "):
                    return line.split()[2]
    raise AssertionError(f"no 'serving on' line in {timeout_s} s (rc {proc.poll()}): {buf.decode()[-2000:]}")


def test_serve_in_front_of_two_real_instances_with_the_openai_client(engines_python, tiny_models, tmp_path):
    out = tmp_path / "serve"
    argv = [
        str(engines_python), "-m", "harness", "serve", "--engine", "sglang", "--engine-device", "cpu",
        "--model-path", str(tiny_models["target"]), "--draft-model-path", str(tiny_models["draft-full"]),
        "--picks", "1=0:0:0,4=3:1:4", "--instances", "all", "--max-batch-size", "4", "--port", "0", "--out", str(out),
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{STANDIN}"}
    err_log = open(tmp_path / "serve.err", "w")
    proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=err_log)
    try:
        url = _wait_url(proc, 420)
        client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=120)
        model = client.models.list().data[0].id
        chat = client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": "hello there"}], max_tokens=8, temperature=0
        )
        assert chat.usage is not None and chat.usage.completion_tokens > 0 and chat.choices[0].message is not None
        text = client.completions.create(model=model, prompt="the cat", max_tokens=8, temperature=0)
        assert text.usage is not None and text.usage.completion_tokens > 0 and text.choices[0].finish_reason

        def streamed(i: int) -> int:
            if i % 2:
                chunks = client.completions.create(model=model, prompt=f"story {i}", max_tokens=24, stream=True)
                return sum(1 for c in chunks if c.choices and c.choices[0].text is not None)
            chunks = client.chat.completions.create(
                model=model, messages=[{"role": "user", "content": f"story {i}"}], max_tokens=24, stream=True
            )
            return sum(1 for c in chunks if c.choices and c.choices[0].delta.content is not None)

        with ThreadPoolExecutor(6) as pool:  # four and more at once: the picks say (3,1,4)
            counts = list(pool.map(streamed, range(12)))
        assert all(n > 0 for n in counts), counts
        log = [json.loads(line) for line in (out / "switches.jsonl").read_text().splitlines() if line.strip()]
        if not Path("/sys/class/powercap").is_dir():  # no RAPL: no band to hold, picks follow the load (open loop)
            assert any(e.get("event") == "open_loop" and "RAPL" in e["why"] for e in log), log
        assert [e["new"] for e in log if e.get("reason") == "load_change"][:1] == [[3, 1, 4]], log
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=90)
            except subprocess.TimeoutExpired:
                proc.kill()
        err_log.close()
    assert proc.returncode == 0, (tmp_path / "serve.err").read_text()[-3000:]
    err = (tmp_path / "serve.err").read_text()
    assert "switch " in err and "stopping: served" in err, err[-2000:]
    deadline = time.monotonic() + 30
    while processes_mentioning(str(tiny_models["target"])) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not processes_mentioning(str(tiny_models["target"]))
