"""``harness <command>`` loads only the modules that register the command (harness/cli.py's FAST_PATHS): each
registrar's commands and groups are in the map under that registrar, and every command answers ``--help``."""

from __future__ import annotations

import importlib

import pytest
import typer

from harness.cli import FAST_PATHS, GROUPS, REGISTRARS, build_app, main


def command_names(app: typer.Typer) -> set[str]:
    """The top-level commands of ``app`` (a command without a name is called as its function)."""
    return {c.name or (c.callback.__name__.replace("_", "-") if c.callback else "") for c in app.registered_commands}


def registered_names(module_name: str) -> set[str]:
    """The top-level commands and groups one registrar adds."""
    app = typer.Typer()
    groups = {name: typer.Typer() for name in GROUPS}
    importlib.import_module(module_name).register(app, groups)
    return command_names(app) | {name for name, g in groups.items() if g.registered_commands or g.registered_groups}


@pytest.mark.parametrize("module_name", REGISTRARS)
def test_every_command_a_registrar_adds_loads_that_registrar(module_name: str) -> None:
    names = registered_names(module_name)
    assert names, module_name
    for name in names:
        assert module_name in FAST_PATHS.get(name, []), f"harness {name} does not load {module_name}"


def test_the_map_names_only_real_commands_and_the_full_app_has_them_all() -> None:
    app = build_app()
    everything = command_names(app) | {g.name or "" for g in app.registered_groups}
    assert set(FAST_PATHS) == everything


@pytest.mark.parametrize("command", sorted(FAST_PATHS))
def test_each_command_answers_help_on_its_fast_path(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([command, "--help"]) == 0
    assert command in capsys.readouterr().out
