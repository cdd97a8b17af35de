"""``ServeOptions``: the options of ``harness serve``, one source for its flags, ``--config`` files,
``--print-config`` and the ``OUT/options.yaml`` a session writes (``harness.core.model_options``). The session
itself runs on ``SessionOptions`` (``harness.serve.session``), which these options resolve into."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal, Sequence

from pydantic import ConfigDict, Field, field_validator

from harness.core.errors import UsageError
from harness.core.model_options import Flag
from harness.core.option_values import Port, Seconds, check_band, checked_by, input_path, refusal
from harness.engine.options import EngineOptions, GpuSettingsOptions
from harness.grid import MAX_BATCH_SIZE

PICKS, ENGINES, CONTROL = "Picks", "Engine instances", "Controller"
"""Help panels of ``harness serve``."""


def parse_band(value: str | Sequence[Any]) -> tuple[float, float]:
    """``"0.95,0.98"`` -> (0.95, 0.98): a band with 0 < LOW < HIGH."""
    return check_band(value, "--band")


def _configs(value: Any) -> list[tuple[int, int, int]]:
    """The instances' configs; none given (``[]``) means every picked config."""
    from harness.grid import parse_configs

    return [] if value in ([], (), "") else [c.as_tuple() for c in parse_configs(value)]


class ServeOptions(GpuSettingsOptions, EngineOptions):
    """Where the picks come from, which engine instances serve, how the controller holds the band, and the engine
    and world block (``EngineOptions``: the twin or sglang)."""

    model_config = ConfigDict(extra="forbid")

    picks: Annotated[str | None, Flag(PICKS)] = Field(
        None, description="pick table BS=s:k:d,... (e.g. 1=0:0:0,16=3:2:4)"
    )
    recipe: Annotated[Path | None, input_path("--recipe"), Flag(PICKS)] = Field(
        None, description="an active sweep's recipe.json (or its run folder)"
    )
    models: Annotated[Path | None, input_path("--models"), Flag(PICKS)] = Field(
        None,
        description="models folder of harness train (with --algo). Warning: the gbt artifact is a joblib pickle "
        "and loading a pickle can run code; load models only from folders you trust",
    )
    algo: Annotated[str | None, Flag(PICKS)] = Field(None, description="which of the eight policies picks")
    trust_artifacts: Annotated[bool, Flag(PICKS, flag="--trust-artifacts/--no-trust-artifacts")] = Field(
        False, description="with --models: load artifacts without checking the sha256 harness train recorded"
    )
    dataset: Annotated[Path | None, input_path("--dataset"), Flag(PICKS)] = Field(
        None, description="with --models: pick on this run's states (else picks.json)"
    )
    configs: Annotated[list[tuple[int, int, int]], checked_by(_configs), Flag(ENGINES, default_text="picked")] = Field(
        default_factory=list, description="instances to launch s:k:d,... (default: every picked config; no_spec always)"
    )
    mode: Annotated[Literal["band", "adaptive"], Flag(CONTROL)] = Field(
        "band", description="band (the controller) or adaptive (the sglang --speculative-adaptive emulation)"
    )
    out: Path = Field(Path("results/serve"), description="folder for logs, switches.jsonl and options.yaml")
    host: str = Field("127.0.0.1", description="address to bind")
    port: Port = Field(8000, description="0 picks a free port (printed)")
    api_key: str | None = Field(
        None,
        description="clients must send Authorization: Bearer KEY on every route but /health (as sglang's and "
        "vLLM's --api-key); required with a --host beyond loopback; never written to OUT/options.yaml",
    )
    max_batch_size: Annotated[int, Flag(ENGINES)] = Field(
        16, ge=1, le=MAX_BATCH_SIZE, description="each instance's --max-running-requests"
    )
    mem_fraction: Annotated[float | None, Flag(ENGINES, default_text="0.65 / instances")] = Field(
        None, gt=0, lt=1, description="per instance"
    )
    speculative_adaptive: Annotated[bool, Flag(ENGINES, flag="--speculative-adaptive/--no-speculative-adaptive")] = (
        Field(False, description="pass --speculative-adaptive to topk-1 sglang instances (sglang >= 0.5.12)")
    )
    band: Annotated[tuple[float, float], checked_by(parse_band), Flag(CONTROL, default_text="0.95,0.98")] = Field(
        (0.95, 0.98), description="utilization band LOW,HIGH"
    )
    dwell_ticks: Annotated[int, Flag(CONTROL)] = Field(
        5, ge=1, description="ticks a new pick must hold before it is applied"
    )
    umodel: Annotated[Path | None, input_path("--umodel"), Flag(CONTROL)] = Field(
        None,
        description="a sweep run (or rows.jsonl) at the serving cap: turns on the closed loop on measured "
        "utilization (docs/serve.md)",
    )
    min_hold_s: Annotated[float | None, Flag(CONTROL, default_text="0.5; 3.0 with --umodel")] = Field(
        None,
        ge=0,
        allow_inf_nan=False,
        description="seconds (device clock: wall on a GPU, twin seconds with --time-scale) after a switch before "
        "the next load-driven one",
    )
    instances: Annotated[Literal["all", "one", "auto"], Flag(ENGINES)] = Field(
        "auto",
        description="all (one instance per config at once), one (one engine at a time, relaunched on a switch) or "
        "auto (all; one if they do not fit in GPU memory)",
    )
    relaunch_hold_s: Annotated[float, Flag(CONTROL)] = Field(
        60.0,
        ge=0,
        allow_inf_nan=False,
        description="with one engine at a time: the least seconds (device clock) between load-driven switches",
    )
    drain_timeout_s: Annotated[Seconds, Flag(ENGINES)] = Field(
        120.0, description="with one engine at a time: wall seconds a switched-off engine gets to finish its requests"
    )
    tick_s: Annotated[Seconds, Flag(CONTROL)] = Field(0.05, description="control tick, wall seconds")
    clock_control: Annotated[bool, Flag(CONTROL, flag="--clock-control/--no-clock-control")] = Field(
        False,
        description="also trim power into the band with the locked SM clock (changes GPU state: root and "
        "CAP_SYS_ADMIN on NVML; unlocked again on exit; docs/serve.md)",
    )

    power_budget_w: Annotated[float | None, Flag(CONTROL, flag="--power-budget")] = Field(
        None,
        gt=0,
        allow_inf_nan=False,
        description="hold the band against this many watts: the board's limit is set to it for the session (changes "
        "GPU state: root on NVML; checked against the board's limits; put back on exit; docs/serve.md)",
    )

    @field_validator("engine")
    @classmethod
    def _served_engine(cls, engine: str) -> str:
        if engine == "vllm":
            raise refusal(
                UsageError("harness serve runs the twin or sglang, not vllm", fix="use --engine twin or sglang")
            )
        return engine

    def hold_s(self, closed_loop: bool) -> float:
        """``--min-hold-s``, else its default: 3.0 s with the closed loop (``--umodel``), 0.5 s without."""
        return self.min_hold_s if self.min_hold_s is not None else (3.0 if closed_loop else 0.5)
