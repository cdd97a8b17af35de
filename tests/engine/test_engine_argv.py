"""The server command line per config and per sglang version, and the meta_info / server_info parsing of both versions."""

from __future__ import annotations

import sys

import pytest

from harness.core.errors import UsageError
from harness.engine.sglang_argv import build_argv, cuda_graph_flag, engine_env, faults_for
from harness.engine.sglang_client import parse_meta_info, parse_server_info, server_info_path
from harness.engine.spec import EngineSpec
from harness.grid import SpecConfig


def flag(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


def test_sglang_052_speculative_flags():
    argv = build_argv(EngineSpec(kind="sglang"), SpecConfig(3, 4, 8), 16, 0.65, 30001)
    assert argv[:3] == [sys.executable, "-m", "sglang.launch_server"]
    assert flag(argv, "--speculative-algorithm") == "EAGLE3"
    assert flag(argv, "--speculative-num-steps") == "3"
    assert flag(argv, "--speculative-eagle-topk") == "4"
    assert flag(argv, "--speculative-num-draft-tokens") == "8"
    assert flag(argv, "--speculative-draft-model-path") == "rescommons/SpecForge-EAGLE3-Llama-3.2-1B-Instruct"
    assert flag(argv, "--model-path") == "unsloth/Llama-3.2-1B-Instruct"
    assert flag(argv, "--attention-backend") == "flashinfer"
    assert flag(argv, "--cuda-graph-max-bs") == "16" and "--cuda-graph-max-bs-decode" not in argv
    assert flag(argv, "--max-running-requests") == "16"
    assert flag(argv, "--mem-fraction-static") == "0.65"
    assert flag(argv, "--dtype") == "float16"
    assert flag(argv, "--log-level") == "warning"
    assert flag(argv, "--port") == "30001" and flag(argv, "--host") == "127.0.0.1"
    assert "--twin-gpu" not in argv


def test_sglang_0523_renamed_cuda_graph_flag_and_topk1_pins_the_same_backend():
    argv = build_argv(EngineSpec(kind="sglang", sglang_version="0.5.23"), SpecConfig(3, 1, 4), 4, 0.55, 30002)
    assert flag(argv, "--cuda-graph-max-bs-decode") == "4" and "--cuda-graph-max-bs" not in argv
    assert flag(argv, "--attention-backend") == "flashinfer"  # topk == 1 too: sglang would pick fa3 on Hopper
    assert (
        cuda_graph_flag("0.5.18") == "--cuda-graph-max-bs" and cuda_graph_flag("0.5.20") == "--cuda-graph-max-bs-decode"
    )
    assert cuda_graph_flag("0.5.20.post1") == "--cuda-graph-max-bs-decode"


def test_baseline_has_no_spec_flags_but_the_pinned_backend():
    argv = build_argv(EngineSpec(kind="sglang"), SpecConfig(0, 0, 0), 1, 0.65, 30003)
    assert not [a for a in argv if a.startswith("--speculative")]
    assert flag(argv, "--attention-backend") == "flashinfer"


def test_backend_override_and_unpinned():
    spec = EngineSpec(kind="sglang", attention_backend="triton")
    assert {
        flag(build_argv(spec, c, 4, 0.65, 1), "--attention-backend") for c in (SpecConfig(0, 0, 0), SpecConfig(3, 4, 8))
    } == {"triton"}
    assert "--attention-backend" not in build_argv(
        EngineSpec(kind="sglang", attention_backend=None), SpecConfig(3, 4, 8), 4, 0.65, 1
    )


def test_spec_rejects_versions_outside_the_supported_range():
    assert EngineSpec(sglang_version="0.5.14").sglang_version == "0.5.14"
    for bad in ("0.4.9", "0.5.24", "0.6.0", "auto", "latest"):
        with pytest.raises(UsageError, match=r"supported range 0\.5\.2 to 0\.5\.23"):
            EngineSpec(sglang_version=bad)


def test_twin_argv_same_flags_plus_twin_options():
    spec = EngineSpec(
        kind="twin",
        twin_gpu_url="http://127.0.0.1:18100",
        sglang_version="0.5.23",
        twin_seed=7,
        twin_faults=("oom@16/5:4:16", "http500@4"),
    )
    real = build_argv(EngineSpec(kind="sglang", sglang_version="0.5.23"), SpecConfig(5, 4, 16), 16, 0.65, 30004)
    twin = build_argv(spec, SpecConfig(5, 4, 16), 16, 0.65, 30004)
    assert twin[:5] == [sys.executable, "-m", "harness", "twin", "engine"]
    assert twin[5 : 5 + len(real) - 3] == real[3:]
    assert flag(twin, "--twin-gpu") == "http://127.0.0.1:18100"
    assert flag(twin, "--emulate-version") == "0.5.23"
    assert flag(twin, "--twin-seed") == "7"
    assert flag(twin, "--twin-fault") == "oom"
    assert flag(build_argv(spec, SpecConfig(3, 4, 8), 4, 0.65, 1), "--twin-fault") == "http500"
    assert "--twin-fault" not in build_argv(spec, SpecConfig(3, 4, 8), 8, 0.65, 1)


def test_env_and_bad_inputs():
    env = engine_env(EngineSpec())
    assert env["SGLANG_RECORD_STEP_TIME"] == "1" and env["SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"] == "1"
    with pytest.raises(UsageError, match="twin GPU URL"):
        build_argv(EngineSpec(kind="twin"), SpecConfig(0, 0, 0), 1, 0.65, 1)
    with pytest.raises(UsageError, match="mem fraction"):
        build_argv(EngineSpec(kind="sglang"), SpecConfig(0, 0, 0), 1, 1.5, 1)
    with pytest.raises(UsageError, match="unknown twin fault"):
        faults_for(EngineSpec(twin_faults=("meltdown",)), SpecConfig(0, 0, 0), 1)


def test_meta_info_052_accept_length_from_verify_count():
    meta = {
        "id": "r1",
        "prompt_tokens": 20,
        "completion_tokens": 512,
        "spec_verify_ct": 200,
        "finish_reason": {"type": "length", "length": 512},
        "e2e_latency": 3.5,
    }
    out = parse_meta_info(meta)
    assert out["accept_length"] == pytest.approx(2.56)
    assert out["finish_reason"] == "length" and out["e2e_latency_s"] == 3.5 and out["rid"] == "r1"


def test_meta_info_0523_accept_length_field_and_absent_without_verify():
    meta = {
        "completion_tokens": 100,
        "spec_verify_ct": 50,
        "spec_accept_length": 2.0,
        "finish_reason": {"type": "length"},
    }
    assert parse_meta_info(meta)["accept_length"] == 2.0
    baseline = parse_meta_info({"completion_tokens": 100, "finish_reason": {"type": "stop", "matched": 2}})
    assert baseline["accept_length"] is None and baseline["finish_reason"] == "stop"


def test_server_info_both_versions():
    assert server_info_path("0.5.2") == "/get_server_info" and server_info_path("0.5.23") == "/server_info"
    info = parse_server_info(
        {
            "internal_states": [{"avg_spec_accept_length": 2.4, "step_time_dict": {"16": [0.02, 0.021]}}],
            "version": "0.5.2",
        }
    )
    assert info.avg_spec_accept_length == 2.4 and info.step_time_dict == {"16": [0.02, 0.021]}
    empty = parse_server_info({"internal_states": [{}]})
    assert empty.avg_spec_accept_length is None and empty.step_time_dict == {}


def test_cpu_device_passes_sglangs_cpu_engine_switches():
    spec = EngineSpec(kind="sglang", sglang_version="0.5.23").on_device("cpu")
    argv = build_argv(spec, SpecConfig(3, 1, 4), 4, 0.5, 30001)
    assert flag(argv, "--device") == "cpu" and flag(argv, "--attention-backend") == "intel_amx"
    assert flag(argv, "--dtype") == "bfloat16"
    assert engine_env(spec)["SGLANG_USE_CPU_ENGINE"] == "1"
    gpu = build_argv(EngineSpec(kind="sglang", sglang_version="0.5.23"), SpecConfig(3, 1, 4), 4, 0.5, 30001)
    assert "--device" not in gpu and "SGLANG_USE_CPU_ENGINE" not in engine_env(EngineSpec(kind="sglang"))
    pinned = EngineSpec(kind="sglang", attention_backend="torch_native").on_device("cpu")
    assert pinned.attention_backend == "torch_native"  # a backend the user chose is kept


def test_real_sglang_logs_every_decode_step_and_the_twin_keeps_its_calibrated_interval():
    from harness.runs.options import SweepOptions

    assert SweepOptions(engine="sglang").server_decode_log_interval == 1
    assert SweepOptions(engine="twin").server_decode_log_interval is None
    assert SweepOptions(engine="twin", decode_log_interval=8).server_decode_log_interval == 8
    spec = EngineSpec(kind="sglang", decode_log_interval=1)
    assert flag(build_argv(spec, SpecConfig(3, 1, 4), 1, 0.5, 30001), "--decode-log-interval") == "1"
    assert "--decode-log-interval" not in build_argv(EngineSpec(kind="sglang"), SpecConfig(3, 1, 4), 1, 0.5, 30001)
