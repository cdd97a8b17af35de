"""Command-line flags of the pilots, each declared once as an ``Annotated`` type whose help, shown default and help
panel come from the options model field it fills (``PilotOptions`` or a suite's model).

Every flag defaults to None (not given): the model's own default applies, and a flag given before the subcommand
(``harness pilot --engine sglang terminalbench``) fills one the subcommand left out (``values``). The commands read
their flags from the click context (``ctx.params``), so a command's function only declares them.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Annotated, Any, Callable, Literal, Optional

import typer
from pydantic import BaseModel

from pilots.options import PilotOptions

COMMON_PANEL = "Common pilot options"


def opt(model: type[BaseModel], field: str, panel: str, *decls: str) -> Any:
    """A ``typer.Option`` for ``model.field``: its description as help, its default as the shown default."""
    info = model.model_fields[field]
    default = info.get_default(call_default_factory=True)
    shown = ",".join(map(str, default)) if isinstance(default, list) else default
    return typer.Option(
        *decls,
        help=info.description,
        rich_help_panel=panel,
        show_default=str(shown) if shown not in (None, "") else False,
    )


def _common(field: str, *decls: str) -> Any:
    return opt(PilotOptions, field, COMMON_PANEL, *decls)


# The common flags (``PilotOptions``); Optional[...] because typer needs it for a None default.
Engine = Annotated[Optional[Literal["sglang", "twin"]], _common("engine")]
EngineDevice = Annotated[Optional[Literal["gpu", "cpu"]], _common("engine_device")]
EngineArgs = Annotated[Optional[list[str]], _common("engine_args", "--engine-arg")]
TimeScale = Annotated[Optional[float], _common("time_scale")]
Out = Annotated[Optional[Path], _common("out")]
SamplerUrl = Annotated[Optional[str], _common("sampler_url")]
TwinGpu = Annotated[Optional[str], _common("twin_gpu_url", "--twin-gpu")]
TwinProfile = Annotated[Optional[str], _common("twin_profile")]
Configs = Annotated[Optional[list[str]], _common("configs")]
Fixture = Annotated[Optional[bool], _common("fixture", "--fixture/--no-fixture")]
ServerBatchSize = Annotated[Optional[int], _common("server_batch_size")]
MemFraction = Annotated[Optional[float], _common("mem_fraction")]
Seed = Annotated[Optional[int], _common("seed")]
SglangVersion = Annotated[Optional[str], _common("sglang_version")]
ModelPath = Annotated[Optional[str], _common("model_path")]
DraftModelPath = Annotated[Optional[str], _common("draft_model_path")]
RequestTimeout = Annotated[Optional[float], _common("request_timeout")]
LaunchTimeout = Annotated[Optional[float], _common("launch_timeout")]
TwinFaults = Annotated[Optional[list[str]], _common("twin_faults", "--twin-fault")]

COMMON: tuple[tuple[str, Any], ...] = (
    ("engine", Engine),
    ("engine_device", EngineDevice),
    ("engine_args", EngineArgs),
    ("time_scale", TimeScale),
    ("out", Out),
    ("sampler_url", SamplerUrl),
    ("twin_gpu_url", TwinGpu),
    ("twin_profile", TwinProfile),
    ("configs", Configs),
    ("fixture", Fixture),
    ("server_batch_size", ServerBatchSize),
    ("mem_fraction", MemFraction),
    ("seed", Seed),
    ("sglang_version", SglangVersion),
    ("model_path", ModelPath),
    ("draft_model_path", DraftModelPath),
    ("request_timeout", RequestTimeout),
    ("launch_timeout", LaunchTimeout),
    ("twin_faults", TwinFaults),
)
"""The common flags, listed once: every pilot command (the group, each suite, ``setup``) takes them."""


def with_common_flags(command: Callable[..., Any]) -> Callable[..., Any]:
    """``command`` (its own flags, then ``**common``) presented to typer with the common flags after its own."""
    from harness.core.model_options import with_parameters

    return with_parameters(
        command,
        [
            inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=kind)
            for name, kind in COMMON
        ],
    )


def values(ctx: typer.Context) -> dict[str, Any]:
    """The flags a command was given (``ctx.params``): flags left out are filled from the same flags given to the
    ``harness pilot`` group; still-missing ones are dropped (the model's default applies)."""
    parent = ctx.parent.params if ctx.parent is not None else {}
    out: dict[str, Any] = {}
    for name, value in ctx.params.items():
        whole = name in WHOLE_ITEMS
        value = _given(value, whole)
        if value is None:
            value = _given(parent.get(name), whole)
        if value is not None:
            out[name] = value
    return out


WHOLE_ITEMS = frozenset({"engine_args"})
"""Repeated flags whose items are never split on commas (an engine flag may hold one: ``--cuda-graph-bs=1,2,4``)."""


def _given(value: Any, whole: bool = False) -> Any:
    """A flag's value, None when not given (typer gives an empty list for a list flag left out); repeated list flags
    are split on commas (unless ``whole``) and flattened."""
    if isinstance(value, (list, tuple)):
        return [p for v in value for p in ([str(v)] if whole else str(v).split(",")) if p] or None
    return value


def split(flags: dict[str, Any], model: type[BaseModel]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the flags that are ``model`` fields, the rest)."""
    mine = {k: v for k, v in flags.items() if k in model.model_fields}
    return mine, {k: v for k, v in flags.items() if k not in mine}


RunSuite = Callable[[typer.Context, str], None]
"""How a suite's command runs once its flags are parsed (they are in the context): (context, suite)."""
