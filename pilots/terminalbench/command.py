"""The ``harbor run`` command of one pilot config: Terminus 2 against the local server, one trial at a time.

The agent's identity and absolute timeout go in a small JobConfig file (``-c``: Harbor has no absolute agent-timeout
flag; ``override_timeout_sec`` is the documented way); the agent kwargs are ``--ak`` flags so the command line shows
them. ``--print-config`` resolves the whole JobConfig without network (the tests use it).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from pilots.terminalbench.harbor_install import LOCAL_SANDBOX_IMPORT
from pilots.terminalbench.tasks import TaskSource

AGENT = "terminus-2"
LOCAL_ENV_ALIASES = {"local", "local-sandbox", "sandbox"}


def resolve_env(env: str | None, *, fixture: bool) -> str | None:
    """Harbor ``-e`` value: ``local`` (or the fixture default) is this package's sandbox; None means Harbor's docker."""
    if env is None:
        return LOCAL_SANDBOX_IMPORT if fixture else None
    return LOCAL_SANDBOX_IMPORT if env in LOCAL_ENV_ALIASES else env


class ServerLimits(BaseModel):
    """What the local server accepts, for Terminus 2's ``model_info`` (drives its summarisation)."""

    context_length: int | None = None
    max_input_tokens: int | None = None
    source: str = "unknown"


class HarborRunSpec(BaseModel):
    """Everything one ``harbor run`` needs; ``argv()`` and ``job_config()`` turn it into the command."""

    harbor_bin: str
    job_name: str
    jobs_dir: str
    config_path: str
    model: str = Field(description="LiteLLM model name, e.g. openai/<served model>")
    api_base: str
    temperature: float = 0.0
    max_tokens: int
    max_input_tokens: int
    max_turns: int | None = None
    agent_timeout_s: float = Field(description="Harbor's override_timeout_sec (wall seconds)")
    tasks: TaskSource
    env: str | None = None
    env_kwargs: dict[str, Any] = Field(default_factory=dict)
    record_terminal_session: bool | None = None
    extra_agent_kwargs: dict[str, Any] = Field(default_factory=dict)

    def model_info(self) -> dict[str, Any]:
        return {
            "max_input_tokens": self.max_input_tokens,
            "max_output_tokens": self.max_tokens,
            "input_cost_per_token": 0,
            "output_cost_per_token": 0,
        }

    def agent_kwargs(self) -> dict[str, Any]:
        kw: dict[str, Any] = {
            "api_base": self.api_base,
            "temperature": self.temperature,
            "model_info": self.model_info(),
            "llm_call_kwargs": {"max_tokens": self.max_tokens},
        }
        if self.max_turns is not None:
            kw["max_turns"] = self.max_turns
        if self.record_terminal_session is not None:
            kw["record_terminal_session"] = self.record_terminal_session
        kw.update(self.extra_agent_kwargs)
        return kw

    def job_config(self) -> dict[str, Any]:
        """The ``-c`` file: the agent with its absolute timeout (the ``--ak`` flags merge into it)."""
        return {"agents": [{"name": AGENT, "model_name": self.model, "override_timeout_sec": self.agent_timeout_s}]}

    def write_config(self) -> Path:
        path = Path(self.config_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.job_config(), indent=2) + "\n")
        return path

    def argv(self, *, print_config: bool = False) -> list[str]:
        argv = [self.harbor_bin, "run", "-c", self.config_path, *self.tasks.harbor_args()]
        for key, value in self.agent_kwargs().items():
            argv += ["--ak", f"{key}={_ak_value(value)}"]
        if self.env is not None:
            argv += ["-e", self.env]
            for key, value in self.env_kwargs.items():
                argv += ["--ek", f"{key}={_ak_value(value)}"]
        argv += ["-n", "1", "-o", self.jobs_dir, "--job-name", self.job_name, "--yes", "--quiet"]
        if print_config:
            argv.append("--print-config")
        return argv


def _ak_value(value: Any) -> str:
    """Harbor parses ``--ak`` values as JSON first; strings go through verbatim."""
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
