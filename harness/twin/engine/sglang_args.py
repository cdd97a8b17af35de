"""The twin engine's command line: sglang ``launch_server`` flags per emulated version, plus twin extras.

sglang builds its parser with argparse defaults (``allow_abbrev=True``). In 0.5.23 ``--cuda-graph-max-bs`` no longer
exists and, being a prefix of ``--cuda-graph-max-bs-decode`` and ``--cuda-graph-max-bs-prefill``, is an
ambiguous-option error; in 0.5.2 ``--cuda-graph-max-bs-decode`` is unrecognised. The speculative triple follows
sglang's own rules (auto choice, topk == 1 rewrite, rejections).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from harness.grid import SpecConfig

VERSIONS = ("0.5.2", "0.5.23")
DTYPES = ("auto", "half", "float16", "bfloat16", "float", "float32")
ATTENTION_BACKENDS: dict[str, tuple[str, ...]] = {
    # sglang's own choices (checked against the wheels by tests/engine/test_sglang_conformance.py)
    "0.5.2": (
        "aiter",
        "ascend",
        "cutlass_mla",
        "dual_chunk_flash_attn",
        "fa3",
        "flashinfer",
        "flashmla",
        "hybrid_linear_attn",
        "intel_amx",
        "torch_native",
        "triton",
        "trtllm_mha",
        "trtllm_mla",
        "wave",
    ),
    "0.5.23": (
        "aiter",
        "ascend",
        "compressed",
        "cutedsl_mla",
        "dsa",
        "dsv4",
        "fa3",
        "fa4",
        "flashinfer",
        "flashmla",
        "flex_attention",
        "hpc_ops",
        "intel_amx",
        "intel_xpu",
        "llada2_cfg_flashinfer",
        "minicpm_flashattn",
        "minicpm_flashinfer",
        "nsa",
        "qsa",
        "tokenspeed_mla",
        "torch_native",
        "triton",
        "trtllm_mha",
        "trtllm_mla",
        "wave",
    ),
}
SPEC_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE")
"""0.5.2's argparse choices, case-sensitive; 0.5.23 has no choices at parse time (any string; checked later)."""
FAULTS = ("oom", "crash", "runaway", "slow-health", "http500")


def emulated_version(argv: list[str]) -> str:
    pre = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    pre.add_argument("--emulate-version", default="0.5.2")
    ns, _ = pre.parse_known_args(argv)
    return ns.emulate_version


def build_parser(version: str) -> argparse.ArgumentParser:
    if version not in VERSIONS:
        raise SystemExit(
            f"harness twin engine: error: --emulate-version must be one of {', '.join(VERSIONS)}, got {version!r}"
        )
    p = argparse.ArgumentParser(
        prog="harness twin engine", description=f"sglang {version}-compatible twin engine (launch_server flags)"
    )
    a = p.add_argument
    a("--model-path", "--model", dest="model_path", required=True)
    a("--tokenizer-path", default=None)
    a("--host", default="127.0.0.1")
    a("--port", type=int, default=30000)
    a("--dtype", default="auto", choices=DTYPES)
    a("--mem-fraction-static", type=float, default=None)
    a("--max-running-requests", type=int, default=None)
    a("--attention-backend", default=None, choices=ATTENTION_BACKENDS[version])
    a("--log-level", default="info")
    a("--log-level-http", default=None)
    a("--enable-metrics", action="store_true")
    a("--enable-cache-report", action="store_true")
    a("--load-format", default="auto")
    a("--skip-tokenizer-init", action="store_true")
    a("--context-length", type=int, default=None)
    a("--served-model-name", default=None)
    a("--disable-radix-cache", action="store_true")
    a("--disable-overlap-schedule", action="store_true")
    a("--disable-cuda-graph", action="store_true")
    a("--decode-log-interval", type=int, default=40)
    a("--trust-remote-code", action="store_true")
    a("--tp-size", "--tensor-parallel-size", dest="tp_size", type=int, default=1)
    a("--random-seed", type=int, default=None)
    a("--chunked-prefill-size", type=int, default=None)
    a("--quantization", default=None)
    if version == "0.5.2":
        a("--speculative-algorithm", default=None, choices=SPEC_ALGORITHMS)
    else:  # a plain string at parse time; the twin then applies the upper-casing and rules of resolve_spec
        a("--speculative-algorithm", default=None, type=str.upper)
    a("--speculative-draft-model-path", "--speculative-draft-model", dest="speculative_draft_model_path", default=None)
    a("--speculative-num-steps", type=int, default=None)
    a("--speculative-eagle-topk", type=int, default=None)
    a("--speculative-num-draft-tokens", type=int, default=None)
    if version == "0.5.2":
        a("--cuda-graph-max-bs", type=int, default=None)
    else:
        a("--cuda-graph-max-bs-decode", type=int, default=None)
        a("--cuda-graph-max-bs-prefill", type=int, default=None)
        a("--speculative-draft-load-format", default=None)
        a("--incremental-streaming-output", action="store_true")
    # twin extras
    a("--twin-gpu", required=True, help="URL of the twin GPU device (harness twin gpu)")
    a("--emulate-version", default="0.5.2", choices=VERSIONS)
    a(
        "--twin-seed",
        type=int,
        default=None,
        help="seed of this launch (default: derived from the device seed and launch order)",
    )
    a("--twin-fault", default=None, help="comma-separated: " + ",".join(FAULTS) + " (or env TWIN_FAULT)")
    a("--twin-launch-scale", type=float, default=1.0, help="multiplier on the simulated launch time (tests)")
    return p


@dataclass
class SpecChoice:
    config: SpecConfig
    warnings: list[str]


class SpecRejected(ValueError):
    """sglang refuses these flags (raised at argument validation)."""


def resolve_spec(args: argparse.Namespace) -> SpecChoice:
    """sglang's rules for the speculative triple; ``SpecConfig(0,0,0)`` when no algorithm is set."""
    warnings: list[str] = []
    algo = args.speculative_algorithm
    steps, topk, draft = args.speculative_num_steps, args.speculative_eagle_topk, args.speculative_num_draft_tokens
    if algo is None:
        return SpecChoice(SpecConfig(0, 0, 0), warnings)
    if algo not in SPEC_ALGORITHMS:
        raise SpecRejected(
            f"invalid choice for --speculative-algorithm: {algo!r} (choose from {', '.join(SPEC_ALGORITHMS)})"
        )
    if args.speculative_draft_model_path is None:
        raise SpecRejected("--speculative-draft-model-path is required with --speculative-algorithm EAGLE/EAGLE3")
    if steps is None:
        if topk is not None or draft is not None:
            raise SpecRejected(
                "AssertionError: speculative_eagle_topk and speculative_num_draft_tokens must be unset "
                "when speculative_num_steps is unset"
            )
        steps, topk, draft = 5, 4, 8  # LlamaForCausalLM auto choice in both emulated versions
        warnings.append(
            "speculative_num_steps, speculative_eagle_topk and speculative_num_draft_tokens are not set; "
            f"auto-chose ({steps}, {topk}, {draft}) for LlamaForCausalLM"
        )
    if topk is None or draft is None:
        raise SpecRejected(
            "speculative_eagle_topk and speculative_num_draft_tokens must be set with speculative_num_steps"
        )
    if steps < 1 or topk < 1 or draft < 1:
        raise SpecRejected(
            f"speculative_num_steps, speculative_eagle_topk and speculative_num_draft_tokens must be >= 1, "
            f"got ({steps}, {topk}, {draft})"
        )
    if topk == 1 and draft != steps + 1:
        warnings.append(
            "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when speculative_eagle_topk == 1"
        )
        draft = steps + 1
    if topk > 1 and args.attention_backend == "trtllm_mha":
        raise SpecRejected("trtllm_mha backend only supports topk = 1 for speculative decoding")
    return SpecChoice(SpecConfig(steps, topk, draft), warnings)


def resolved_attention_backend(
    pinned: str | None, cfg: SpecConfig, compute_capability: tuple[int, int], version: str
) -> str:
    """The backend real sglang runs for a Llama (MHA) model: the pinned one, else its default for the GPU.

    Hopper (sm90, CUDA >= 12.3): fa3 without speculation or with topk == 1, else flashinfer. Blackwell (sm100):
    trtllm_mha under the same condition in 0.5.23 (0.5.2: flashinfer). Everything else: flashinfer.
    """
    if pinned:
        return pinned
    single = cfg.is_baseline or cfg.topk <= 1
    if compute_capability[0] == 9 and single:
        return "fa3"
    if compute_capability[0] == 10 and single and version != "0.5.2":
        return "trtllm_mha"
    return "flashinfer"


def check_backend_hardware(backend: str | None, compute_capability: tuple[int, int]) -> None:
    """sglang 0.5.2 rejects the TensorRT-LLM backends off Blackwell (sm100) at argument validation."""
    if backend in ("trtllm_mha", "trtllm_mla") and compute_capability[0] != 10:
        name = "MHA" if backend == "trtllm_mha" else "MLA"
        raise SpecRejected(
            f"TRTLLM {name} backend is only supported on Blackwell GPUs (SM100). Please use a different backend."
        )


def oversized_tree(cfg: SpecConfig) -> bool:
    """More draft tokens than the tree has candidates: sglang crashes at CUDA-graph capture (torch.topk)."""
    if cfg.is_baseline:
        return False
    return cfg.draft_tokens - 1 > cfg.topk + (cfg.steps - 1) * cfg.topk * cfg.topk


def cuda_graph_max_bs(args: argparse.Namespace) -> int | None:
    return getattr(args, "cuda_graph_max_bs", None) or getattr(args, "cuda_graph_max_bs_decode", None)


def parse_faults(args: argparse.Namespace, env: dict) -> set[str]:
    text = ",".join(t for t in (args.twin_fault, env.get("TWIN_FAULT")) if t)
    faults = {f.strip() for f in text.split(",") if f.strip()}
    unknown = faults - set(FAULTS)
    if unknown:
        raise SpecRejected(f"unknown --twin-fault {', '.join(sorted(unknown))} (choose from {', '.join(FAULTS)})")
    return faults
