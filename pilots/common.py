"""What both agentic pilots share: the pilot configs, the common flags, one server per config, trial rows.

A pilot run opens the world (``harness.world.open_world``), then for each selected config launches a fresh server
at the published batch size (16), warms it up, and hands a ``ConfigRun`` to the suite's per-config function, which
returns ``PilotTrial`` records (one per task or instance). The runner fills in the per-config accept length where a
trial has none, then writes ``RUN_DIR``:

- ``manifest.json``: options, world identity, engine versions, configs, suite metadata, start/end, status;
- ``telemetry/<config>.jsonl``: one suite record per trial; ``telemetry/config_summaries.jsonl``: one per config;
- ``reports/merged.jsonl``: ``{config, task_id, record, evaluation}`` per trial;
- ``dataset_rows.jsonl``: dataset rows with the published pilot semantics, appended by ``harness dataset merge``.
"""

from __future__ import annotations

import functools
import inspect
import math
import os
import socket
import sys
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable, Literal, Sequence

import typer
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from rich.console import Console
from rich.table import Table

from harness.engine.argv import EngineSpec
from harness.engine.version import resolve_version
from harness.errors import EngineLaunchError, HarnessError, InvalidConfigError, UsageError
from harness.grid import SpecConfig, parse_config
from harness.jsonl import JsonlAppender, write_jsonl_atomic
from harness.manifest import PilotManifest
from harness.rows import make_pilot_cell_id, pilot_row, throttling_flags, to_native
from harness.timeutil import WALL_CLOCK, ScaledClock, mono_ns, to_iso, wall_ns
from harness.world import open_world

# ---------------------------------------------------------------------------------------------------------------
# Configs

PILOT_CONFIGS: dict[str, SpecConfig] = {
    "no_spec": SpecConfig(0, 0, 0),
    "chosen": SpecConfig(3, 4, 8),
    "chosen_bs16": SpecConfig(3, 2, 4),
}
"""The published pilot configs: the baseline, the recipe for bs 1-8, and the recipe for bs 16."""

DEFAULT_CONFIGS: tuple[str, ...] = tuple(PILOT_CONFIGS)
PUBLISHED_SERVER_BATCH_SIZE = 16
PUBLISHED_PILOT_MEM_FRACTION = 0.55
SUITES: tuple[str, ...] = ("swebench", "terminalbench")
SPEED_SOURCES: dict[str, str] = {"swebench": "swebench_pilot", "terminalbench": "terminalbench_pilot"}
ERROR_PREFIX = "agentic_pilot_trace: "
IDLE_BIT = 0x1
WINDOW_WAIT_S = 2.0
POWER_THERMAL_BITS = 0x4 | 0x8 | 0x20 | 0x40 | 0x80
"""NVML clock-event bits that mean real throttling: SW power cap, HW slowdown, SW/HW thermal, power brake."""


def select_configs(items: str | Sequence[str]) -> dict[str, SpecConfig]:
    """``"no_spec,chosen"`` (names) or ``"3:2:4"`` (raw triples, named by their label) -> ordered {name: config}."""
    parts = items.replace(";", ",").split(",") if isinstance(items, str) else list(items)
    out: dict[str, SpecConfig] = {}
    for raw in (p.strip() for p in parts):
        if not raw:
            continue
        if raw in PILOT_CONFIGS:
            out.setdefault(raw, PILOT_CONFIGS[raw])
        elif raw.count(":") == 2:
            cfg = parse_config(raw)
            out.setdefault(cfg.label, cfg)
        else:
            raise InvalidConfigError(
                f"unknown pilot config {raw!r}",
                fix="use names from " + ", ".join(PILOT_CONFIGS) + " or a triple like 3:4:8, comma-separated",
            )
    if not out:
        raise InvalidConfigError("--configs is empty", fix="e.g. --configs no_spec,chosen")
    return out


# ---------------------------------------------------------------------------------------------------------------
# Options


def _utc_stamp() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")


class PilotOptions(BaseModel):
    """The options every pilot suite shares (the same flags and meanings as ``harness sweep`` where they overlap)."""

    model_config = ConfigDict(extra="forbid")

    suite: Literal["swebench", "terminalbench"]
    engine: Literal["sglang", "twin"] = "twin"
    time_scale: float = Field(default=1.0, gt=0)
    out: Path | None = None
    sampler_url: str | None = None
    twin_gpu_url: str | None = None
    configs: list[str] = Field(default_factory=lambda: list(DEFAULT_CONFIGS))
    fixture: bool = False
    server_batch_size: int = Field(default=PUBLISHED_SERVER_BATCH_SIZE, ge=1)
    mem_fraction: float = Field(default=PUBLISHED_PILOT_MEM_FRACTION, gt=0, lt=1)
    seed: int = 0
    sglang_version: str = "auto"
    """``auto`` (the sglang installed where the server runs; the twin: 0.5.2) or a supported version."""
    model_path: str = "unsloth/Llama-3.2-1B-Instruct"
    draft_model_path: str = "rescommons/SpecForge-EAGLE3-Llama-3.2-1B-Instruct"
    request_timeout: float = Field(default=1800.0, gt=0)
    launch_timeout: float = Field(default=900.0, gt=0)
    twin_faults: list[str] = Field(default_factory=list)
    """Twin test hooks, as ``harness sweep --twin-fault``: ``runaway@16/3:2:4`` reproduces the published runaway call."""
    run_id: str = Field(default_factory=_utc_stamp)

    @field_validator("configs", "twin_faults", mode="before")
    @classmethod
    def _split_configs(cls, v: Any) -> Any:
        if isinstance(v, str):
            return [p.strip() for p in v.replace(";", ",").split(",") if p.strip()]
        return v

    @model_validator(mode="after")
    def _check(self) -> "PilotOptions":
        select_configs(self.configs)  # raises InvalidConfigError naming the bad item
        if self.engine == "sglang" and self.time_scale != 1.0:
            raise UsageError("--time-scale only applies to the twin", fix="drop --time-scale or use --engine twin")
        if self.engine == "sglang" and self.twin_faults:
            raise UsageError("--twin-fault only applies to the twin", fix="drop --twin-fault or use --engine twin")
        return self

    @property
    def run_dir(self) -> Path:
        """``--out``, or ``results/<suite>-<run_id>``."""
        return Path(self.out) if self.out is not None else Path("results") / f"{self.suite}-{self.run_id}"

    def selected_configs(self) -> dict[str, SpecConfig]:
        return select_configs(self.configs)


@dataclass(frozen=True)
class _Flag:
    name: str
    annotation: Any
    option: Any


def _common_flags(suite_required: bool) -> list[_Flag]:
    d = PilotOptions.model_fields
    suite_default = ... if suite_required else None
    return [
        _Flag("suite", str | None if not suite_required else str,
              typer.Option(suite_default, "--suite", help="Pilot suite: swebench or terminalbench.")),
        _Flag("engine", str, typer.Option(d["engine"].default, "--engine", help="sglang (real GPU) or twin (no GPU).")),
        _Flag("time_scale", float, typer.Option(1.0, "--time-scale", help="Twin clock speed-up (twin only).")),
        _Flag("out", Path | None, typer.Option(None, "--out", help="RUN_DIR (default results/<suite>-<utc>).")),
        _Flag("sampler_url", str | None, typer.Option(None, "--sampler-url", help="Use a running sampler.")),
        _Flag("twin_gpu", str | None, typer.Option(None, "--twin-gpu", help="Use a running twin GPU device URL.")),
        _Flag("configs", str, typer.Option(",".join(DEFAULT_CONFIGS), "--configs",
                                           help="Pilot configs: names (no_spec,chosen,chosen_bs16) or s:k:d.")),
        _Flag("fixture", bool, typer.Option(False, "--fixture", help="Run the project's own offline instances/tasks.")),
        _Flag("server_batch_size", int, typer.Option(PUBLISHED_SERVER_BATCH_SIZE, "--server-batch-size",
                                                     help="Batch size the server is launched for (published 16).")),
        _Flag("mem_fraction", float, typer.Option(PUBLISHED_PILOT_MEM_FRACTION, "--mem-fraction",
                                                  help="--mem-fraction-static of the server (published pilot 0.55).")),
        _Flag("seed", int, typer.Option(0, "--seed", help="Twin seed.")),
        _Flag("sglang_version", str, typer.Option(d["sglang_version"].default, "--sglang-version",
                                                  help="auto (detected where the server runs) or a version "
                                                       "from 0.5.2 to 0.5.23 (the twin: 0.5.2|0.5.23).")),
        _Flag("model_path", str, typer.Option(d["model_path"].default, "--model-path", help="Target model.")),
        _Flag("draft_model_path", str, typer.Option(d["draft_model_path"].default, "--draft-model-path",
                                                    help="EAGLE3 draft head.")),
        _Flag("request_timeout", float, typer.Option(1800.0, "--request-timeout", help="Seconds per LLM request.")),
        _Flag("launch_timeout", float, typer.Option(900.0, "--launch-timeout", help="Seconds to wait for a server.")),
        _Flag("twin_faults", str, typer.Option("", "--twin-fault",
                                               help="Twin faults NAME or NAME@BS/s:k:d, comma-separated (e.g. runaway@16/3:2:4).")),
    ]


def common_flags(*, suite_required: bool = False) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator for typer commands: add the common pilot flags; the command receives them as ``flags: dict``.

    The wrapped function keeps its own parameters (``ctx: typer.Context`` etc.) and gets a keyword ``flags`` with
    the parsed common values; build options with ``options_from_flags(flags)``.
    """

    def deco(func: Callable[..., Any]) -> Callable[..., Any]:
        flags = _common_flags(suite_required)
        names = {f.name for f in flags}
        own = [p for p in inspect.signature(func).parameters.values() if p.name != "flags"]

        @functools.wraps(func)
        def wrapper(**kwargs: Any) -> Any:
            common = {n: kwargs.pop(n) for n in list(kwargs) if n in names}
            return func(**kwargs, flags=common)

        params = own + [
            inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=f.option, annotation=f.annotation)
            for f in flags
        ]
        wrapper.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        wrapper.__annotations__ = {p.name: p.annotation for p in params}
        del wrapper.__wrapped__  # typer must read our signature, not the original one
        return wrapper

    return deco


def options_from_flags(flags: dict[str, Any], suite: str | None = None) -> PilotOptions:
    """``PilotOptions`` from the values ``common_flags`` parsed (validation errors become ``UsageError``)."""
    data = dict(flags)
    data["twin_gpu_url"] = data.pop("twin_gpu", None)
    if suite is not None:
        data["suite"] = suite
    if data.get("suite") not in SUITES:
        raise UsageError(f"unknown or missing --suite {data.get('suite')!r}", fix="use --suite swebench or --suite terminalbench")
    try:
        return PilotOptions(**data)
    except HarnessError:
        raise
    except ValidationError as exc:
        raise UsageError(f"invalid pilot options: {_short_validation(exc)}", fix="check the flags with --help") from None


def _short_validation(exc: Exception) -> str:
    errors = getattr(exc, "errors", None)
    if callable(errors):
        try:
            return "; ".join(f"{'.'.join(str(x) for x in e['loc'])}: {e['msg']}" for e in errors())
        except (KeyError, TypeError):  # pragma: no cover - an error list without loc/msg: fall back to str
            pass
    return str(exc)


# ---------------------------------------------------------------------------------------------------------------
# Suite-specific options from extra ``--key value`` arguments


def parse_extra(model: type[BaseModel], args: Sequence[str]) -> BaseModel:
    """Parse ``--key value``, ``--key=value``, ``--flag`` / ``--no-flag`` (bool fields) and repeated list fields.

    Keys use dashes on the command line and underscores in the model. Unknown keys are a ``UsageError`` listing the
    suite's options.
    """
    fields = model.model_fields
    data: dict[str, Any] = {}
    i = 0
    args = list(args)

    def known() -> str:
        return ", ".join("--" + n.replace("_", "-") for n in fields) or "(none)"

    while i < len(args):
        arg = args[i]
        if not arg.startswith("--") or arg == "--":
            raise UsageError(f"unexpected argument {arg!r}", fix=f"suite options are: {known()}")
        key, eq, value = arg[2:].partition("=")
        name = key.replace("-", "_")
        negated = False
        if name not in fields and name.startswith("no_") and name[3:] in fields:
            name, negated = name[3:], True
        if name not in fields:
            raise UsageError(f"unknown option --{key} for this suite", fix=f"suite options are: {known()}")
        ann = fields[name].annotation
        is_bool = ann is bool or ann == (bool | None)
        is_list = getattr(ann, "__origin__", None) is list or str(ann).startswith(("list[", "typing.List", "list |"))
        if is_bool and not eq:
            data[name] = not negated
            i += 1
            continue
        if not eq:
            if i + 1 >= len(args):
                raise UsageError(f"option --{key} needs a value", fix=f"write --{key} VALUE")
            value = args[i + 1]
            i += 2
        else:
            i += 1
        if is_list:
            data.setdefault(name, []).extend(v for v in value.split(",") if v)
        else:
            data[name] = value
    try:
        return model(**data)
    except ValidationError as exc:
        raise UsageError(f"invalid suite options: {_short_validation(exc)}", fix=f"suite options are: {known()}") from None


def describe_extra(model: type[BaseModel]) -> list[tuple[str, str, str]]:
    """``(flag, default, help)`` per suite option, for help output."""
    out = []
    for name, f in model.model_fields.items():
        default = f.default if f.default_factory is None else f.default_factory()  # type: ignore[call-arg]
        out.append(("--" + name.replace("_", "-"), repr(default), f.description or ""))
    return out


# ---------------------------------------------------------------------------------------------------------------
# Telemetry helpers (duck-typed over the harness's GpuSample / WindowStats models)


def as_dict(obj: Any) -> dict[str, Any] | None:
    """A pydantic model, dataclass or mapping as a plain dict (None stays None)."""
    if obj is None:
        return None
    if isinstance(obj, dict):
        return dict(obj)
    if hasattr(obj, "model_dump"):
        return obj.model_dump(mode="json")
    if hasattr(obj, "__dataclass_fields__"):
        from dataclasses import asdict

        return asdict(obj)
    return dict(vars(obj))


def throttling(mask: int | None) -> bool | None:
    """True when a power or thermal clock-event bit is set (the idle bit is ignored); None when unknown."""
    if mask is None:
        return None
    return bool(int(mask) & POWER_THERMAL_BITS)


def gpu_metrics(sample: Any) -> dict[str, Any] | None:
    """A telemetry snapshot in the published ``gpu_metrics_before/after`` field names (plus the raw mask)."""
    s = as_dict(sample)
    if not s:
        return None
    mask = s.get("clock_event_reasons")
    t = s.get("t_wall_ns") or s.get("wall_ns")
    return {
        "gpu_temperature_celsius": s.get("temperature_c"),
        "gpu_power_watts": s.get("power_w"),
        "gpu_utilization_percent": s.get("utilization_pct"),
        "gpu_memory_used_mb": s.get("memory_used_mb"),
        "gpu_memory_total_mb": s.get("memory_total_mb"),
        "gpu_throttling_active": throttling(mask),
        "gpu_throttling_reference": None if mask is None else int(mask) != 0,
        "clock_event_reasons": mask,
        "gpu_sm_clock_mhz": s.get("sm_clock_mhz"),
        "gpu_memory_clock_mhz": s.get("mem_clock_mhz"),
        "timestamp": to_iso(int(t)) if t else None,
    }


def _finite(x: Any) -> float | None:
    if x is None:
        return None
    try:
        f = float(x)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


@dataclass
class Measured:
    """One measured call: wall-ns window edges, scaled-clock elapsed seconds, snapshots and the sampler window."""

    value: Any
    start_ns: int
    end_ns: int
    elapsed_s: float
    before: dict[str, Any] | None
    after: dict[str, Any] | None
    window: dict[str, Any]
    error: BaseException | None = None


def measure(telemetry: Any, clock: ScaledClock, fn: Callable[[], Any]) -> Measured:
    """Snapshot, run ``fn`` strictly inside a [start, end] window, snapshot, then ask the sampler for the window.

    Exceptions of ``fn`` are caught and returned in ``Measured.error`` so the window is still recorded.
    """
    before = as_dict(telemetry.snapshot())
    start_wall, start_mono = wall_ns(), mono_ns()
    value, err = None, None
    try:
        value = fn()
    except Exception as exc:  # noqa: BLE001 - recorded, not swallowed: the caller writes it into the trial
        err = exc
    end_mono, end_wall = mono_ns(), wall_ns()
    after = as_dict(telemetry.snapshot())
    window = window_for(telemetry, start_wall, end_wall)
    return Measured(value, start_wall, end_wall, clock.elapsed_s(start_mono, end_mono), before, after, window, err)


def window_for(telemetry: Any, start_ns: int, end_ns: int) -> dict[str, Any]:
    """The sampler's window over a wall-ns interval (also for trials timed by someone else, e.g. Harbor).

    Waits up to ``WINDOW_WAIT_S`` for a sample after the end edge where the source supports it (the in-process
    NVML sampler does not wait by default).
    """
    try:
        accepts_wait = "wait_s" in inspect.signature(telemetry.window).parameters
    except (TypeError, ValueError):
        accepts_wait = False
    if accepts_wait:
        return as_dict(telemetry.window(int(start_ns), int(end_ns), wait_s=WINDOW_WAIT_S)) or {}
    return as_dict(telemetry.window(int(start_ns), int(end_ns))) or {}


# ---------------------------------------------------------------------------------------------------------------
# Trials and rows


class PilotTrial(BaseModel):
    """One pilot trial (an instance or task at one config), whatever the suite, in harness units.

    ``telemetry_mode`` says how the row's GPU fields are filled: ``snapshots`` (SWE-bench: before/after snapshots
    bracketing the request) or ``window_average`` (Terminal-Bench: averages over the trial window, with null
    ``gpu_temp_c_before``, ``gpu_mem_used_mb`` and ``gpu_throttling``).
    """

    model_config = ConfigDict(extra="forbid")

    suite: Literal["swebench", "terminalbench"]
    config_name: str
    steps: int
    topk: int
    num_draft_tokens: int
    task_id: str
    status: str = "completed"
    success: bool | None = None
    start_ns: int | None = None
    end_ns: int | None = None
    elapsed_s: float | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    accept_length: float | None = None
    accept_length_source: str | None = None
    energy_joules: float | None = None
    avg_power_watts: float | None = None
    window: dict[str, Any] = Field(default_factory=dict)
    gpu_metrics_before: dict[str, Any] | None = None
    gpu_metrics_after: dict[str, Any] | None = None
    telemetry_mode: Literal["snapshots", "window_average"] = "snapshots"
    note: str = ""
    record: dict[str, Any] = Field(default_factory=dict)
    """The suite's full per-trial record (written to ``telemetry/<config>.jsonl``)."""
    evaluation: dict[str, Any] | None = None

    @property
    def output_tokens_per_s(self) -> float | None:
        if not self.completion_tokens or not self.elapsed_s:
            return None
        return self.completion_tokens / self.elapsed_s

    @property
    def joules_per_output_token(self) -> float | None:
        if self.energy_joules is None or not self.completion_tokens:
            return None
        return self.energy_joules / self.completion_tokens

    @property
    def window_valid(self) -> bool:
        return bool(self.window.get("valid"))


def energy_from_window(window: dict[str, Any]) -> tuple[float | None, float | None]:
    """(energy J, average W) from a sampler window: W = J / device-clock duration; an invalid window gives None."""
    if not window or not window.get("valid"):
        return None, None
    energy = _finite(window.get("energy_j"))
    dur = _finite(window.get("duration_s"))
    if energy is None:
        return None, None
    power = energy / dur if dur else _finite(window.get("avg_power_w"))
    return energy, power


def trial_row(
    trial: PilotTrial, *, hardware: str, index: int, run_id: str, **extras: Any
) -> dict[str, Any]:
    """The dataset row of one trial with the published pilot semantics (``harness.rows.pilot_row``), as a native record.

    ``is_baseline`` false even for no_spec; ``error`` starts with ``agentic_pilot_trace: ``; ``batch_size`` 1 (the
    real concurrency; the launch batch size goes to ``pilot_server_batch_size``); ``repeat`` and ``step_time_s``
    null. ``index`` is the trial's position in this run; ``harness dataset merge --pilots`` renumbers after the grid.
    SWE-bench rows take ``gpu_temp_c_before`` from the snapshot before the request and the other GPU columns from the
    snapshot after it; Terminal-Bench rows take window averages (``pilot_row`` nulls the before/mem/throttling
    columns). ``gpu_throttling`` keeps the published meaning (any clock-event bit, idle included) and
    ``gpu_throttling_power_thermal`` the corrected one.
    """
    w = trial.window
    tps = trial.output_tokens_per_s
    note = (
        f"{trial.suite} {trial.task_id} at {trial.config_name} {SpecConfig(trial.steps, trial.topk, trial.num_draft_tokens)}"
        f" ({trial.status}): {trial.note or 'end-to-end agentic request (prefill, decode and HTTP), not controlled decode throughput'}"
    )
    b, a = trial.gpu_metrics_before or {}, trial.gpu_metrics_after or {}
    if trial.telemetry_mode == "snapshots":
        temp_before = _finite(b.get("gpu_temperature_celsius"))
        temp, power_now = _finite(a.get("gpu_temperature_celsius")), _finite(a.get("gpu_power_watts"))
        util, mem = _finite(a.get("gpu_utilization_percent")), _finite(a.get("gpu_memory_used_mb"))
        mask = a.get("clock_event_reasons")
    else:
        temp_before, mem = None, None
        temp, power_now, util = _finite(w.get("avg_temp_c")), trial.avg_power_watts, _finite(w.get("avg_util_pct"))
        mask = w.get("clock_event_reasons_or")
    mask = int(mask) if mask is not None else None
    published_throttle, power_thermal = throttling_flags(mask)
    fields: dict[str, Any] = dict(
        accept_length=trial.accept_length,
        speed_tok_s=tps,
        wall_clock_s=trial.elapsed_s,
        wall_clock_tok_s=tps,
        total_output_tokens=trial.completion_tokens,
        energy_joules=trial.energy_joules,
        avg_power_watts=trial.avg_power_watts,
        joules_per_token=trial.joules_per_output_token,
        gpu_temp_c_before=temp_before,
        gpu_temp_c=temp,
        gpu_power_w=power_now,
        gpu_util_pct=util,
        gpu_mem_used_mb=mem,
        gpu_throttling=published_throttle,
        run_id=run_id,
        cell_id=make_pilot_cell_id(trial.suite, trial.config_name, trial.task_id),
        recorded_wall_ns=wall_ns(),
        window_start_ns=trial.start_ns,
        window_end_ns=trial.end_ns,
        window_duration_s=_finite(w.get("duration_s")),
        window_wall_duration_s=_finite(w.get("wall_duration_s")),
        window_valid=bool(w.get("valid")) if w else None,
        window_reasons=[str(r) for r in (w.get("reasons") or [])],
        window_sample_count=w.get("sample_count"),
        window_coverage=_finite(w.get("coverage")),
        window_avg_util_pct=_finite(w.get("avg_util_pct")),
        window_max_temp_c=_finite(w.get("max_temp_c")),
        window_max_power_w=_finite(w.get("max_power_w")),
        window_clock_event_reasons_or=w.get("clock_event_reasons_or"),
        clock_event_reasons=mask,
        gpu_throttling_power_thermal=power_thermal,
        energy_source=w.get("energy_method"),
        accept_length_source=trial.accept_length_source,
        pre_gpu_temp_c=_finite(b.get("gpu_temperature_celsius")),
        pre_gpu_mem_used_mb=_finite(b.get("gpu_memory_used_mb")),
        pre_gpu_util_pct=_finite(b.get("gpu_utilization_percent")),
        pre_gpu_power_w=_finite(b.get("gpu_power_watts")),
        gpu_name=w.get("gpu_name"),
        gpu_uuid=w.get("gpu_uuid"),
        pilot_task=trial.task_id,
        pilot_config_name=trial.config_name,
        pilot_success=trial.success,
        extras={"prompt_tokens": trial.prompt_tokens, "status": trial.status},
    )
    for k, v in extras.items():
        if k == "extras":
            fields["extras"].update(v)
        else:
            fields[k] = v
    row = pilot_row(
        suite=trial.suite, hardware=hardware, index=index,
        config=SpecConfig(trial.steps, trial.topk, trial.num_draft_tokens), note=note, **fields,
    )
    return to_native(row)


# ---------------------------------------------------------------------------------------------------------------
# The runner


@dataclass
class ConfigRun:
    """What a suite's per-config function gets: one running server and the world's telemetry and clock."""

    name: str
    config: SpecConfig
    server: Any
    telemetry: Any
    clock: ScaledClock
    options: PilotOptions
    run_dir: Path
    launch_s: float | None = None
    world: Any = None

    @property
    def base_url(self) -> str:
        return str(self.server.base_url)

    def measure(self, fn: Callable[[], Any]) -> Measured:
        return measure(self.telemetry, self.clock, fn)

    def trial(self, task_id: str, **kw: Any) -> PilotTrial:
        """A ``PilotTrial`` pre-filled with this config's identity."""
        return PilotTrial(
            suite=self.options.suite, config_name=self.name, steps=self.config.steps, topk=self.config.topk,
            num_draft_tokens=self.config.draft_tokens, task_id=task_id, **kw,
        )


PerConfigFn = Callable[[ConfigRun], list[PilotTrial]]


@dataclass
class ConfigOutcome:
    name: str
    config: SpecConfig
    trials: list[PilotTrial] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)


@dataclass
class PilotResult:
    run_dir: Path
    outcomes: list[ConfigOutcome]
    rows: list[dict[str, Any]]
    manifest: PilotManifest

    @property
    def trials(self) -> list[PilotTrial]:
        return [t for o in self.outcomes for t in o.trials]


def server_stats(server: Any) -> dict[str, Any]:
    """``avg_spec_accept_length`` (server lifetime, warm-up included) and the raw server info, best effort."""
    try:
        info = server.client.server_info()
    except Exception as exc:  # noqa: BLE001 - best effort: the error is recorded in the stats instead
        return {"avg_spec_accept_length": None, "server_info_error": f"{type(exc).__name__}: {exc}"}
    d = as_dict(info) or {}
    return {"avg_spec_accept_length": _finite(d.get("avg_spec_accept_length")), "server_info": d,
            "attention_backend": info.attention_backend}


def warm_up(server: Any) -> dict[str, Any]:
    """The published pilot warm-up: one short deterministic request."""
    t0 = time.monotonic()
    res = server.client.generate("Return the single word READY.", max_new_tokens=8, temperature=0.0, ignore_eos=False,
                                 rid=f"pilot-warmup-{mono_ns()}")
    return {"warmup_s": time.monotonic() - t0, "warmup_completion_tokens": getattr(res, "completion_tokens", None)}


def _engine_spec(options: PilotOptions, twin_gpu_url: str | None) -> Any:
    return EngineSpec(
        kind=options.engine, model_path=options.model_path, draft_model_path=options.draft_model_path,
        sglang_version=options.sglang_version, twin_gpu_url=twin_gpu_url,
        twin_seed=options.seed if options.engine == "twin" else None, twin_faults=tuple(options.twin_faults),
    )


def _open_world(options: PilotOptions, run_dir: Path) -> Any:
    return open_world(
        engine=options.engine, sampler_url=options.sampler_url, twin_gpu_url=options.twin_gpu_url,
        time_scale=options.time_scale, seed=options.seed, run_dir=run_dir, spec=_engine_spec(options, options.twin_gpu_url),
        launch_timeout_s=options.launch_timeout, request_timeout_s=options.request_timeout,
    )


class PilotRunner:
    """Runs a suite's per-config function against a fresh server per config and writes every shared output."""

    def __init__(self, options: PilotOptions, *, suite_meta: dict[str, Any] | None = None, console: Any = None) -> None:
        self.options = options
        self.suite_meta = dict(suite_meta or {})
        self.run_dir = options.run_dir
        self.console = console
        self.configs = options.selected_configs()

    def _log(self, text: str) -> None:
        if self.console is not None:
            self.console.print(text, highlight=False)

    def run(self, per_config: PerConfigFn, *, finalize: Callable[[PilotResult], None] | None = None) -> PilotResult:
        """Open the world, run every config, write the outputs; ``finalize`` may add evaluations before reports."""
        requested = self.options.sglang_version
        version = resolve_version(requested, self.options.engine, EngineSpec(kind=self.options.engine).python)
        self.options = o = self.options.model_copy(update={"sglang_version": version})  # before anything is written
        rd = self.run_dir
        rd.mkdir(parents=True, exist_ok=True)
        manifest = PilotManifest(
            suite=o.suite, run_id=o.run_id, options=o.model_dump(mode="json"), sglang_version=version,
            sglang_version_requested=requested, configs={n: c.as_list() for n, c in self.configs.items()},
            server_batch_size=o.server_batch_size, effective_concurrency=1, suite_meta=self.suite_meta,
            host=socket.gethostname(),
        )
        manifest.save(rd)
        try:
            return self._run(per_config, finalize, manifest)
        except BaseException as exc:
            manifest.failed(f"{type(exc).__name__}: {exc}")
            manifest.save(rd)
            raise

    def _run(self, per_config: PerConfigFn, finalize: Callable[[PilotResult], None] | None,
             manifest: PilotManifest) -> PilotResult:
        o = self.options
        rd = self.run_dir
        outcomes: list[ConfigOutcome] = []
        with ExitStack() as stack:
            world = stack.enter_context(_open_world(o, rd))
            manifest.record_world(world, best_effort=True)
            manifest.save(rd)
            clock = getattr(world, "clock", None) or WALL_CLOCK
            with JsonlAppender(rd / "telemetry" / "config_summaries.jsonl") as summaries:
                for name, cfg in self.configs.items():
                    outcome = self._run_config(world, clock, name, cfg, per_config)
                    summaries.append(outcome.summary)
                    outcomes.append(outcome)
        rows: list[dict[str, Any]] = []
        for oc in outcomes:
            for t in oc.trials:
                rows.append(trial_row(
                    t, hardware=str(manifest.hardware or "unknown_gpu"), index=len(rows), run_id=o.run_id,
                    pilot_server_batch_size=o.server_batch_size, mem_fraction=o.mem_fraction,
                    launch_s=_finite(oc.summary.get("launch_s")), sglang_version=o.sglang_version,
                    time_scale=o.time_scale, power_limit_w=_finite(manifest.power_limit_w),
                    engine={"kind": o.engine, "version": o.sglang_version},
                    attention_backend=oc.summary.get("attention_backend"),
                ))
        result = PilotResult(rd, outcomes, rows, manifest)
        if finalize is not None:
            finalize(result)
        write_jsonl_atomic(
            rd / "reports" / "merged.jsonl",
            [{"suite": o.suite, "config": t.config_name, "task_id": t.task_id, "record": t.record,
              "evaluation": t.evaluation} for t in result.trials],
        )
        write_jsonl_atomic(rd / "dataset_rows.jsonl", result.rows)
        manifest.outputs = _listing(rd)
        manifest.finished()
        manifest.save(rd)
        return result

    def _run_config(self, world: Any, clock: ScaledClock, name: str, cfg: SpecConfig, per_config: PerConfigFn) -> ConfigOutcome:
        o = self.options
        outcome = ConfigOutcome(name, cfg)
        summary: dict[str, Any] = {
            "config": name, "steps": cfg.steps, "topk": cfg.topk, "num_draft_tokens": cfg.draft_tokens,
            "server_batch_size": o.server_batch_size, "effective_concurrency": 1, "error": None,
        }
        log_path = self.run_dir / "logs" / f"server-{name}.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        t0 = mono_ns()
        self._log(f"[bold]{o.suite}[/] config [cyan]{name}[/] {cfg}: launching server for batch {o.server_batch_size}")
        try:
            server = world.launcher.launch(cfg, o.server_batch_size, o.mem_fraction, log_path=log_path)
        except HarnessError as exc:
            summary.update(status="server_start_error", error=exc.message, launch_s=(mono_ns() - t0) / 1e9)
            self._log(f"  [red]server failed to start[/]: {exc.message}")
            outcome.summary = summary
            return outcome
        try:
            summary["launch_s"] = (mono_ns() - t0) / 1e9
            summary["base_url"] = str(server.base_url)
            try:
                summary.update(warm_up(server))
            except HarnessError as exc:
                summary.update(status="warmup_error", error=exc.message, wall_clock_s=(mono_ns() - t0) / 1e9)
                self._log(f"  [red]warm-up failed[/]: {exc.message}")
                outcome.summary = summary
                return outcome
            run = ConfigRun(name, cfg, server, world.telemetry, clock, o, self.run_dir, summary["launch_s"], world)
            outcome.trials = list(per_config(run))
            stats = server_stats(server)
        finally:
            _safe(server.stop)
        summary["wall_clock_s"] = (mono_ns() - t0) / 1e9
        summary["avg_spec_accept_length"] = stats.get("avg_spec_accept_length")
        summary["server_info"] = stats.get("server_info")
        summary["attention_backend"] = stats.get("attention_backend")
        server_avg = stats.get("avg_spec_accept_length")
        for t in outcome.trials:
            if t.accept_length is None:
                if cfg.is_baseline:
                    t.accept_length, t.accept_length_source = 1.0, "no_speculation"
                elif server_avg is not None:
                    t.accept_length, t.accept_length_source = server_avg, "server_average"
        summary["status"] = "completed"
        summary["trials"] = len(outcome.trials)
        summary.update(_means(outcome.trials))
        with JsonlAppender(self.run_dir / "telemetry" / f"{name}.jsonl") as out:
            for t in outcome.trials:
                out.append({**t.record, "accept_length": t.accept_length, "accept_length_source": t.accept_length_source})
        outcome.summary = summary
        return outcome


def _listing(rd: Path) -> list[str]:
    """Output files of a run folder, without checkouts (``repositories/``) and git internals."""
    out = []
    for p in rd.rglob("*"):
        rel = p.relative_to(rd)
        if p.is_file() and rel.parts[0] != "repositories" and ".git" not in rel.parts and rel.name != "manifest.json":
            out.append(str(rel))
    return sorted(out)


def _means(trials: Iterable[PilotTrial]) -> dict[str, Any]:
    ts = list(trials)

    def mean(vals: list[float | None]) -> float | None:
        v = [x for x in vals if x is not None]
        return sum(v) / len(v) if v else None

    return {
        "mean_output_tokens_per_s": mean([t.output_tokens_per_s for t in ts]),
        "mean_energy_joules": mean([t.energy_joules for t in ts]),
        "mean_avg_power_watts": mean([t.avg_power_watts for t in ts]),
        "mean_accept_length": mean([t.accept_length for t in ts]),
        "valid_windows": sum(1 for t in ts if t.window_valid),
    }


def _safe(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001 - best effort: the error is recorded in place of the value
        return {"error": f"{type(exc).__name__}: {exc}"}


# ---------------------------------------------------------------------------------------------------------------
# Console


def pilot_console(*, stderr: bool = False) -> Any:
    """A rich console; when output is not a terminal it is 160 columns wide (``COLUMNS`` overrides)."""
    stream = sys.stderr if stderr else sys.stdout
    width = None if stream.isatty() else int(os.environ.get("COLUMNS", "160"))
    return Console(stderr=stderr, highlight=False, width=width)


def check_result(result: "PilotResult") -> None:
    """Raise ``EngineLaunchError`` when no config produced a trial because every server failed to start."""
    failed = [o for o in result.outcomes if o.summary.get("status") in ("server_start_error", "warmup_error")]
    if result.outcomes and len(failed) == len(result.outcomes):
        raise EngineLaunchError(
            f"every pilot server failed to start ({failed[0].name}: {failed[0].summary.get('error')})",
            fix=f"see the server logs under {result.run_dir / 'logs'}; outputs so far are in {result.run_dir}",
        )


def summary_table(title: str, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> Any:
    """A rich table; floats get 3 significant decimals, None prints as a dash."""
    table = Table(title=title, show_lines=False)
    text_cols = ("config", "task", "instance", "status", "patch", "evaluation", "success")
    rows = [[fmt(v) for v in r] for r in rows]
    for i, c in enumerate(columns):
        if c in text_cols:
            width = max([len(c)] + [len(r[i]) for r in rows if i < len(r)])
            table.add_column(c, justify="left", no_wrap=True, min_width=min(width, 40))
        else:
            table.add_column(c, justify="right")
    for r in rows:
        table.add_row(*r)
    return table


def fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:,.3f}" if abs(v) < 10 else f"{v:,.1f}"
    return str(v)
