"""``harness twin ...`` commands: the twin GPU device, the sglang-compatible twin engine, calibration."""

from __future__ import annotations

import sys
from typing import Any

import typer

from harness.core.errors import UsageError
from harness.core.model_options import options_command, resolve_options
from harness.twin.options import CalibrateOptions, TwinGpuOptions


def gpu(ctx: typer.Context, **given: Any) -> None:
    """Run a twin GPU device (power, energy counter, temperature, clocks, memory) until SIGTERM."""
    from harness.twin.device.http_api import serve
    from harness.twin.profile import load_profile

    opts: TwinGpuOptions = resolve_options(ctx, TwinGpuOptions, given)
    serve(
        opts.port,
        load_profile(opts.profile),
        seed=opts.seed,
        time_scale=opts.time_scale,
        host=opts.host,
        index=opts.index,
        memory_release_s=opts.memory_release_s,
    )


def calibrate(ctx: typer.Context, **given: Any) -> None:
    """Fit the twin's model parameters to the published measurements (or to a run's rows with --from) and write
    the profile (minutes). A profile written with --from runs as a twin GPU: harness twin gpu --profile FILE."""
    from harness.twin.fit.calibrate import run_calibration
    from harness.twin.profile import load_profile

    opts: CalibrateOptions = resolve_options(ctx, CalibrateOptions, given)
    if opts.from_run is not None:
        from harness.twin.fit.from_run import calibrate_from_run

        if opts.calibration is not None:
            raise UsageError(
                "--from fits a run's rows; --calibration names the published table",
                fix="pass one of --from RUN_DIR or --calibration FILE",
            )
        calibrate_from_run(
            opts.from_run,
            opts.out,
            load_profile(opts.start),
            holdout_every=opts.holdout_every,
            max_evals=opts.max_evals,
        )
        return
    run_calibration(
        out=opts.out,
        calibration_path=opts.calibration,
        spreads=tuple(opts.spreads),
        max_evals=opts.max_evals,
        start=load_profile(opts.start),
    )


options_command(gpu, TwinGpuOptions, "harness twin gpu")
options_command(calibrate, CalibrateOptions, "harness twin calibrate")


def register(app: typer.Typer, groups: dict[str, typer.Typer]) -> None:
    twin = groups["twin"]

    twin.command("gpu")(gpu)

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

    twin.command("calibrate")(calibrate)
