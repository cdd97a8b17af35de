"""``ServeOptions``: the options of ``harness serve``, one source for its flags, ``--config`` files,
``--print-config`` and the ``OUT/options.yaml`` a session writes (``harness.core.model_options``). The session
itself runs on ``SessionOptions`` (``harness.serve.session``), which these options resolve into."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from harness.core.errors import UsageError
from harness.core.model_options import Flag

PICKS, ENGINES, CONTROL, WORLD = "Picks", "Engine instances", "Controller", "World"
"""Help panels of ``harness serve``."""


def parse_band(text: str) -> tuple[float, float]:
    """``"0.95,0.98"`` -> (0.95, 0.98)."""
    try:
        lo, hi = (float(x) for x in text.split(","))
    except ValueError:
        raise UsageError(f"bad --band {text!r}", fix="write it as LOW,HIGH, e.g. 0.95,0.98") from None
    return lo, hi


def parse_configs(text: str) -> list[tuple[int, int, int]]:
    from harness.grid import parse_configs as parse

    return [c.as_tuple() for c in parse(text)]


class ServeOptions(BaseModel):
    """Where the picks come from, which engine instances serve, how the controller holds the band, and the world."""

    model_config = ConfigDict(extra="forbid")

    picks: Annotated[str | None, Flag(PICKS)] = Field(
        None, description="pick table BS=s:k:d,... (e.g. 1=0:0:0,16=3:2:4)"
    )
    recipe: Annotated[Path | None, Flag(PICKS)] = Field(
        None, description="an active sweep's recipe.json (or its run folder)"
    )
    models: Annotated[Path | None, Flag(PICKS)] = Field(
        None,
        description="models folder of harness train (with --algo). Warning: the gbt artifact is a joblib pickle "
        "and loading a pickle can run code; load models only from folders you trust",
    )
    algo: Annotated[str | None, Flag(PICKS)] = Field(None, description="which of the eight policies picks")
    dataset: Annotated[Path | None, Flag(PICKS)] = Field(
        None, description="with --models: pick on this run's states (else picks.json)"
    )
    configs: Annotated[list[tuple[int, int, int]], Flag(ENGINES, parse=parse_configs, default_text="picked")] = Field(
        default_factory=list, description="instances to launch s:k:d,... (default: every picked config; no_spec always)"
    )
    mode: Annotated[Literal["band", "adaptive"], Flag(CONTROL)] = Field(
        "band", description="band (the controller) or adaptive (the sglang --speculative-adaptive emulation)"
    )
    engine: Annotated[Literal["twin", "sglang"], Flag(ENGINES)] = Field("twin", description="twin or sglang")
    engine_device: Annotated[Literal["gpu", "cpu"], Flag(ENGINES)] = Field(
        "gpu", description="gpu, or cpu: real sglang's CPU engine (as harness sweep --engine-device; docs/engines.md)"
    )
    model_path: Annotated[str | None, Flag(ENGINES, default_text="unsloth/Llama-3.2-1B-Instruct")] = Field(
        None, description="target model of every instance"
    )
    draft_model_path: Annotated[str | None, Flag(ENGINES)] = Field(None, description="EAGLE3 draft model")
    out: Path = Field(Path("results/serve"), description="folder for logs, switches.jsonl and options.yaml")
    host: str = Field("127.0.0.1", description="address to bind")
    port: int = Field(8000, ge=0, le=65535, description="0 picks a free port (printed)")
    api_key: str | None = Field(
        None,
        description="clients must send Authorization: Bearer KEY on every route but /health (as sglang's and "
        "vLLM's --api-key); required with a --host beyond loopback; never written to OUT/options.yaml",
    )
    max_batch_size: Annotated[int, Flag(ENGINES)] = Field(16, description="each instance's --max-running-requests")
    mem_fraction: Annotated[float | None, Flag(ENGINES, default_text="0.65 / instances")] = Field(
        None, description="per instance"
    )
    time_scale: Annotated[float, Flag(WORLD)] = Field(1.0, gt=0, allow_inf_nan=False, description="twin world speed-up")
    sampler_url: Annotated[str | None, Flag(WORLD)] = Field(
        None, description="a running sampler (sglang: else NVML in-process)"
    )
    twin_gpu: Annotated[str | None, Flag(WORLD)] = Field(None, description="a running twin GPU (with --sampler-url)")
    speculative_adaptive: Annotated[bool, Flag(ENGINES, flag="--speculative-adaptive/--no-speculative-adaptive")] = (
        Field(False, description="pass --speculative-adaptive to topk-1 sglang instances (sglang >= 0.5.12)")
    )
    engine_args: Annotated[list[str], Flag(ENGINES, flag="--engine-arg", repeat=True)] = Field(
        default_factory=list, description="extra engine flag for every instance (repeat)"
    )
    band: Annotated[tuple[float, float], Flag(CONTROL, parse=parse_band, default_text="0.95,0.98")] = Field(
        (0.95, 0.98), description="utilization band LOW,HIGH"
    )
    dwell_ticks: Annotated[int, Flag(CONTROL)] = Field(5, description="ticks a new pick must hold before it is applied")
    umodel: Annotated[Path | None, Flag(CONTROL)] = Field(
        None,
        description="a sweep run (or rows.jsonl) at the serving cap: turns on the closed loop on measured "
        "utilization (docs/serve.md)",
    )
    min_hold_s: Annotated[float | None, Flag(CONTROL, default_text="0.5; 3.0 with --umodel")] = Field(
        None,
        description="seconds (device clock: wall on a GPU, twin seconds with --time-scale) after a switch before "
        "the next load-driven one",
    )
    instances: Annotated[Literal["all", "one", "auto"], Flag(ENGINES)] = Field(
        "auto",
        description="all (one instance per config at once), one (one engine at a time, relaunched on a switch) or "
        "auto (all; one if they do not fit in GPU memory)",
    )
    relaunch_hold_s: Annotated[float, Flag(CONTROL)] = Field(
        60.0, description="with one engine at a time: the least seconds (device clock) between load-driven switches"
    )
    drain_timeout_s: Annotated[float, Flag(ENGINES)] = Field(
        120.0, description="with one engine at a time: wall seconds a switched-off engine gets to finish its requests"
    )
    tick_s: Annotated[float, Flag(CONTROL)] = Field(0.05, description="control tick, wall seconds")
    clock_control: Annotated[bool, Flag(CONTROL, flag="--clock-control/--no-clock-control")] = Field(
        False,
        description="also trim power into the band with the locked SM clock (changes GPU state: root and "
        "CAP_SYS_ADMIN on NVML; unlocked again on exit; docs/serve.md)",
    )

    def hold_s(self, closed_loop: bool) -> float:
        """``--min-hold-s``, else its default: 3.0 s with the closed loop (``--umodel``), 0.5 s without."""
        return self.min_hold_s if self.min_hold_s is not None else (3.0 if closed_loop else 0.5)
