"""Pure-PyTorch STAND-IN for sglang's compiled ``sgl_kernel`` CPU ops -- test support code of this repository
(eagle-energy-harness, ``tests/engines_cpu``), NOT sglang's real kernels and not part of sglang.

Why: sglang 0.5.23 runs EAGLE3 speculative decoding on a CPU through its ``intel_amx`` backend, which calls about
twenty ops from the ``sgl_kernel`` extension (``sgl-kernel/csrc/cpu`` in sglang's repository). PyPI only ships
CUDA builds of that extension, so the real-engine tests put this directory on PYTHONPATH instead. Every op here
is written from sglang's own call sites and its Triton reference kernels, computes in float32 with plain tensor
ops, and is correct but slow; its docstring names the call site it stands in for. Modules, one concern each:

- ``attention``: ``decode_attention_cpu``, ``extend_attention_cpu`` (paged attention, EAGLE tree mask);
- ``tree``: ``build_tree_kernel_efficient_cpu``, ``verify_tree_greedy_cpu``, ``build_draft_decode_metadata_cpu``;
- ``cache``: ``assign_req_to_token_pool_cpu``, ``assign_extend_cache_locs_cpu``,
  ``assign_draft_cache_locs_contiguous_cpu``, ``fill_bonus_tokens_cpu``, ``fill_accept_out_cache_loc_cpu``,
  ``copy_all_layer_kv_cache_cpu``, ``store_cache_cpu``;
- ``dense``: ``convert_weight_packed``, ``weight_packed_linear``, ``rmsnorm_cpu``, ``fused_add_rmsnorm_cpu``,
  ``silu_and_mul_cpu``, ``rotary_embedding_cpu``, ``init_cpu_threads_env``, ``initialize``;
- ``unsupported``: placeholders for the few names sglang binds at import time but this path never calls
  (calling one raises NotImplementedError).

How sglang is made to use it (the AMX probe): sglang takes the ``intel_amx`` path only when
``cpu_has_amx_support()`` holds, i.e. ``sglang.srt.utils.common.is_amx_tile_supported`` (set from
``torch.cpu._is_amx_tile_supported()`` when that module is imported) and ``hasattr(torch.ops.sgl_kernel,
"convert_weight_packed")``. Without it sglang falls back to ``torch_native`` attention, which refuses EAGLE. These
ops need no AMX, so on any x86 CPU:

1. ``../sitecustomize.py`` (run at start-up by every Python process that has this directory on PYTHONPATH, and only
   when ``SGLANG_USE_CPU_ENGINE=1``) sets that one sglang module global to True right after sglang imports it.
   torch's own probe is left alone (torch inductor reads it to decide whether to emit AMX instructions);
2. importing this package answers the second half: it sets each op as an attribute of the ``torch.ops.sgl_kernel``
   namespace (and of this module, for ``from sgl_kernel import ...``). Only the ops listed above exist, so
   sglang's other ``hasattr(torch.ops.sgl_kernel, ...)`` feature probes stay false.

The ops are plain Python functions, not ``torch.library`` registrations, so each is wrapped in
``torch.compiler.disable``: torch.compile (if enabled) runs them eagerly instead of tracing into them.

On import inside a process with ``SGLANG_USE_CPU_ENGINE=1`` it logs one warning saying it is this stand-in (once per
server: spawned children inherit ``EAGLE_HARNESS_STANDIN_ANNOUNCED`` and stay quiet).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable
from typing import Any

import torch

from . import attention, cache, dense, tree, unsupported

__version__ = "0.0.0+standin"
STANDIN = True  # lets a test (or a person) tell this package from the real sgl_kernel

_ANNOUNCE_ENV = "EAGLE_HARNESS_STANDIN_ANNOUNCED"

# Ops sglang calls on its CPU path, by the module that implements them.
_OPS: dict[str, Callable[..., Any]] = {
    "decode_attention_cpu": attention.decode_attention_cpu,
    "extend_attention_cpu": attention.extend_attention_cpu,
    "build_tree_kernel_efficient_cpu": tree.build_tree_kernel_efficient_cpu,
    "verify_tree_greedy_cpu": tree.verify_tree_greedy_cpu,
    "build_draft_decode_metadata_cpu": tree.build_draft_decode_metadata_cpu,
    "assign_req_to_token_pool_cpu": cache.assign_req_to_token_pool_cpu,
    "assign_extend_cache_locs_cpu": cache.assign_extend_cache_locs_cpu,
    "assign_draft_cache_locs_contiguous_cpu": cache.assign_draft_cache_locs_contiguous_cpu,
    "fill_bonus_tokens_cpu": cache.fill_bonus_tokens_cpu,
    "fill_accept_out_cache_loc_cpu": cache.fill_accept_out_cache_loc_cpu,
    "copy_all_layer_kv_cache_cpu": cache.copy_all_layer_kv_cache_cpu,
    "store_cache_cpu": cache.store_cache_cpu,
    "convert_weight_packed": dense.convert_weight_packed,
    "weight_packed_linear": dense.weight_packed_linear,
    "rmsnorm_cpu": dense.rmsnorm_cpu,
    "fused_add_rmsnorm_cpu": dense.fused_add_rmsnorm_cpu,
    "silu_and_mul_cpu": dense.silu_and_mul_cpu,
    "rotary_embedding_cpu": dense.rotary_embedding_cpu,
    "init_cpu_threads_env": dense.init_cpu_threads_env,
    "initialize": dense.initialize,
}


def _install() -> None:
    """Bind every op onto ``torch.ops.sgl_kernel`` and this module, opaque to torch.compile."""
    namespace = torch.ops.sgl_kernel
    this = sys.modules[__name__]
    for name, fn in _OPS.items():
        wrapped = torch.compiler.disable(fn)
        setattr(namespace, name, wrapped)
        setattr(this, name, wrapped)
    for name in unsupported.IMPORT_TIME_NAMES:
        stub = unsupported.make_stub(name)
        setattr(namespace, name, stub)
        setattr(this, name, stub)


def _announce() -> None:
    """One warning line per server saying what this is (see the module docstring)."""
    if os.environ.get("SGLANG_USE_CPU_ENGINE") != "1" or os.environ.get(_ANNOUNCE_ENV):
        return
    os.environ[_ANNOUNCE_ENV] = "1"
    logging.getLogger("sgl_kernel").warning(
        "sgl_kernel here is a pure-PyTorch STAND-IN for sglang's compiled sgl_kernel CPU ops "
        "(test support code of eagle-energy-harness, tests/engines_cpu/standin), not the real kernels: "
        "correct but slow, for tests only"
    )


_install()
_announce()
