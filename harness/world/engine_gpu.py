"""The engine's GPU in a world on a GPU box: resolved to an NVML UUID the way CUDA resolves it for the server's
environment (``harness.gpu.identity``), opened by that UUID, and checked against the GPU the sampler watches."""

from __future__ import annotations

import os
from typing import Any

from harness.core.errors import HarnessError, UsageError
from harness.engine.spec import EngineSpec
from harness.gpu.identity import NvmlGpu, resolve_engine_gpu


def server_env(spec: EngineSpec) -> dict[str, str]:
    """The environment the launcher gives the server (this process's plus the engine's variables)."""
    from harness.engine.sglang_argv import engine_env

    return {**os.environ, **engine_env(spec)}


def resolve(spec: EngineSpec, *, required: bool) -> tuple[NvmlGpu | None, str | None]:
    """The engine's GPU, or (when not ``required``: a sampler sidecar reads the GPU) None and why not."""
    try:
        return resolve_engine_gpu(server_env(spec)), None
    except UsageError:
        raise
    except HarnessError as exc:
        if required:
            raise
        return None, exc.message


def check_sampler(gpu: NvmlGpu | None, ident: dict[str, Any], sampler_url: str | None) -> None:
    """Stop when the sampler watches another GPU than the engine's (energy of the wrong GPU would fill the rows)."""
    watched = ident.get("uuid")
    if gpu is None or sampler_url is None or not watched or str(watched) == gpu.uuid:
        return
    raise UsageError(
        f"the sampler at {sampler_url} watches {watched} but the engine runs on {gpu.uuid} "
        f"(NVML index {gpu.index}, {gpu.name}): its energy would be another GPU's",
        fix="start the sampler on the engine's GPU (harness sampler serve --gpu-index "
        f"{gpu.index}; compose: HARNESS_GPU for both), or set CUDA_VISIBLE_DEVICES to the sampler's GPU",
    )


def identity(gpu: NvmlGpu | None, why_not: str | None) -> dict[str, Any]:
    """What the manifest records of the resolution."""
    if gpu is None:
        return {"engine_gpu_uuid": None, "engine_gpu_unresolved": why_not} if why_not else {}
    return {"engine_gpu_uuid": gpu.uuid, "engine_gpu_nvml_index": gpu.index, "engine_gpu_pci_bus_id": gpu.pci_bus_id}
