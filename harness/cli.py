"""The ``harness`` command line (typer + rich).

Each concern registers its own commands through a ``register(app, groups)`` function in its own ``cli`` module,
so this file only wires them together and maps ``HarnessError`` to a clear message and an exit code.
CLI modules must import heavy libraries (torch, sklearn, datasets, matplotlib) inside their commands, never at
module level: ``harness twin engine`` is launched hundreds of times per sweep and must start fast, and those
libraries are optional extras (``harness.core.extras``): a missing one becomes ``error: ... needs torch`` with the
``pip install 'eagle-energy-harness[policies]'`` fix and exit code 7.
"""

from __future__ import annotations

import importlib
import sys

import typer

from harness.core.errors import HarnessError

GROUPS = {
    "twin": "The GPU-free digital twin: a GPU device and an sglang-compatible engine.",
    "sampler": "The GPU telemetry sampler sidecar.",
    "gpu-settings": "The GPU settings agent: power caps and SM clocks for non-root runs.",
    "dataset": "Validate, merge, compare and export sweep datasets.",
    "report": "Rich tables and figures for sweeps and policies.",
    "pilot": "Agentic pilots (SWE-bench Lite, Terminal-Bench) at the pilot configs.",
}

# Modules that contribute commands, in help order. A module that does not exist yet is skipped.
REGISTRARS = [
    "harness.sweep.cli",
    "harness.dataset.cli",
    "harness.twin.cli",
    "harness.telemetry.cli",
    "harness.gpu.settings_cli",
    "policies.cli",
    "pilots.cli",
    "harness.serve.cli",
    "harness.engine.cli",
]


# Each command loads only the modules that register it (the twin engine is launched once per sweep cell, and every
# command is a process a script or a test starts): a command not named here (``--help``) loads them all.
# tests/core/test_cli_fast_paths.py checks this map against what each module registers.
FAST_PATHS = {
    "version": [],
    "sweep": ["harness.sweep.cli"],
    "reproduce": ["harness.sweep.cli"],
    "status": ["harness.sweep.cli"],
    "dataset": ["harness.dataset.cli"],
    "report": ["harness.dataset.cli", "policies.cli"],
    "twin": ["harness.twin.cli"],
    "sampler": ["harness.telemetry.cli"],
    "gpu-settings": ["harness.gpu.settings_cli"],
    "train": ["policies.cli"],
    "evaluate": ["policies.cli"],
    "recommend": ["policies.cli"],
    "pilot": ["pilots.cli"],
    "serve": ["harness.serve.cli"],
    "image-tag": ["harness.engine.cli"],
}


def build_app(first_arg: str | None = None) -> typer.Typer:
    app = typer.Typer(
        name="harness",
        help="Energy-aware speculative decoding: sweep sglang EAGLE3 configs, measure GPU energy, learn policies.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
    )

    @app.callback()
    def _root() -> None:
        """Energy-aware speculative decoding: sweep sglang EAGLE3 configs, measure GPU energy, learn policies."""

    @app.command()
    def version() -> None:
        """Print the harness version."""
        from harness import __version__

        typer.echo(__version__)

    groups = {name: typer.Typer(help=text, no_args_is_help=True) for name, text in GROUPS.items()}
    for module_name in FAST_PATHS.get(first_arg or "", REGISTRARS):
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name and module_name.startswith(exc.name):
                continue
            raise
        module.register(app, groups)
    for name, group in groups.items():
        if group.registered_commands or group.registered_groups:
            app.add_typer(group, name=name)
    return app


def main(argv: list[str] | None = None) -> int:
    """Entry point: run the app; a HarnessError becomes ``error: ...`` / ``fix: ...`` and its exit code."""
    args = argv if argv is not None else sys.argv[1:]
    app = build_app(args[0] if args else None)
    try:
        rv = app(args=args, prog_name="harness", standalone_mode=False)
        # In non-standalone mode typer returns exit codes (typer.Exit(code), Ctrl-C's 130) instead of raising.
        if isinstance(rv, int) and rv:
            return rv
    except HarnessError as exc:
        _print_error(exc.message, exc.fix, getattr(exc, "source", None))
        return exc.exit_code
    except typer.Exit as exc:
        return int(exc.exit_code or 0)
    except typer.Abort:
        _print_error("aborted", None)
        return 130
    except KeyboardInterrupt:
        _print_error("interrupted", "rerun with --resume RUN_DIR to continue a sweep")
        return 130
    except ModuleNotFoundError as exc:  # an optional dependency reached outside a ``needs`` block
        from harness.core.extras import dependency_error

        err = dependency_error(exc)
        if err is None:
            raise
        _print_error(err.message, err.fix)
        return err.exit_code
    except Exception as exc:  # click usage errors arrive here in non-standalone mode (typer vendors click)
        if hasattr(exc, "show") and hasattr(exc, "exit_code"):
            exc.show()
            return int(exc.exit_code)
        raise
    return 0


def _print_error(message: str, fix: str | None, source: str | None = None) -> None:
    from rich.console import Console
    from rich.markup import escape

    # The message and fix are plain text (paths may hold "[/x]"): only the labels are markup.
    console = Console(emoji=False, stderr=True, highlight=False, soft_wrap=True)
    console.print(f"[bold red]error:[/] {escape(message)}", markup=True)  # text such as "[policies]" is not markup
    if source:  # which door a bad option value came through (a config file, a manifest)
        console.print(f"[bold]from:[/] {escape(source)}", markup=True)
    if fix:
        console.print(f"[bold]fix:[/] {escape(fix)}", markup=True)


if __name__ == "__main__":
    sys.exit(main())
