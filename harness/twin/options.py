"""The options of ``harness twin gpu`` (``TwinGpuOptions``) and ``harness twin calibrate`` (``CalibrateOptions``): one
source for their flags, ``--config`` files and ``--print-config`` (``harness.core.model_options``). ``harness twin
engine`` takes sglang's (or vLLM's) own flags instead (``harness.twin.engine.sglang_args``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Sequence

from pydantic import ConfigDict, Field

from harness.core.errors import UsageError
from harness.core.model_options import Flag, OptionsModel
from harness.core.option_values import Port, TimeScale, checked_by, list_items, no_repeats, shown
from harness.engine.twin_profiles import DEFAULT_PROFILE, check_twin_profile


def parse_spreads(value: str | Sequence[Any]) -> list[float]:
    """``"0.25,0.3"`` or ``[0.25, 0.3]`` -> [0.25, 0.3]: each a positive number, each once."""
    items = list_items(value, "--spreads", "0.25,0.3")
    try:
        spreads = [float(x) for x in items]
    except ValueError:
        raise UsageError(
            f"--spreads must be comma-separated numbers, got {shown(items)!r}", fix="e.g. --spreads 0.25,0.3"
        ) from None
    if not spreads or any(not 0 < x < 10 for x in spreads):
        raise UsageError(f"--spreads {shown(items)!r} needs numbers in (0, 10)", fix="e.g. --spreads 0.25,0.3")
    no_repeats(spreads, "--spreads", "spread")
    return spreads


class TwinGpuOptions(OptionsModel):
    """One twin GPU device process."""

    model_config = ConfigDict(extra="forbid")

    port: Port = Field(18100, description="port to bind (0 picks a free one; the ready line names it)")
    profile: Annotated[str, checked_by(lambda v: check_twin_profile(v, "--profile"))] = Field(
        DEFAULT_PROFILE, description="profile name (rtx4060-laptop, h100-sxm) or path to a profile JSON"
    )
    seed: int = Field(0, description="seed for ambient temperature, power jitter and the UUID")
    time_scale: TimeScale = Field(1.0, description="the twin world runs this many times faster than the wall clock")
    host: str = Field("127.0.0.1", description="address to bind")
    index: int = Field(0, ge=0, description="device index on this node (N devices of one seed get N UUIDs)")
    memory_release_s: float = Field(
        0.0,
        ge=0,
        allow_inf_nan=False,
        description="wall seconds a stopped engine's memory stays in use, as a driver frees a dead process's memory "
        "some time after it exits (0: at once)",
    )


class CalibrateOptions(OptionsModel):
    """A fit of the twin's parameters: to the published measurements, or to a run's own rows (``--from``)."""

    model_config = ConfigDict(extra="forbid")

    out: Path | None = Field(None, description="profile JSON to write (default: the committed profile)")
    calibration: Path | None = Field(None, description="calibration.json (default: the packaged copy)")
    spreads: Annotated[list[float], checked_by(parse_spreads), Flag(default_text="0.25,0.3,0.35")] = Field(
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
