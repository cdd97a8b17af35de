"""``harness twin ...`` commands: the twin GPU device, the sglang-compatible twin engine, calibration."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from harness.core.errors import UsageError


def register(app: typer.Typer, groups: dict[str, typer.Typer]) -> None:
    twin = groups["twin"]

    @twin.command("gpu")
    def gpu(
        port: int = typer.Option(18100, "--port", help="port to bind (0 picks a free one; the ready line names it)"),
        profile: str = typer.Option("rtx4060-laptop", "--profile", help="profile name or path to a profile JSON"),
        seed: int = typer.Option(0, "--seed", help="seed for ambient temperature, power jitter and the UUID"),
        time_scale: float = typer.Option(
            1.0, "--time-scale", help="the twin world runs this many times faster than the wall clock"
        ),
        host: str = typer.Option("127.0.0.1", "--host", help="address to bind"),
        index: int = typer.Option(
            0, "--index", min=0, help="device index on this node (N devices of one seed get N UUIDs)"
        ),
    ) -> None:
        """Run a twin GPU device (power, energy counter, temperature, clocks, memory) until SIGTERM."""
        from harness.twin.device.http_api import serve
        from harness.twin.profile import load_profile

        if time_scale <= 0:
            raise UsageError(f"--time-scale must be > 0, got {time_scale}", fix="e.g. --time-scale 20")
        serve(port, load_profile(profile), seed=seed, time_scale=time_scale, host=host, index=index)

    @twin.command(
        "engine",
        context_settings={"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []},
        add_help_option=False,
    )
    def engine(ctx: typer.Context) -> None:
        """Run an sglang-compatible twin engine: takes sglang launch_server flags plus --twin-gpu URL (see --help)."""
        from harness.twin.engine.launch import main as engine_main

        code = engine_main(list(ctx.args))
        if code:
            sys.exit(code)  # typer.Exit is swallowed by the root app in non-standalone mode

    @twin.command("calibrate")
    def calibrate(
        out: Optional[Path] = typer.Option(
            None, "--out", help="profile JSON to write (default: the committed profile)"
        ),
        calibration: Optional[Path] = typer.Option(
            None, "--calibration", help="calibration.json (default: the packaged copy)"
        ),
        spreads: str = typer.Option("0.25,0.3,0.35", "--spreads", help="prompt-quality spreads to try (outer loop)"),
        max_evals: int = typer.Option(50, "--max-evals", help="least-squares evaluations per spread (each ~0.3 s)"),
        start: str = typer.Option("rtx4060-laptop", "--start", help="profile to start from (name or path)"),
        from_run: Optional[Path] = typer.Option(
            None,
            "--from",
            help="fit a sweep run folder's own rows instead of the "
            "published table (the board's limit, memory and idle power from its manifest)",
        ),
        holdout_every: int = typer.Option(
            0,
            "--holdout-every",
            min=0,
            help="with --from: hold out every N-th spec cell and report its prediction error (0: fit every cell)",
        ),
    ) -> None:
        """Fit the twin's model parameters to the published measurements (or to a run's rows with --from) and write
        the profile (minutes). A profile written with --from runs as a twin GPU: harness twin gpu --profile FILE."""
        from harness.twin.fit.calibrate import run_calibration
        from harness.twin.profile import load_profile

        if from_run is not None:
            from harness.twin.fit.from_run import calibrate_from_run

            if calibration is not None:
                raise UsageError(
                    "--from fits a run's rows; --calibration names the published table",
                    fix="pass one of --from RUN_DIR or --calibration FILE",
                )
            calibrate_from_run(from_run, out, load_profile(start), holdout_every=holdout_every, max_evals=max_evals)
            return

        try:
            spread_values = tuple(float(x) for x in spreads.split(",") if x.strip())
        except ValueError:
            raise UsageError(
                f"--spreads must be comma-separated numbers, got {spreads!r}", fix="e.g. --spreads 0.25,0.3"
            ) from None
        run_calibration(
            out=out, calibration_path=calibration, spreads=spread_values, max_evals=max_evals, start=load_profile(start)
        )
