"""``EngineSpec``: what to launch (the engine kind, the models, the version whose flags and endpoints to use), and
the defaults every launch shares. The command lines built from it are ``sglang_argv`` and ``vllm_argv``."""

from __future__ import annotations

import sys
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from harness.engine.version import check_supported

DEFAULT_ATTENTION_BACKEND = "flashinfer"
"""Pinned for every config: unpinned, sglang picks fa3 on Hopper (trtllm_mha on Blackwell) for the baseline and
topk == 1 but flashinfer for topk > 1, so one sweep would compare kernels, not speculation."""
CPU_ATTENTION_BACKEND = "intel_amx"
"""sglang's CPU attention backend (``--device cpu``): the one CPU backend that runs EAGLE (from sglang 0.5.16)."""
DEFAULT_MODEL = "unsloth/Llama-3.2-1B-Instruct"
DEFAULT_DRAFT = "rescommons/SpecForge-EAGLE3-Llama-3.2-1B-Instruct"


def attention_backend_on(device: str, backend: str | None) -> str | None:
    """The ``--attention-backend`` on ``device``: the pinned GPU default becomes sglang's CPU backend on the CPU."""
    return CPU_ATTENTION_BACKEND if device == "cpu" and backend == DEFAULT_ATTENTION_BACKEND else backend


class EngineSpec(BaseModel):
    """What to launch: the engine kind, the models, the sglang version whose flags and endpoints to use."""

    model_config = ConfigDict(frozen=True)

    kind: Literal["sglang", "vllm", "twin"] = "twin"
    twin_emulate: Literal["sglang", "vllm"] = "sglang"
    """Which engine's CLI and API the twin speaks (``kind == "twin"`` only)."""
    vllm_version: str = "0.34.0"
    """The vLLM version whose flags and endpoints to use (``api == "vllm"``)."""
    model_path: str = DEFAULT_MODEL
    draft_model_path: str = DEFAULT_DRAFT
    sglang_version: str = "0.5.2"
    """A concrete version in the supported range (``auto`` is resolved before: ``harness.engine.version``)."""
    attention_backend: str | None = DEFAULT_ATTENTION_BACKEND
    """``--attention-backend`` of every launch; None lets sglang choose per config (mixes kernels on Hopper)."""
    dtype: str = "float16"
    host: str = "127.0.0.1"
    twin_gpu_url: str | None = None
    log_level: str = "warning"
    enable_metrics: bool = False
    python: str = Field(default_factory=lambda: sys.executable)
    twin_seed: int | None = None
    twin_faults: tuple[str, ...] = ()
    """Test hooks for the twin: ``NAME`` (every launch) or ``NAME@BS`` or ``NAME@BS/s:k:d`` (one cell)."""
    extra_args: tuple[str, ...] = ()
    decode_log_interval: int | None = None
    """sglang's ``--decode-log-interval`` (None: not passed, sglang's 40)."""
    device: Literal["gpu", "cpu"] = "gpu"
    """Where the engine computes: ``gpu`` (CUDA; energy from NVML) or ``cpu`` (sglang's CPU engine, ``--device cpu``
    with ``SGLANG_USE_CPU_ENGINE=1``; energy from RAPL where the host exposes it; docs/engines.md)."""

    @field_validator("sglang_version")
    @classmethod
    def _supported(cls, v: str) -> str:
        return check_supported(v)

    @classmethod
    def build(
        cls,
        kind: Literal["sglang", "vllm", "twin"],
        *,
        device: Literal["gpu", "cpu"] = "gpu",
        sglang_version: str = "auto",
        vllm_version: str = "auto",
        model_path: str | None = None,
        draft_model_path: str | None = None,
        **more: Any,
    ) -> "EngineSpec":
        """The one builder of a launch spec from any command's options (sweep, serve, pilot, live evaluation, the
        world's default): the version of the engine's API resolved here and only here (``auto``: the one installed
        where the server runs, the twin's default emulation; then range-checked), models left at the defaults when
        not given, and the spec placed on ``device``. ``more``: any other ``EngineSpec`` field."""
        from harness.engine.version import resolve_version, resolve_vllm_version

        base = cls(kind=kind, **more)
        update: dict[str, Any] = {}
        if base.api == "vllm":
            update["vllm_version"] = resolve_vllm_version(vllm_version, kind, base.python)
        else:
            update["sglang_version"] = resolve_version(sglang_version, kind, base.python)
        if model_path:
            update["model_path"] = model_path
        if draft_model_path:
            update["draft_model_path"] = draft_model_path
        return base.model_copy(update=update).on_device(device)

    def on_device(self, device: Literal["gpu", "cpu"]) -> "EngineSpec":
        """This spec on ``device``: the CPU takes sglang's CPU attention backend (for the pinned GPU default) and
        bfloat16 (the CPU kernels' type; float16 is the GPU default)."""
        if device == "gpu":
            return self.model_copy(update={"device": "gpu"})
        backend = attention_backend_on(device, self.attention_backend)
        return self.model_copy(update={"device": "cpu", "dtype": "bfloat16", "attention_backend": backend})

    @property
    def api(self) -> Literal["sglang", "vllm"]:
        """The engine whose command line and HTTP API the server has: sglang, vLLM, or the one the twin emulates."""
        if self.kind == "twin":
            return self.twin_emulate
        return self.kind

    @property
    def version(self) -> str:
        """The version of ``api`` the server runs (or the twin emulates)."""
        return self.vllm_version if self.api == "vllm" else self.sglang_version

    @property
    def label(self) -> str:
        """``sglang``, ``vllm``, ``twin`` (sglang emulated) or ``twin-vllm``: the engine as rows name it."""
        return "twin-vllm" if self.kind == "twin" and self.api == "vllm" else self.kind
