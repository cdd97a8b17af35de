"""``harness sampler ...`` commands. Imports stay light at module level (the CLI is started often)."""

from __future__ import annotations

from typing import Any

import typer

from harness.core.model_options import options_command, resolve_options
from harness.telemetry.options import SamplerOptions


def serve(ctx: typer.Context, **given: Any) -> None:
    """Run the telemetry sampler sidecar until SIGTERM or Ctrl-C."""
    from rich.console import Console
    from rich.markup import escape

    from harness.core.errors import ServiceUnavailableError
    from harness.core.stopflag import StopFlag
    from harness.telemetry.probes import make_probe
    from harness.telemetry.sampler import SamplerCore
    from harness.telemetry.server import start_server

    opts: SamplerOptions = resolve_options(ctx, SamplerOptions, given)
    console = Console(emoji=False, stderr=True, highlight=False)
    core = SamplerCore(
        make_probe(opts.probe, gpu_index=opts.gpu_index, twin_url=opts.twin_url),
        rate_hz=opts.rate_hz,
        log_dir=opts.log,
        retention_s=opts.retention_s,
    )
    try:
        srv, _ = start_server(core, opts.host, opts.port)
    except OSError as exc:
        core.probe.close()
        raise ServiceUnavailableError(
            f"cannot bind {opts.host}:{opts.port}: {exc.strerror}", fix="pick another --port (0 = any free port)"
        ) from None
    core.start()
    stop = StopFlag().stop_on_signals()
    bound = srv.server_address[1]
    typer.echo(
        f"sampler listening on http://{opts.host}:{bound} probe={opts.probe} rate_hz={opts.rate_hz} "
        f"run_id={core.run_id}",
        err=False,
    )
    log = escape(str(opts.log or "(none)"))
    console.print(f"[green]sampler[/] {opts.probe} @ {opts.rate_hz} Hz, log {log}; stop with Ctrl-C")
    try:
        while not stop.wait(0.5):
            pass
    finally:
        srv.shutdown()
        srv.server_close()
        core.stop()


options_command(serve, SamplerOptions, "harness sampler serve")


def register(app: typer.Typer, groups: dict[str, typer.Typer]) -> None:
    group = groups["sampler"]

    group.command("serve")(serve)

    @group.command("window")
    def window(
        url: str = typer.Option("http://127.0.0.1:18200", "--url", help="Sampler URL."),
        start: str = typer.Option(..., "--start", help="Window start: epoch ns or ISO time with a zone."),
        end: str = typer.Option(..., "--end", help="Window end: epoch ns or ISO time with a zone."),
    ) -> None:
        """Print the WindowStats of a wall-clock window as JSON."""
        from harness.core.clocks import parse_iso_ns
        from harness.core.errors import UsageError
        from harness.telemetry.client import TelemetryClient

        def ns(text: str) -> int:
            if text.lstrip("-").isdigit():
                return int(text)
            try:
                return parse_iso_ns(text)
            except ValueError as exc:
                raise UsageError(
                    f"bad time {text!r}: {exc}",
                    fix="use epoch ns or ISO 8601 with an offset, e.g. 2026-01-01T00:00:00Z",
                ) from None

        with TelemetryClient(url) as client:
            stats = client.window(ns(start), ns(end))
        typer.echo(stats.model_dump_json(indent=2))
        if not stats.valid:
            raise typer.Exit(1)
