"""``SamplerOptions``: the options of ``harness sampler serve``, one source for its flags, ``--config`` files and
``--print-config`` (``harness.core.model_options``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import ConfigDict, Field

from harness.core.model_options import OptionsModel
from harness.core.option_values import Port, http_url


class SamplerOptions(OptionsModel):
    """One sampler sidecar: which GPU it reads, how often, where it logs and where it listens."""

    model_config = ConfigDict(extra="forbid")

    probe: Literal["nvml", "rapl", "twin"] = Field(
        "nvml", description="nvml (a real GPU), rapl (this host's CPU packages) or twin (the twin GPU device)"
    )
    gpu_index: int = Field(0, ge=0, description="NVML device index")
    twin_url: Annotated[str | None, http_url("--twin-url")] = Field(
        None, description="twin GPU device URL (with --probe twin)"
    )
    rate_hz: float = Field(10.0, gt=0, le=1000, allow_inf_nan=False, description="samples per second")
    log: Path | None = Field(None, description="folder for the append-only samples.jsonl (resumed with a gap record)")
    host: str = Field("127.0.0.1", description="address to bind")
    port: Port = Field(18200, description="0 picks a free port (printed on start)")
    retention_s: float = Field(
        3600.0, gt=0, allow_inf_nan=False, description="seconds of samples kept in memory for window queries"
    )
