"""``EngineSpec``: what to launch (the engine kind, the models, the version whose flags and endpoints to use), and
the defaults every launch shares. The command lines built from it are ``sglang_argv`` and ``vllm_argv``."""

from __future__ import annotations

import sys
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from harness.engine.version import check_supported

DEFAULT_ATTENTION_BACKEND = "flashinfer"
"""Pinned for every config: unpinned, sglang picks fa3 on Hopper (trtllm_mha on Blackwell) for the baseline and
topk == 1 but flashinfer for topk > 1, so one sweep would compare kernels, not speculation."""
DEFAULT_MODEL = "unsloth/Llama-3.2-1B-Instruct"
DEFAULT_DRAFT = "rescommons/SpecForge-EAGLE3-Llama-3.2-1B-Instruct"


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

    @field_validator("sglang_version")
    @classmethod
    def _supported(cls, v: str) -> str:
        return check_supported(v)

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
