"""``SweepOptions``: everything that defines a sweep (saved in the manifest; ``--resume`` reuses it). Its checks that
reach other wings (prompts, engine versions, executors, the active strategy) are ``harness.sweep.checks``.

The model is the one source of the ``harness sweep`` options: each field's name (or ``Flag(flag=...)``), default,
``Field(description=...)`` and type make its command-line flag (``harness.core.model_options``), and a config file
(``--config run.yaml``) holds the same names.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal, Sequence

from pydantic import BeforeValidator, Field

from harness.core.errors import UsageError
from harness.core.model_options import Flag
from harness.core.option_values import Seconds, check_fraction, checked_by, list_items
from harness.engine.options import ENGINE, WORLD, EngineOptions, GpuSettingsOptions
from harness.engine.sglang_argv import DISABLE_OVERLAP
from harness.engine.spec import DEFAULT_ATTENTION_BACKEND, EngineSpec, attention_backend_on
from harness.gpu.power_cap import PowerCaps
from harness.gpu.sm_clocks import SmClocks
from harness.grid import ACTIONS, PUBLISHED_BATCH_SIZES, BatchSizes, SpecConfig, SpecConfigs

GRID, BENCH, CAPS, EXEC, ACTIVE = (
    "Grid",
    "Workload",
    "Power caps and SM clocks",
    "Executor (many GPUs)",
    "Strategy (active sweep)",
)
"""Help panels of ``harness sweep``."""


def _backend(value: Any) -> Any:
    return None if value == "auto" else value


def parse_fractions(value: str | Sequence[Any]) -> list[float]:
    """``"0.65,0.55"`` or ``[0.65, 0.55]`` -> [0.65, 0.55]: the mem-fraction retry ladder, each in (0, 1)."""
    items = list_items(value, "--mem-fractions", "0.65,0.55")
    if not items:
        raise UsageError("--mem-fractions is empty", fix="e.g. --mem-fractions 0.65,0.55")
    return [check_fraction(x, "--mem-fractions", "0.65,0.55") for x in items]


class SweepOptions(GpuSettingsOptions, EngineOptions):
    """Everything that defines a sweep (saved in the manifest; ``--resume`` reuses it): the engine and world block
    (``EngineOptions``) and the sweep's own grid, workload, GPU settings, executor and strategy."""

    twin_emulate: Annotated[Literal["sglang", "vllm"], Flag(ENGINE)] = Field(
        "sglang", description="with --engine twin: the engine whose CLI and API the twin speaks (docs/engines.md)"
    )
    vllm_version: Annotated[str, Flag(ENGINE)] = Field(
        "auto",
        description="auto (the vLLM installed where the server runs; the twin: 0.34.0) or a version from "
        "0.11.0 to 0.34.0; used when the engine is vLLM or the twin emulates it",
    )
    attention_backend: Annotated[
        str | None,
        BeforeValidator(_backend),
        Flag(ENGINE, default_text="flashinfer; intel_amx with --engine-device cpu"),
    ] = Field(
        DEFAULT_ATTENTION_BACKEND,
        description="pinned for every config (auto: sglang picks per config, which mixes kernels on Hopper/Blackwell)",
    )
    configs: Annotated[SpecConfigs, Flag(GRID, default_text="the 19 published actions")] = Field(
        default_factory=lambda: [a.as_tuple() for a in ACTIONS],
        description="explicit configs s:k:d,... (instead of a --steps/--topk/--draft-tokens grid)",
    )
    batch_sizes: Annotated[BatchSizes, Flag(GRID, default_text="1,4,8,16")] = Field(
        default_factory=lambda: list(PUBLISHED_BATCH_SIZES), description="batch sizes, e.g. 1,4,8,16 (published)"
    )
    repeats: Annotated[int, Flag(GRID)] = Field(1, ge=1, description="whole passes over the grid")
    launch_per: Annotated[Literal["cell", "config"], Flag(GRID)] = Field(
        "cell", description="cell (published: a server per batch size and config) or config"
    )
    mem_fractions: Annotated[list[float], checked_by(parse_fractions), Flag(ENGINE, default_text="0.65,0.55")] = Field(
        default_factory=lambda: [0.65, 0.55], description="the retry ladder of --mem-fraction-static"
    )
    num_prompts: Annotated[int | None, Flag(BENCH, default_text="max(16, bs)")] = Field(
        None, ge=1, description="measured requests per cell"
    )
    output_tokens: Annotated[int, Flag(BENCH)] = Field(512, ge=1, description="max_new_tokens per request")
    prompts_file: Annotated[str | None, Flag(BENCH, flag="--prompts", default_text="the published 4")] = Field(
        None, description="JSON list of prompts"
    )
    request_timeout_s: Annotated[Seconds, Flag(BENCH, flag="--request-timeout")] = Field(
        300.0, description="wall seconds before a request counts as hung"
    )
    launch_timeout_s: Annotated[Seconds, Flag(ENGINE, flag="--launch-timeout")] = Field(
        900.0, description="seconds for a server to become healthy"
    )
    stop_timeout_s: Annotated[Seconds, Flag(ENGINE, flag="--stop-timeout")] = Field(
        60.0, description="seconds for a server to stop before it is killed"
    )
    settle: Annotated[str, checked_by(check_settle), Flag(BENCH)] = Field(
        "5", description="between cells: world seconds or cool:TEMP_C"
    )
    twin_faults: Annotated[list[str], Flag(WORLD, flag="--twin-fault", repeat=True)] = Field(
        default_factory=list,
        description="test hook: NAME or NAME@BS or NAME@BS/s:k:d (oom, crash, runaway, slow-health, http500)",
    )
    hardware: Annotated[str | None, Flag(WORLD)] = Field(None, description="override the rows' hardware label")
    stream: Annotated[
        bool | None, Flag(BENCH, flag="--stream/--no-stream", default_text="on for sglang, off for the twin")
    ] = Field(None, description="stream responses")
    overlap_schedule: Annotated[Literal["auto", "off"], Flag(ENGINE)] = Field(
        "auto",
        description="sglang's overlap scheduler: auto (each version's own rule: off for EAGLE up to 0.5.11, on from "
        "0.5.14) or off for every launch (--disable-overlap-schedule), so rows of two versions measure one scheduler",
    )
    decode_log_interval: Annotated[int | None, Flag(ENGINE, default_text="1 on real sglang, the twin's 40")] = Field(
        None,
        ge=1,
        description="sglang's --decode-log-interval: decode steps per step-time sample and per update of the "
        "server's accept length (sglang's default 40 leaves a few samples per cell; docs/harness.md)",
    )
    power_caps: Annotated[PowerCaps, Flag(CAPS)] = Field(
        None,
        description="GPU power caps swept per pass, watts or % of the default limit, e.g. 60,80 or 75%,100%, or "
        "auto (chosen by the band probe inside the board's limits)",
    )
    probe: Annotated[Literal["auto", "on", "off"], Flag(CAPS, default_text="auto: on for a real engine on a GPU")] = (
        Field(
            "auto",
            description="the band probe before the first cell: two launches measure the board's draws, say whether the "
            "band can be reached, size the workload (--min-window) and choose --power-caps auto (docs/powercap.md)",
        )
    )
    min_window_s: Annotated[float, Field(ge=0, allow_inf_nan=False), Flag(BENCH, flag="--min-window")] = Field(
        30.0,
        description="with the probe: world seconds every measured window lasts at least (requests per cell grow "
        "to reach it; 0: the published counts)",
    )
    power_cap_mode: Annotated[Literal["set", "record"], Flag(CAPS)] = Field(
        "set",
        description="set (needs root on NVML; the original limit is restored) or record (only record the "
        "enforced limit)",
    )
    sm_clocks: Annotated[SmClocks, Flag(CAPS)] = Field(
        None,
        description="locked SM clocks swept per pass (inside each cap), MHz or max (unlocked), e.g. 1980,1410,990 "
        "(needs root on NVML; unlocked again at the end; docs/smclocks.md)",
    )
    energy_window: Annotated[Literal["measured", "steady"], Flag(BENCH)] = Field(
        "measured",
        description="which window feeds energy_joules: measured (published) or steady (ML.ENERGY steady state)",
    )
    executor: Annotated[Literal["local", "ray"], Flag(EXEC)] = Field(
        "local",
        description="local (cells one after another on this machine's GPU) or ray (each cell a Ray task on its "
        "own GPU; needs the [ray] extra)",
    )
    ray_address: Annotated[str | None, Flag(EXEC, default_text="start a local cluster")] = Field(
        None, description="with --executor ray: auto or HOST:PORT of a running cluster"
    )
    twin_gpus: Annotated[int | None, Flag(EXEC, default_text="1 locally, all of a given cluster")] = Field(
        None, ge=1, description="with --engine twin --executor ray: twin GPU devices, one per Ray GPU"
    )
    strategy: Annotated[Literal["grid", "active"], Flag(ACTIVE)] = Field(
        "grid",
        description="grid (every planned cell) or active (only the cells that can still change the recipe; "
        "docs/active.md)",
    )
    budget: Annotated[float | None, Flag(ACTIVE, default_text="0.2 unless --budget-s")] = Field(
        None,
        gt=0,
        le=1,
        description="active: GPU-seconds (launch + measure) as a fraction of the predicted full grid's",
    )
    budget_s: Annotated[float | None, Flag(ACTIVE)] = Field(
        None, gt=0, description="active: GPU-seconds (device time, launch + measure) the sweep may spend"
    )

    @property
    def stream_requests(self) -> bool:
        """Streaming costs client CPU per token; on the twin at a time scale > 1 that cost is scaled too and
        delays the end of the window far past the end of decoding, so the twin defaults to whole responses."""
        return self.stream if self.stream is not None else self.engine == "sglang"

    @property
    def server_attention_backend(self) -> str | None:
        """The ``--attention-backend`` of every launch: the GPU default becomes sglang's CPU backend on the CPU."""
        return attention_backend_on(self.engine_device, self.attention_backend)

    @property
    def api(self) -> Literal["sglang", "vllm"]:
        """The engine API the servers speak: sglang, vLLM, or the one the twin emulates."""
        return self.twin_emulate if self.engine == "twin" else self.engine

    @property
    def launch_args(self) -> tuple[str, ...]:
        """The extra flags of every launch: ``--engine-arg``s, plus ``--disable-overlap-schedule`` (once) when
        ``--overlap-schedule off`` pins sglang's scheduler."""
        extra = tuple(self.engine_args)
        if self.api == "sglang" and self.overlap_schedule == "off" and DISABLE_OVERLAP not in extra:
            extra += (DISABLE_OVERLAP,)
        return extra

    @property
    def server_decode_log_interval(self) -> int | None:
        """``--decode-log-interval`` of every sglang launch: as given, else 1 on real sglang (a step-time sample and a
        fresh accept length every decode step), else None (the twin keeps 40, the interval it was calibrated with;
        a vLLM API has no such flag)."""
        if self.api != "sglang":
            return None
        if self.decode_log_interval is not None:
            return self.decode_log_interval
        return 1 if self.engine == "sglang" else None

    @property
    def spec_configs(self) -> list[SpecConfig]:
        """The configs the sweep runs; a vLLM sweep runs those vLLM has (baseline and topk == 1 chains)."""
        configs = [SpecConfig(*c) for c in self.configs]
        if self.api == "vllm":
            from harness.engine.vllm_argv import vllm_configs

            return vllm_configs(configs)
        return configs

    def engine_spec(self, **more: Any) -> EngineSpec:
        """Every launch of this sweep: the block's spec with the sweep's twin faults, emulation, launch flags,
        decode log interval, attention backend and metrics (real sglang reports each request's receive and finish
        instants only with metrics on: the window then runs server edges to server edges, as the twin's does)."""
        return super().engine_spec(
            vllm_version=self.vllm_version,
            twin_faults=tuple(self.twin_faults),
            twin_emulate=self.twin_emulate,
            extra_args=self.launch_args,
            decode_log_interval=self.server_decode_log_interval,
            attention_backend=self.attention_backend,
            enable_metrics=self.engine == "sglang",
            **more,
        )

    @property
    def skipped_configs(self) -> list[SpecConfig]:
        """The configs of ``configs`` this engine has no equivalent of (vLLM: the EAGLE trees)."""
        kept = set(self.spec_configs)
        return [SpecConfig(*c) for c in self.configs if SpecConfig(*c) not in kept]


QUICK: dict[str, Any] = {
    "configs": [(0, 0, 0), (3, 4, 8), (3, 2, 4), (5, 2, 8)],
    "batch_sizes": [1, 16],
    "repeats": 1,
    "output_tokens": 256,
    "time_scale": 20.0,
    "settle": "0",
}
"""``--quick``: the baseline, the reference, the published bs-16 pick (0.952 of the cap, the band's edge) and (5,2,8)
(0.972, mid-band in the published bs-16 measurement) at bs 1 and 16; a twin run in seconds."""
QUICK_VLLM_CONFIGS: list[tuple[int, int, int]] = [(0, 0, 0), (3, 1, 4), (1, 1, 2)]
"""``--quick`` on vLLM (no trees): the baseline and two chains."""


def parse_settle(text: str) -> tuple[str, float]:
    """``"5"`` -> ("sleep", 5.0) world seconds; ``"cool:60"`` -> ("cool", 60.0) degrees C; ``"0"`` -> no settle."""
    t = str(text).strip().lower()
    fix = "give seconds >= 0 (e.g. 5) or cool:TEMP with 0 < TEMP < 150 (e.g. cool:60)"
    try:
        kind, value = ("cool", float(t[5:])) if t.startswith("cool:") else ("sleep", float(t.rstrip("s")))
    except ValueError:
        raise UsageError(f"cannot parse --settle {text!r}", fix=fix) from None
    if not math.isfinite(value) or (kind == "sleep" and value < 0) or (kind == "cool" and not 0 < value < 150):
        raise UsageError(f"--settle {text!r} is out of range", fix=fix)
    return kind, value


def check_settle(value: Any) -> str:
    """A ``--settle`` value as its text (a config file's number ``5`` reads as ``"5"``), once parsed."""
    text = str(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else value
    if not isinstance(text, str):
        raise UsageError(f"cannot parse --settle {value!r}", fix="give seconds (e.g. 5) or cool:TEMP (e.g. cool:60)")
    parse_settle(text)
    return text
