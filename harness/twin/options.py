"""The options of ``harness twin gpu`` (``TwinGpuOptions``) and ``harness twin calibrate`` (``CalibrateOptions``): one
source for their flags, ``--config`` files and ``--print-config`` (``harness.core.model_options``). ``harness twin
engine`` takes sglang's (or vLLM's) own flags instead (``harness.twin.engine.sglang_args``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from harness.core.errors import UsageError
from harness.core.model_options import Flag

DEFAULT_PROFILE = "rtx4060-laptop"


def parse_spreads(text: str) -> list[float]:
    """``"0.25,0.3"`` -> [0.25, 0.3]."""
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UsageError(
            f"--spreads must be comma-separated numbers, got {text!r}", fix="e.g. --spreads 0.25,0.3"
        ) from None


class TwinGpuOptions(BaseModel):
    """One twin GPU device process."""

    model_config = ConfigDict(extra="forbid")

    port: int = Field(18100, ge=0, le=65535, description="port to bind (0 picks a free one; the ready line names it)")
    profile: str = Field(DEFAULT_PROFILE, description="profile name or path to a profile JSON")
    seed: int = Field(0, description="seed for ambient temperature, power jitter and the UUID")
    time_scale: float = Field(
        1.0, gt=0, allow_inf_nan=False, description="the twin world runs this many times faster than the wall clock"
    )
    host: str = Field("127.0.0.1", description="address to bind")
    index: int = Field(0, ge=0, description="device index on this node (N devices of one seed get N UUIDs)")
    memory_release_s: float = Field(
        0.0,
        ge=0,
        allow_inf_nan=False,
        description="wall seconds a stopped engine's memory stays in use, as a driver frees a dead process's memory "
        "some time after it exits (0: at once)",
    )


class CalibrateOptions(BaseModel):
    """A fit of the twin's parameters: to the published measurements, or to a run's own rows (``--from``)."""

    model_config = ConfigDict(extra="forbid")

    out: Path | None = Field(None, description="profile JSON to write (default: the committed profile)")
    calibration: Path | None = Field(None, description="calibration.json (default: the packaged copy)")
    spreads: Annotated[list[float], Flag(parse=parse_spreads, default_text="0.25,0.3,0.35")] = Field(
        default_factory=lambda: [0.25, 0.3, 0.35], description="prompt-quality spreads to try (outer loop)"
    )
    max_evals: int = Field(50, description="least-squares evaluations per spread (each ~0.3 s)")
    start: str = Field(DEFAULT_PROFILE, description="profile to start from (name or path)")
    from_run: Annotated[Path | None, Flag(flag="--from")] = Field(
        None,
        description="fit a sweep run folder's own rows instead of the published table (the board's limit, memory "
        "and idle power from its manifest)",
    )
    holdout_every: int = Field(
        0,
        ge=0,
        description="with --from: hold out every N-th spec cell and report its prediction error (0: fit every cell)",
    )
