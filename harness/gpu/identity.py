"""Which physical GPU the engine computes on, as an NVML UUID, and NVML handles opened by that UUID.

NVML's index is not CUDA's ordinal, and NVML ignores ``CUDA_VISIBLE_DEVICES``: NVML enumerates every GPU of the
host (its order is not even guaranteed to follow the PCI bus, nvml.h ``nvmlDeviceGetHandleByIndex``), while CUDA
numbers only the visible ones, in ``CUDA_DEVICE_ORDER`` (``FASTEST_FIRST`` by default, ``PCI_BUS_ID`` on request).
So the engine's GPU is resolved the way CUDA resolves it (CUDA programming guide, "CUDA Environment Variables"):

- ``CUDA_VISIBLE_DEVICES`` unset: every GPU; empty: none. Otherwise a comma list of ordinals or UUIDs (``GPU-...``,
  any unique prefix); CUDA stops at the first invalid entry, and so does this.
- Ordinals number the GPUs in CUDA's order: PCI bus order under ``PCI_BUS_ID``; under ``FASTEST_FIRST`` the same
  when all GPUs are one model (nothing to rank), and unknowable here otherwise, so that case asks for
  ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` or UUIDs instead of guessing.

Every NVML user of the harness (probe, power cap, clock lock, gpu_check) then opens the GPU by that UUID.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Mapping

from harness.core.errors import ServiceUnavailableError, UsageError

GPU_SELECTOR_FIX = (
    "name the GPU by UUID (CUDA_VISIBLE_DEVICES=GPU-..., from nvidia-smi -L), or set CUDA_DEVICE_ORDER=PCI_BUS_ID "
    "so CUDA's ordinals follow the PCI bus"
)


@dataclass(frozen=True)
class NvmlGpu:
    """One GPU as NVML lists it."""

    index: int
    uuid: str
    pci_bus_id: str
    name: str


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def open_handle(nv: Any, gpu: int | str) -> Any:
    """The NVML handle of ``gpu``: a UUID string (``GPU-...``) or an NVML index."""
    if isinstance(gpu, str):
        return nv.nvmlDeviceGetHandleByUUID(gpu.encode())
    return nv.nvmlDeviceGetHandleByIndex(gpu)


def list_gpus(nv: Any) -> list[NvmlGpu]:
    """Every GPU NVML sees (``nvmlInit`` already called), in NVML's order."""
    out = []
    for index in range(nv.nvmlDeviceGetCount()):
        h = nv.nvmlDeviceGetHandleByIndex(index)
        pci = nv.nvmlDeviceGetPciInfo(h)
        bus = _text(getattr(pci, "busId", b"") or getattr(pci, "busIdLegacy", b"")).upper()
        out.append(NvmlGpu(index, _text(nv.nvmlDeviceGetUUID(h)), bus, _text(nv.nvmlDeviceGetName(h))))
    return out


def cuda_order(gpus: list[NvmlGpu], device_order: str | None) -> list[NvmlGpu]:
    """The GPUs in CUDA's enumeration order (``CUDA_DEVICE_ORDER``)."""
    by_bus = sorted(gpus, key=lambda g: g.pci_bus_id)
    if (device_order or "FASTEST_FIRST").upper() == "PCI_BUS_ID" or len({g.name for g in gpus}) <= 1:
        return by_bus
    raise UsageError(
        "CUDA numbers these GPUs fastest first (CUDA_DEVICE_ORDER unset) and they are different models ("
        + ", ".join(sorted({g.name for g in gpus}))
        + "): which one is CUDA's device 0 cannot be told from NVML",
        fix=GPU_SELECTOR_FIX,
    )


def visible_gpus(env: Mapping[str, str], gpus: list[NvmlGpu]) -> list[NvmlGpu]:
    """The GPUs CUDA shows a process with environment ``env``, in its ordinal order."""
    value = env.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return cuda_order(gpus, env.get("CUDA_DEVICE_ORDER"))
    out: list[NvmlGpu] = []
    ordered: list[NvmlGpu] | None = None
    for entry in (e.strip() for e in value.split(",")):
        if not entry:
            break
        if entry.lstrip("-").isdigit():
            ordered = ordered if ordered is not None else cuda_order(gpus, env.get("CUDA_DEVICE_ORDER"))
            n = int(entry)
            if not 0 <= n < len(ordered):
                break  # CUDA ignores this entry and every one after it
            found = [ordered[n]]
        elif entry.upper().startswith("MIG-"):
            raise UsageError(
                f"CUDA_VISIBLE_DEVICES names a MIG instance ({entry}): the harness measures whole GPUs",
                fix="give the engine a whole GPU (its GPU-... UUID), or measure outside MIG mode",
            )
        else:
            want = entry.upper() if entry.upper().startswith("GPU-") else "GPU-" + entry.upper()
            found = [g for g in gpus if g.uuid.upper().startswith(want)]
            if len(found) != 1:
                break  # no match or an ambiguous prefix: CUDA stops here too
        if found[0] not in out:
            out.append(found[0])
    return out


def engine_gpu(env: Mapping[str, str], gpus: list[NvmlGpu], ordinal: int = 0) -> NvmlGpu:
    """The GPU a CUDA process with ``env`` runs on as its device ``ordinal`` (sglang's and vLLM's ``cuda:0``)."""
    shown = visible_gpus(env, gpus)
    if ordinal >= len(shown):
        seen = env.get("CUDA_VISIBLE_DEVICES")
        raise UsageError(
            f"the engine would see {len(shown)} GPU(s) (CUDA_VISIBLE_DEVICES={seen!r}; NVML lists "
            + (", ".join(f"{g.index}: {g.uuid}" for g in gpus) or "none")
            + f"), so it has no CUDA device {ordinal}",
            fix="set CUDA_VISIBLE_DEVICES to a GPU this host has (an index or a GPU-... UUID from nvidia-smi -L)",
        )
    return shown[ordinal]


def resolve_engine_gpu(env: Mapping[str, str] | None = None, ordinal: int = 0) -> NvmlGpu:
    """``engine_gpu`` for this host's NVML (initialised and shut down here); ``ServiceUnavailableError`` without it."""
    try:
        import pynvml
    except ImportError:
        raise ServiceUnavailableError("nvidia-ml-py is not installed", fix="pip install nvidia-ml-py") from None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        raise ServiceUnavailableError(
            f"NVML is not available ({exc}): cannot tell which GPU the engine uses", fix="check nvidia-smi"
        ) from None
    try:
        gpus = list_gpus(pynvml)
    except pynvml.NVMLError as exc:
        raise ServiceUnavailableError(f"NVML could not list the GPUs: {exc}", fix="check nvidia-smi") from None
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass
    return engine_gpu(os.environ if env is None else env, gpus, ordinal)
