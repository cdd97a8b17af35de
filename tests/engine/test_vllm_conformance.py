"""Every argv a vLLM sweep can emit, judged by the real vLLM's own parser (the newest on PyPI and one older minor),
installed --no-deps in cached venvs (tests/_sglang_helpers.conformance_python; the first run on a machine builds them)."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from _sglang_helpers import conformance_python

from harness.engine.sglang_argv import build_argv
from harness.engine.spec import EngineSpec
from harness.engine.vllm_argv import VLLM_SERVE, VLLM_SUPPORTED_RANGE, VLLM_TWIN_VERSIONS, vllm_configs
from harness.grid import ACTIONS, BASELINE
from harness.twin.engine.vllm_args import SPEC_KEYS

HERE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "vllm_conformance")
REPO_PROBE = os.path.join(HERE, "probe.py")
VERSIONS = list(VLLM_SUPPORTED_RANGE)
"""The vLLM versions checked: both ends of the supported range (the oldest minor and the newest)."""
TREE_READERS = {
    "0.11.0": ["config/speculative.py", "v1/attention/backends/tree_attn.py", "v1/spec_decode/eagle.py"],
    "0.34.0": [],
}
"""The vLLM files that read ``speculative_token_tree``: in 0.11.0 the config, the tree attention backend and the
EAGLE drafter, never the model runner, its RejectionSampler or the scheduler (the drafts are verified as a chain),
hence no tree configs on vLLM (docs/engines.md, "Why no tree configs on vLLM")."""


def sweep_argvs(version: str) -> list[list[str]]:
    """The flags of every (config, batch size) a vLLM sweep launches, at both mem fractions of the ladder."""
    spec = EngineSpec(kind="vllm", vllm_version=version, python="python", extra_args=())
    out = []
    for config in [BASELINE, *vllm_configs(list(ACTIONS))]:
        for bs in (1, 4, 8, 16):
            for mf in (0.65, 0.55):
                argv = build_argv(spec, config, bs, mf, 30000)
                assert tuple(argv[1:4]) == VLLM_SERVE
                out.append(argv[4:])
    return out


@pytest.mark.parametrize("version", VERSIONS)
def test_every_vllm_sweep_argv_parses_in_real_vllm(version: str, tmp_path) -> None:
    python = conformance_python(version, "vllm")
    argvs = sweep_argvs(version)
    spec = '{"method":"eagle3","model":"d","num_speculative_tokens":2,%s}'
    extra = [
        [*argvs[2], "--speculative-config", spec % '"bogus":1'],
        [*argvs[0], "--mem-fraction-static", "0.6"],
        [*argvs[2], "--speculative-config", spec % '"speculative_token_tree":"[(0,), (1,)]"'],
    ]
    env = {
        **os.environ,
        "VLLM_TARGET_DEVICE": "cpu",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "PYTHONPATH": os.path.join(HERE, "cpu_platform"),
    }  # vLLM 0.11's CPU platform: see probe.py
    done = subprocess.run(
        [str(python), REPO_PROBE],
        input=json.dumps(argvs + extra),
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    verdict = json.loads(done.stdout.strip().splitlines()[-1])
    assert verdict["version"] == version and verdict["platform"] == "CpuPlatform"
    results = verdict["results"]
    for argv, res in zip(argvs, results):
        assert res["ok"], (argv, res["error"])
        flags = dict(zip(argv[::2], argv[1::2]))
        assert res["max_num_seqs"] == int(flags["--max-num-seqs"]) and res["model"] == flags["--model"]
        if "--speculative-config" in flags:
            assert res["speculative_config"] == json.loads(flags["--speculative-config"])
    unknown_key, sglang_flag, static_tree = results[len(argvs) :]
    assert not unknown_key["ok"] and "bogus" in unknown_key["error"]  # the probe can fail: a real verdict
    assert not sglang_flag["ok"] and "--mem-fraction-static" in " ".join(sglang_flag["error"])
    # vLLM's own tree knob (a static path list, docs/engines.md): 0.11 has it, the newest does not
    assert static_tree["ok"] == (version == "0.11.0"), static_tree
    assert verdict["tree_readers"] == TREE_READERS[version], "tree verification changed: revisit docs/engines.md"
    if version in VLLM_TWIN_VERSIONS:  # the twin takes no speculative-config key that the vLLM it emulates lacks
        assert SPEC_KEYS <= set(verdict["spec_fields"]), sorted(SPEC_KEYS - set(verdict["spec_fields"]))
