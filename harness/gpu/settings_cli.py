"""``harness gpu-settings serve``: the GPU settings agent (``harness.gpu.settings_agent``) until SIGTERM or Ctrl-C.
Imports stay light at module level (the CLI is started often)."""

from __future__ import annotations

import os
from typing import Any

import typer
from pydantic import ConfigDict, Field

from harness.core.model_options import OptionsModel, options_command, resolve_options
from harness.core.option_values import Port
from harness.gpu.device import KEY_ENV

MIN_KEY_CHARS = 16


class SettingsAgentOptions(OptionsModel):
    """Where the agent listens (its key comes from the environment, never a flag: ``ps`` would show it)."""

    model_config = ConfigDict(extra="forbid")

    host: str = Field("127.0.0.1", description="address to bind (the key guards every route but /health)")
    port: Port = Field(18300, description="0 picks a free port (printed on start)")


def agent_key() -> str:
    """The agent's key from ``HARNESS_SETTINGS_KEY``; missing or short is refused (whoever has it sets the board)."""
    from harness.core.errors import UsageError

    key = os.environ.get(KEY_ENV, "").strip()
    if len(key) < MIN_KEY_CHARS:
        raise UsageError(
            f"the settings agent needs a key of at least {MIN_KEY_CHARS} characters in {KEY_ENV} "
            f"({'none is set' if not key else f'it has {len(key)}'}): whoever reaches it can change the GPU",
            fix=f"export {KEY_ENV}=$(python3 -c 'import secrets; print(secrets.token_hex(16))') for the agent and "
            "for the harness that uses it",
        )
    return key


def serve(ctx: typer.Context, **given: Any) -> None:
    """Set power limits and SM clocks for non-root sweeps and serve sessions; put every change back on exit."""
    from harness.core.errors import ServiceUnavailableError
    from harness.core.httpserve import make_server, serve_until_signal
    from harness.gpu.settings_agent import SettingsAgent, agent_router

    opts: SettingsAgentOptions = resolve_options(ctx, SettingsAgentOptions, given)
    key = agent_key()
    agent = SettingsAgent()
    try:
        srv = make_server(opts.host, opts.port, agent_router(agent), server_header="harness-gpu-settings", api_key=key)
    except OSError as exc:
        raise ServiceUnavailableError(
            f"cannot bind {opts.host}:{opts.port}: {exc.strerror}", fix="pick another --port (0 = any free port)"
        ) from None
    typer.echo(f"gpu-settings agent listening on http://{opts.host}:{srv.server_address[1]} (uid {os.geteuid()})")
    try:
        serve_until_signal(srv)  # the routes stop before anything is put back
    finally:
        for line in agent.restore_all():
            typer.echo(f"gpu-settings agent: {line}")
        agent.close()


options_command(serve, SettingsAgentOptions, "harness gpu-settings serve")


def register(app: typer.Typer, groups: dict[str, typer.Typer]) -> None:
    groups["gpu-settings"].command("serve")(serve)
