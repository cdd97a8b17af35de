"""``harness pilot --suite swebench|terminalbench [common flags] [suite flags]`` and ``harness pilot setup``.

The common flags are declared once in ``common_flags`` (defaults and help from ``pilots.options.PilotOptions``). Suite flags are everything the group does not
know; they are parsed into the suite's own pydantic model ``pilots.<suite>.runner.SUITE_OPTIONS`` (``--key value``,
``--flag``/``--no-flag``) and handed to ``pilots.<suite>.runner.run(options, extra)``. A suite module without
``SUITE_OPTIONS`` gets the raw list of extra arguments. ``--suite-help`` lists a suite's own flags.
"""

from __future__ import annotations

import functools
import importlib
import inspect
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import typer
from pydantic import BaseModel
from rich.console import Console
from rich.table import Table
from typer._click.core import ParameterSource
from typer.core import TyperGroup

from harness.errors import UsageError
from pilots.console import check_result
from pilots.options import DEFAULT_CONFIGS, PUBLISHED_PILOT_MEM_FRACTION, PUBLISHED_SERVER_BATCH_SIZE, SUITES, PilotOptions, options_from_flags, validated
from pilots.runner import PilotResult

_EXTRA_KEY = "pilot_extra_args"


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
        _Flag("twin_gpu_url", str | None, typer.Option(None, "--twin-gpu", help="Use a running twin GPU device URL.")),
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
    return validated(model, data)


def describe_extra(model: type[BaseModel]) -> list[tuple[str, str, str]]:
    """``(flag, default, help)`` per suite option, for help output."""
    out = []
    for name, f in model.model_fields.items():
        default = f.default if f.default_factory is None else f.default_factory()  # type: ignore[call-arg]
        out.append(("--" + name.replace("_", "-"), repr(default), f.description or ""))
    return out


class PilotGroup(TyperGroup):
    """A group that runs its callback when the first leftover argument is not a subcommand (suite flags).

    Without a subcommand, common and suite flags may come in any order (interspersed parsing; unknown options and
    their values are kept for the suite). With a subcommand (``setup``), the flags before it belong to the group
    (``docker compose run pilot setup ...`` puts ``--engine``/``--sampler-url`` there) and are inherited by the
    subcommand unless it sets them itself; everything after it is the subcommand's.
    """

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        ctx.allow_interspersed_args = not any(a in self.commands for a in args)
        return super().parse_args(ctx, args)

    def invoke(self, ctx: Any) -> Any:
        leftover = [*ctx._protected_args, *ctx.args]
        if leftover and leftover[0] not in self.commands:
            ctx.meta[_EXTRA_KEY] = leftover
            ctx._protected_args = []
            ctx.args = []
        return super().invoke(ctx)


def _suite_module(suite: str, part: str) -> Any:
    if suite not in SUITES:
        raise UsageError(f"unknown suite {suite!r}", fix="use --suite swebench or --suite terminalbench")
    name = f"pilots.{suite}.{part}"
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name and name.startswith(exc.name):
            raise UsageError(f"the {suite} pilot has no {part} module yet ({name})", fix="update the checkout") from None
        raise


def _parse_suite_extra(module: Any, extra: list[str]) -> Any:
    model = getattr(module, "SUITE_OPTIONS", None)
    return parse_extra(model, extra) if model is not None else list(extra)


def _print_suite_help(suite: str) -> None:
    module = _suite_module(suite, "runner")
    model = getattr(module, "SUITE_OPTIONS", None)
    table = Table(title=f"harness pilot --suite {suite}: suite options")
    for c in ("flag", "default", "meaning"):
        table.add_column(c)
    for row in describe_extra(model) if model is not None else []:
        table.add_row(*row)
    Console().print(table)


def _inherit_group_flags(ctx: Any, flags: dict[str, Any]) -> dict[str, Any]:
    """Common flags given before the subcommand (on the group) fill those the subcommand left at their default."""
    parent = ctx.parent
    if parent is None:
        return flags
    out = dict(flags)
    for name in flags:
        mine = ctx.get_parameter_source(name)
        theirs = parent.get_parameter_source(name)
        if mine in (None, ParameterSource.DEFAULT) and theirs not in (None, ParameterSource.DEFAULT):
            out[name] = parent.params.get(name)
    return out


def register(app: typer.Typer, groups: dict[str, typer.Typer]) -> None:
    group = groups["pilot"]

    @group.callback(
        cls=PilotGroup,
        invoke_without_command=True,
        no_args_is_help=True,
        context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
    )
    @common_flags()
    def pilot(
        ctx: typer.Context,
        suite_help: bool = typer.Option(False, "--suite-help", help="List the suite's own options and exit."),
        flags: dict | None = None,
    ) -> None:
        """Run an agentic pilot: `harness pilot --suite swebench|terminalbench [flags] [suite flags]`."""
        if ctx.invoked_subcommand is not None:
            return
        flags = flags or {}
        suite = flags.get("suite")
        if suite_help:
            _print_suite_help(suite or "")
            raise typer.Exit(0)
        options = options_from_flags(flags)
        module = _suite_module(options.suite, "runner")
        extra = _parse_suite_extra(module, ctx.meta.get(_EXTRA_KEY, []))
        result = module.run(options, extra)
        if isinstance(result, PilotResult):
            check_result(result)

    @group.command("setup", context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
    @common_flags()
    def setup(ctx: typer.Context, flags: dict | None = None) -> None:
        """Prepare a suite's tools (e.g. the isolated Harbor venv for terminalbench)."""
        options = options_from_flags(_inherit_group_flags(ctx, flags or {}))
        module = _suite_module(options.suite, "setup")
        fn = module.setup
        if len(inspect.signature(fn).parameters) >= 2:
            fn(options, _parse_suite_extra(module, list(ctx.args)))
        elif ctx.args:
            raise UsageError(f"unexpected arguments {ctx.args}", fix=f"`harness pilot setup --suite {options.suite} --help`")
        else:
            fn(options)
