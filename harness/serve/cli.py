"""``harness serve``: the band-holding OpenAI-compatible front. Light imports at module level; the flags come from
``ServeOptions``."""

from __future__ import annotations

from typing import Any

import typer

from harness.core.errors import UsageError
from harness.core.httpserve import LOOPBACK_NAMES
from harness.core.model_options import options_command, resolve_options, to_yaml
from harness.serve.options import ServeOptions


def serve(ctx: typer.Context, **given: Any) -> None:
    """Serve /v1/chat/completions, /v1/completions and /v1/models in front of one engine instance per config (or
    one at a time, relaunched on a switch, where only one fits), routing each request to the config the
    controller picks for the current batch size (switches logged)."""
    from harness.core.stopflag import StopFlag
    from harness.serve import picks as pick_sources
    from harness.serve.session import SessionOptions, open_session

    opts: ServeOptions = resolve_options(ctx, ServeOptions, given)
    if opts.host not in LOOPBACK_NAMES and not opts.api_key:
        raise UsageError(
            f"--host {opts.host} serves beyond this machine without a guard",
            fix="add --api-key KEY (clients send Authorization: Bearer KEY), or keep the default --host 127.0.0.1",
        )
    if opts.gpu_settings_url:
        from harness.sweep.checks import check_settings_agent

        check_settings_agent(opts.engine, opts.gpu_settings_url)
    if opts.engine_device == "cpu" and opts.engine != "sglang":
        raise UsageError("--engine-device cpu runs real sglang's CPU engine, not the twin", fix="add --engine sglang")
    table = pick_sources.resolve(opts.picks, opts.recipe, opts.models, opts.algo, opts.dataset, opts.trust_artifacts)
    model = None
    if opts.umodel is not None:
        from harness.serve.utilization_rows import load_model, model_json

        model = load_model(opts.umodel)
        opts.out.mkdir(parents=True, exist_ok=True)
        (opts.out / "umodel.json").write_text(model_json(model))
    options = SessionOptions.from_options(opts, table, model)
    stop = StopFlag().stop_on_signals()
    typer.echo(
        f"starting {len(options.instance_configs())} {opts.engine} engine instance(s) "
        f"({', '.join(str(c) for c in options.instance_configs())}); each launch takes a while",
        err=True,
    )
    with open_session(options) as session:
        # this session's --config file; the key stays out of it (pass it again with --api-key)
        (opts.out / "options.yaml").write_text(to_yaml(opts.model_copy(update={"api_key": None})))
        session.loop.on_switch = lambda rec: typer.echo(
            f"switch {rec['old']} -> {rec['new']}: {rec['reason']}", err=True
        )
        n = len(session.pool.instances)
        how = f"one engine at a time over {n} configs" if session.relaunch_why else f"{n} instances"
        clk = session.loop.clock_actuator
        if clk is not None and clk.refused:
            typer.echo(f"--clock-control: {clk.refused}", err=True)
        if session.open_loop_why:
            typer.echo(session.open_loop_why, err=True)
        if session.relaunch_why and session.relaunch_why != "--instances one":
            typer.echo(f"serving one engine at a time: {session.relaunch_why}", err=True)
        typer.echo(f"serving on {session.url} ({how}, switches in {session.loop.log_path}); stop with Ctrl-C")
        while not stop.wait(0.5):
            pass
        served = sum(i.served for i in session.pool.instances.values())
        typer.echo(
            f"stopping: served {served} request(s), {session.loop.switches} switch(es) (log {session.loop.log_path})",
            err=True,
        )


options_command(serve, ServeOptions, "harness serve")


def register(app: typer.Typer, groups: dict[str, typer.Typer]) -> None:
    app.command("serve")(serve)
