"""``harness pilot swebench``: the common pilot flags plus the SWE-bench flags (``SwebenchOptions``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal, Optional

import typer

from pilots import cli_flags as f
from pilots.swebench.runner import SwebenchOptions

PANEL = "SWE-bench options"


def _sw(field: str) -> object:
    return f.opt(SwebenchOptions, field, PANEL)


def register(group: typer.Typer, run_suite: f.RunSuite, **command: object) -> None:
    @group.command("swebench", **command)  # type: ignore[arg-type]
    def swebench(
        ctx: typer.Context,
        instances: Annotated[Optional[Path], _sw("instances")] = None,
        dataset: Annotated[Optional[str], _sw("dataset")] = None,
        split: Annotated[Optional[str], _sw("split")] = None,
        limit: Annotated[Optional[int], _sw("limit")] = None,
        instance_ids: Annotated[Optional[list[str]], _sw("instance_ids")] = None,
        repo: Annotated[Optional[str], _sw("repo")] = None,
        repos_dir: Annotated[Optional[Path], _sw("repos_dir")] = None,
        max_new_tokens: Annotated[Optional[int], _sw("max_new_tokens")] = None,
        context_token_budget: Annotated[Optional[int], _sw("context_token_budget")] = None,
        max_prompt_tokens: Annotated[Optional[int], _sw("max_prompt_tokens")] = None,
        max_file_tokens: Annotated[Optional[int], _sw("max_file_tokens")] = None,
        tree_token_budget: Annotated[Optional[int], _sw("tree_token_budget")] = None,
        include_hints: Annotated[Optional[bool], _sw("include_hints")] = None,
        chat_template: Annotated[Optional[Literal["llama3", "none"]], _sw("chat_template")] = None,
        evaluate: Annotated[Optional[bool], _sw("evaluate")] = None,
        evaluator_python: Annotated[Optional[str], _sw("evaluator_python")] = None,
        gold_smoke: Annotated[Optional[bool], _sw("gold_smoke")] = None,
        **common: Any,
    ) -> None:
        """SWE-bench Lite: one patch-generation request per instance per config, a sampler window per request."""
        run_suite(ctx, "swebench")

    f.with_common_flags(swebench)
