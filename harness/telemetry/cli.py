"""``harness sampler ...`` commands. Imports stay light at module level (the CLI is started often)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer


def register(app: typer.Typer, groups: dict[str, typer.Typer]) -> None:
    group = groups["sampler"]

    @group.command("serve")
    def serve(
        probe: str = typer.Option("nvml", "--probe", help="nvml (a real GPU) or twin (the twin GPU device)."),
        gpu_index: int = typer.Option(0, "--gpu-index", help="NVML device index."),
        twin_url: Optional[str] = typer.Option(None, "--twin-url", help="Twin GPU device URL (with --probe twin)."),
        rate_hz: float = typer.Option(10.0, "--rate-hz", help="Samples per second."),
        log: Optional[Path] = typer.Option(
            None, "--log", help="Folder for the append-only samples.jsonl (resumed with a gap record)."
        ),
        host: str = typer.Option("127.0.0.1", "--host"),
        port: int = typer.Option(18200, "--port", help="0 picks a free port (printed on start)."),
        retention_s: float = typer.Option(
            3600.0, "--retention-s", help="Seconds of samples kept in memory for window queries."
        ),
    ) -> None:
        """Run the telemetry sampler sidecar until SIGTERM or Ctrl-C."""
        from rich.console import Console
        from rich.markup import escape

        from harness.core.errors import ServiceUnavailableError
        from harness.core.stopflag import StopFlag
        from harness.telemetry.probes import make_probe
        from harness.telemetry.sampler import SamplerCore
        from harness.telemetry.server import start_server

        console = Console(stderr=True, highlight=False)
        core = SamplerCore(
            make_probe(probe, gpu_index=gpu_index, twin_url=twin_url),
            rate_hz=rate_hz,
            log_dir=log,
            retention_s=retention_s,
        )
        try:
            srv, _ = start_server(core, host, port)
        except OSError as exc:
            core.probe.close()
            raise ServiceUnavailableError(
                f"cannot bind {host}:{port}: {exc.strerror}", fix="pick another --port (0 = any free port)"
            ) from None
        core.start()
        stop = StopFlag().stop_on_signals()
        bound = srv.server_address[1]
        typer.echo(
            f"sampler listening on http://{host}:{bound} probe={probe} rate_hz={rate_hz} run_id={core.run_id}",
            err=False,
        )
        console.print(f"[green]sampler[/] {probe} @ {rate_hz} Hz, log {escape(str(log or '(none)'))}; stop with Ctrl-C")
        try:
            while not stop.wait(0.5):
                pass
        finally:
            srv.shutdown()
            srv.server_close()
            core.stop()

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
