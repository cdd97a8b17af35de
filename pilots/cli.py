"""``harness pilot swebench|terminalbench [flags]`` and ``harness pilot setup --suite terminalbench [flags]``.

Each suite is a real subcommand whose flags are its options models' fields: the common ones (``PilotOptions``,
declared once in ``pilots.cli_flags``) and the suite's own (``pilots.<suite>.cli``), each group in its own help
panel. Common flags may also come before the subcommand (``harness pilot --engine sglang terminalbench``, as the
compose ``pilot`` service's entrypoint does); the subcommand's own value wins. The older spelling
``harness pilot --suite NAME [flags]`` still works: ``PilotGroup`` reads it as the ``NAME`` subcommand.
"""

from __future__ import annotations

import importlib
from typing import Annotated, Any, Optional, Sequence

import typer
from typer._click.exceptions import NoSuchOption
from typer.core import TyperCommand, TyperGroup

from harness.core.errors import UsageError
from pilots import cli_flags as f
from pilots.options import SUITES, PilotOptions, options_from_flags, validated
from pilots.terminalbench import cli as terminalbench_cli

SUITE_HELP = ["-h", "--help", "--suite-help"]


def suite_first(args: Sequence[str], commands: Sequence[str]) -> list[str]:
    """``[..., "--suite", "swebench", ...]`` -> ``["swebench", ...]`` when the suite is known and no other argument
    names a subcommand (the old ``harness pilot --suite NAME`` command lines); anything else unchanged."""
    out = list(args)
    for i, a in enumerate(out):
        if a == "--suite" and i + 1 < len(out):
            name, rest = out[i + 1], out[:i] + out[i + 2 :]
        elif a.startswith("--suite="):
            name, rest = a.removeprefix("--suite="), out[:i] + out[i + 1 :]
        else:
            continue
        if name in SUITES and not any(r in commands for r in rest):
            return [name, *rest]
        return out
    return out


class PilotGroup(TyperGroup):
    """The ``harness pilot`` group; accepts ``--suite NAME`` for the ``NAME`` subcommand (``suite_first``)."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        return super().parse_args(ctx, suite_first(args, list(self.commands)))


class PilotCommand(TyperCommand):
    """A pilot subcommand; an unknown flag is a ``UsageError`` naming it and pointing at the command's help."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except NoSuchOption as exc:
            raise UsageError(
                f"unknown option {exc.option_name} for `harness pilot {self.name}`",
                fix=f"see `harness pilot {self.name} --help` for its flags",
            ) from None


def _suite_module(suite: str, part: str) -> Any:
    if suite not in SUITES:
        raise UsageError(
            f"unknown suite {suite!r}", fix="use `harness pilot swebench` or `harness pilot terminalbench`"
        )
    name = f"pilots.{suite}.{part}"
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name and name.startswith(exc.name):
            raise UsageError(f"the {suite} pilot has no {part} module ({name})", fix="update the checkout") from None
        raise


def run_suite(ctx: typer.Context, suite: str) -> None:
    """Build the suite's options from the parsed flags and run it (``pilots.<suite>.runner.run``)."""
    common, own = f.split(f.values(ctx), PilotOptions)
    options = options_from_flags(common, suite)
    module = _suite_module(suite, "runner")
    result = module.run(options, validated(module.SUITE_OPTIONS, own))
    from pilots.console import check_result  # the runner's imports load on a run, not on every `harness` command
    from pilots.runner import PilotResult

    if isinstance(result, PilotResult):
        check_result(result)


def register(app: typer.Typer, groups: dict[str, typer.Typer]) -> None:
    group = groups["pilot"]
    command = {"cls": PilotCommand, "context_settings": {"help_option_names": SUITE_HELP}}

    @group.callback(
        cls=PilotGroup,
        invoke_without_command=True,
        no_args_is_help=True,
        context_settings={"help_option_names": ["-h", "--help"]},
    )
    def pilot(
        ctx: typer.Context,
        suite: Annotated[
            Optional[str], typer.Option(help="Same as the SUITE subcommand (older command lines).")
        ] = None,
        **common: Any,
    ) -> None:
        """Run an agentic pilot: `harness pilot swebench|terminalbench [flags]` (common flags may come first)."""
        if ctx.invoked_subcommand is None:  # flags but no suite (a known --suite became the subcommand)
            if suite is None:
                raise UsageError("no pilot suite given", fix="use `harness pilot swebench|terminalbench [flags]`")
            _suite_module(suite, "runner")  # names the unknown suite

    f.with_common_flags(pilot)

    from pilots.swebench import cli as swebench_cli

    swebench_cli.register(group, run_suite, **command)
    terminalbench_cli.register(group, run_suite, **command)

    @group.command("setup", cls=PilotCommand, context_settings={"help_option_names": ["-h", "--help"]})
    def setup(
        ctx: typer.Context,
        suite: Annotated[
            Optional[str], typer.Option(help="The suite to prepare (terminalbench: the Harbor venv).")
        ] = None,
        harbor_bin: terminalbench_cli.SetupHarborBin = None,
        venv: terminalbench_cli.SetupVenv = None,
        python: terminalbench_cli.SetupPython = None,
        harbor_version: terminalbench_cli.SetupHarborVersion = None,
        force: terminalbench_cli.SetupForce = None,
        **common: Any,
    ) -> None:
        """Prepare a suite's tools (terminalbench: the isolated Harbor venv, or a check of --harbor-bin)."""
        given = f.values(ctx)
        suite_name = given.pop("suite", None)
        common, own = f.split(given, PilotOptions)
        options = options_from_flags(common, suite_name)
        module = _suite_module(options.suite, "setup")
        module.setup(options, validated(module.SUITE_OPTIONS, own))

    f.with_common_flags(setup)
