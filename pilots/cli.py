"""``harness pilot --suite swebench|terminalbench [common flags] [suite flags]`` and ``harness pilot setup``.

The common flags are declared once in ``pilots.common.common_flags``. Suite flags are everything the group does not
know; they are parsed into the suite's own pydantic model ``pilots.<suite>.runner.SUITE_OPTIONS`` (``--key value``,
``--flag``/``--no-flag``) and handed to ``pilots.<suite>.runner.run(options, extra)``. A suite module without
``SUITE_OPTIONS`` gets the raw list of extra arguments. ``--suite-help`` lists a suite's own flags.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

import typer
from rich.console import Console
from rich.table import Table
from typer._click.core import ParameterSource
from typer.core import TyperGroup

from pilots.common import SUITES, PilotResult, check_result, common_flags, describe_extra, options_from_flags, parse_extra
from harness.errors import UsageError

_EXTRA_KEY = "pilot_extra_args"


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
