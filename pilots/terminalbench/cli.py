"""``harness pilot terminalbench`` (common flags plus ``TerminalBenchOptions``) and the flags of
``harness pilot setup --suite terminalbench`` (``SetupOptions``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from pilots import cli_flags as f
from pilots.terminalbench.runner import TerminalBenchOptions
from pilots.terminalbench.setup import SetupOptions

PANEL = "Terminal-Bench options"
SETUP_PANEL = "Terminal-Bench setup options"


def _tb(field: str) -> object:
    return f.opt(TerminalBenchOptions, field, PANEL)


def _setup(field: str) -> object:
    return f.opt(SetupOptions, field, SETUP_PANEL)


SetupHarborBin = Annotated[Optional[str], _setup("harbor_bin")]
SetupVenv = Annotated[Optional[Path], _setup("venv")]
SetupPython = Annotated[Optional[str], _setup("python")]
SetupHarborVersion = Annotated[Optional[str], _setup("harbor_version")]
SetupForce = Annotated[Optional[bool], _setup("force")]


def register(group: typer.Typer, run_suite: f.RunSuite, **command: object) -> None:
    @group.command("terminalbench", **command)  # type: ignore[arg-type]
    def terminalbench(
        ctx: typer.Context,
        harbor_bin: Annotated[Optional[str], _tb("harbor_bin")] = None,
        dataset: Annotated[Optional[str], _tb("dataset")] = None,
        tasks: Annotated[Optional[list[str]], _tb("tasks")] = None,
        task_dir: Annotated[Optional[Path], _tb("task_dir")] = None,
        registry_path: Annotated[Optional[Path], _tb("registry_path")] = None,
        env: Annotated[Optional[str], _tb("env")] = None,
        agent_timeout_s: Annotated[Optional[float], _tb("agent_timeout_s")] = None,
        max_turns: Annotated[Optional[int], _tb("max_turns")] = None,
        max_tokens: Annotated[Optional[int], _tb("max_tokens")] = None,
        stuck_fraction: Annotated[Optional[float], _tb("stuck_fraction")] = None,
        harbor_tz: Annotated[Optional[str], _tb("harbor_tz")] = None,
        keep_sandboxes: Annotated[Optional[bool], _tb("keep_sandboxes")] = None,
        **common: Any,
    ) -> None:
        """Terminal-Bench via Harbor + Terminus 2: one Harbor job per config, a sampler window per trial."""
        run_suite(ctx, "terminalbench")

    f.with_common_flags(terminalbench)
