"""The twin engine's vLLM mode: ``vllm.entrypoints.openai.api_server`` flags (the subset the harness emits plus
common ones) and the ``--speculative-config`` rules, translated into the twin's own (sglang-shaped) launch arguments.

``harness twin engine --emulate vllm --emulate-version 0.34.0 <vLLM flags> --twin-gpu URL``. vLLM's EAGLE3 is a
chain: ``num_speculative_tokens = k`` runs on the twin as ``SpecConfig(k, 1, k + 1)``, the same physics as sglang's
topk == 1 chain. A rejected speculative config logs vLLM's kind of error and exits 1; a flag error exits 2.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from harness.engine.vllm_argv import VLLM_TWIN_VERSIONS
from harness.twin.engine.sglang_args import DTYPES, FAULTS, SpecRejected

SPEC_METHODS = ("eagle", "eagle3", "ngram", "medusa", "mlp_speculator", "draft_model", "deepseek_mtp", "mtp", "suffix")
"""Methods vLLM knows; the twin runs ``eagle3`` (and ``eagle``) and refuses the others as unsupported."""
SPEC_KEYS = frozenset(
    {
        "method",
        "model",
        "num_speculative_tokens",
        "draft_tensor_parallel_size",
        "quantization",
        "max_model_len",
        "revision",
        "code_revision",
        "draft_model_config",
        "parallel_drafting",
    }
)
"""``SpeculativeConfig`` fields the twin takes: all of them fields of the emulated vLLM's (tests/engine/test_vllm_conformance.py);
any other key, ``speculative_token_tree`` included (0.34.0 has no token tree), is refused as vLLM refuses it."""
UVICORN_LEVELS = ("critical", "error", "warning", "info", "debug", "trace")


def emulated_api(argv: list[str]) -> str:
    """``vllm`` when the argv asks for the vLLM mode (``--emulate vllm``), else ``sglang``."""
    pre = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    pre.add_argument("--emulate", default="sglang")
    ns, _ = pre.parse_known_args(argv)
    return str(ns.emulate)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="harness twin engine --emulate vllm", description="vLLM-compatible twin engine (api_server flags)"
    )
    a = p.add_argument
    a("model_tag", nargs="?", default=None, help="the model (as `vllm serve MODEL`)")
    a("--model", default=None)
    a("--host", default=None)
    a("--port", type=int, default=8000)
    a("--dtype", default="auto", choices=DTYPES)
    a("--gpu-memory-utilization", type=float, default=0.9)
    a("--max-num-seqs", type=int, default=None)
    a("--max-model-len", type=int, default=None)
    a("--served-model-name", nargs="+", default=None)
    a("--seed", type=int, default=None)
    a("--uvicorn-log-level", default="info", choices=UVICORN_LEVELS)
    a("--speculative-config", type=json.loads, default=None)
    a("--enforce-eager", action="store_true")
    a("--trust-remote-code", action="store_true")
    a("--tensor-parallel-size", "-tp", type=int, default=1)
    # twin extras
    a("--twin-gpu", required=True)
    a("--emulate", choices=("vllm",), default="vllm")
    a("--emulate-version", default=VLLM_TWIN_VERSIONS[-1], choices=VLLM_TWIN_VERSIONS)
    a("--twin-seed", type=int, default=None)
    a("--twin-fault", default=None, help="comma-separated: " + ",".join(FAULTS) + " (or env TWIN_FAULT)")
    a("--twin-launch-scale", type=float, default=1.0)
    return p


def chain_length(spec: Any) -> int | None:
    """``num_speculative_tokens`` of a valid EAGLE(3) ``--speculative-config``; None without one; else SpecRejected."""
    if spec is None:
        return None
    if not isinstance(spec, dict):
        raise SpecRejected(f"--speculative-config must be a JSON object, got {json.dumps(spec)}")
    unknown = sorted(set(spec) - SPEC_KEYS)
    if unknown:
        raise SpecRejected(f"pydantic ValidationError: SpeculativeConfig: unexpected keyword argument {unknown[0]!r}")
    method = spec.get("method")
    if method not in SPEC_METHODS:
        raise SpecRejected(f"SpeculativeConfig: method {method!r} is not one of {', '.join(SPEC_METHODS)}")
    if method not in ("eagle", "eagle3"):
        raise SpecRejected(f"the twin engine emulates EAGLE speculation only, not method {method!r}")
    if not spec.get("model"):
        raise SpecRejected('SpeculativeConfig: a draft model is required for method eagle3 ("model")')
    k = spec.get("num_speculative_tokens")
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise SpecRejected(f"SpeculativeConfig: num_speculative_tokens must be a positive integer, got {k!r}")
    return k


def to_twin_argv(args: argparse.Namespace) -> list[str]:
    """The twin's own launch arguments for vLLM ``args`` (raises SpecRejected for a config vLLM refuses)."""
    model = args.model or args.model_tag
    if not model:
        raise SpecRejected("no model: pass --model MODEL")
    k = chain_length(args.speculative_config)
    bs = args.max_num_seqs or 256
    out = [
        "--model-path",
        model,
        "--host",
        args.host or "0.0.0.0",
        "--port",
        str(args.port),
        "--dtype",
        args.dtype,
        "--mem-fraction-static",
        f"{args.gpu_memory_utilization:g}",
        "--max-running-requests",
        str(bs),
        "--cuda-graph-max-bs",
        str(min(bs, 512)),
        "--log-level",
        args.uvicorn_log_level,
        "--enable-metrics",
        "--twin-gpu",
        args.twin_gpu,
        "--twin-launch-scale",
        f"{args.twin_launch_scale:g}",
        "--emulate-version",
        "0.5.2",
    ]
    if args.served_model_name:
        out += ["--served-model-name", args.served_model_name[0]]
    if args.max_model_len:
        out += ["--context-length", str(args.max_model_len)]
    if args.twin_seed is not None:
        out += ["--twin-seed", str(args.twin_seed)]
    if args.twin_fault:
        out += ["--twin-fault", args.twin_fault]
    if k is not None:
        out += [
            "--speculative-algorithm",
            "EAGLE3",
            "--speculative-draft-model-path",
            args.speculative_config["model"],
            "--speculative-num-steps",
            str(k),
            "--speculative-eagle-topk",
            "1",
            "--speculative-num-draft-tokens",
            str(k + 1),
        ]
    return out
