"""``harness serve``: the band-holding OpenAI-compatible front. Light imports at module level."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer


def register(app: typer.Typer, groups: dict[str, typer.Typer]) -> None:
    @app.command("serve")
    def serve(
        picks: Annotated[Optional[str], typer.Option(help="pick table BS=s:k:d,... (e.g. 1=0:0:0,16=3:2:4)")] = None,
        recipe: Annotated[
            Optional[Path], typer.Option(help="an active sweep's recipe.json (or its run folder)")
        ] = None,
        models: Annotated[Optional[Path], typer.Option(help="models folder of harness train (with --algo)")] = None,
        algo: Annotated[Optional[str], typer.Option(help="which of the eight policies picks")] = None,
        dataset: Annotated[
            Optional[Path], typer.Option(help="with --models: pick on this run's states (else picks.json)")
        ] = None,
        configs: Annotated[
            Optional[str],
            typer.Option(help="instances to launch s:k:d,... (default: every picked config; no_spec always)"),
        ] = None,
        mode: Annotated[
            str, typer.Option(help="band (the controller) or adaptive (the sglang --speculative-adaptive emulation)")
        ] = "band",
        engine: Annotated[str, typer.Option(help="twin or sglang")] = "twin",
        out: Annotated[Path, typer.Option(help="folder for logs and switches.jsonl")] = Path("results/serve"),
        host: Annotated[str, typer.Option()] = "127.0.0.1",
        port: Annotated[int, typer.Option(help="0 picks a free port (printed)")] = 8000,
        max_batch_size: Annotated[int, typer.Option(help="each instance's --max-running-requests")] = 16,
        mem_fraction: Annotated[Optional[float], typer.Option(help="per instance (default 0.65 / instances)")] = None,
        time_scale: Annotated[float, typer.Option(help="twin world speed-up")] = 1.0,
        sampler_url: Annotated[
            Optional[str], typer.Option(help="a running sampler (sglang: else NVML in-process)")
        ] = None,
        twin_gpu: Annotated[Optional[str], typer.Option(help="a running twin GPU (with --sampler-url)")] = None,
        speculative_adaptive: Annotated[
            bool, typer.Option(help="pass --speculative-adaptive to topk-1 sglang instances (sglang >= 0.5.12)")
        ] = False,
        engine_arg: Annotated[
            Optional[list[str]], typer.Option(help="extra engine flag for every instance (repeat)")
        ] = None,
        band: Annotated[str, typer.Option(help="utilization band LOW,HIGH")] = "0.95,0.98",
        dwell_ticks: Annotated[int, typer.Option(help="ticks a new pick must hold before it is applied")] = 5,
        umodel: Annotated[
            Optional[Path],
            typer.Option(
                help="a sweep run (or rows.jsonl) at the serving cap: turns on the closed loop on measured utilization (docs/serve.md)"
            ),
        ] = None,
        min_hold_s: Annotated[
            Optional[float],
            typer.Option(
                help="seconds (device clock: wall on a GPU, twin seconds with --time-scale) after a switch before the next load-driven one (default 0.5; 3.0 with --umodel)"
            ),
        ] = None,
        instances: Annotated[
            str,
            typer.Option(
                help="all (one instance per config at once), one (one engine at a time, relaunched on a switch) or auto (all; one if they do not fit in GPU memory)"
            ),
        ] = "auto",
        relaunch_hold_s: Annotated[
            float,
            typer.Option(
                help="with one engine at a time: the least seconds (device clock) between load-driven switches"
            ),
        ] = 60.0,
        drain_timeout_s: Annotated[
            float,
            typer.Option(
                help="with one engine at a time: wall seconds a switched-off engine gets to finish its requests"
            ),
        ] = 120.0,
        tick_s: Annotated[float, typer.Option(help="control tick, wall seconds")] = 0.05,
    ) -> None:
        """Serve /v1/chat/completions, /v1/completions and /v1/models in front of one engine instance per config (or
        one at a time, relaunched on a switch, where only one fits), routing each request to the config the
        controller picks for the current batch size (switches logged)."""
        from harness.core.errors import UsageError
        from harness.core.stopflag import StopFlag
        from harness.grid import parse_configs
        from harness.serve import picks as pick_sources
        from harness.serve.controller import ControllerParams
        from harness.serve.session import ServeOptions, open_session

        if (
            mode not in ("band", "adaptive")
            or engine not in ("twin", "sglang")
            or instances not in ("all", "one", "auto")
        ):
            raise UsageError(
                f"bad --mode {mode!r}, --engine {engine!r} or --instances {instances!r}",
                fix="--mode band|adaptive, --engine twin|sglang, --instances all|one|auto",
            )
        try:
            lo, hi = (float(x) for x in band.split(","))
        except ValueError:
            raise UsageError(f"bad --band {band!r}", fix="write it as LOW,HIGH, e.g. 0.95,0.98") from None
        table = pick_sources.resolve(picks, recipe, models, algo, dataset)
        model = None
        if umodel is not None:
            from harness.serve.utilization_rows import load_model, model_json

            model = load_model(umodel)
            out.mkdir(parents=True, exist_ok=True)
            (out / "umodel.json").write_text(model_json(model))
        hold = min_hold_s if min_hold_s is not None else (3.0 if model is not None else 0.5)
        options = ServeOptions(
            picks=table,
            configs=parse_configs(configs) if configs else [],
            mode=mode,  # type: ignore[arg-type]
            engine=engine,  # type: ignore[arg-type]
            run_dir=out,
            host=host,
            port=port,
            max_batch_size=max_batch_size,
            mem_fraction=mem_fraction,
            time_scale=time_scale,
            tick_s=tick_s,
            sampler_url=sampler_url,
            twin_gpu_url=twin_gpu,
            speculative_adaptive=speculative_adaptive,
            engine_args=tuple(engine_arg or ()),
            instances=instances,  # type: ignore[arg-type]
            relaunch_hold_s=relaunch_hold_s,
            drain_timeout_s=drain_timeout_s,
            controller=ControllerParams(band=(lo, hi), dwell_ticks=dwell_ticks, min_hold_s=hold, model=model),
        )
        stop = StopFlag().stop_on_signals()
        with open_session(options) as session:
            session.loop.on_switch = lambda rec: typer.echo(
                f"switch {rec['old']} -> {rec['new']}: {rec['reason']}", err=True
            )
            n = len(session.pool.instances)
            how = f"one engine at a time over {n} configs" if session.relaunch_why else f"{n} instances"
            if session.relaunch_why and session.relaunch_why != "--instances one":
                typer.echo(f"serving one engine at a time: {session.relaunch_why}", err=True)
            typer.echo(f"serving on {session.url} ({how}, switches in {session.loop.log_path}); stop with Ctrl-C")
            while not stop.wait(0.5):
                pass
