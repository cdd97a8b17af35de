"""CLI: ``harness train``, ``harness evaluate`` (offline or ``--live``), ``harness recommend``, ``harness report policies``.

Heavy libraries (torch, sklearn, matplotlib) are imported inside the commands only.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

from harness.core.errors import UsageError
from harness.core.model_options import options_command, resolve_options
from harness.dataset.loader import WINDOW_RULE_HELP
from policies.artifacts import TRUST_HELP
from policies.options import TrainOptions

if TYPE_CHECKING:
    from policies.contract import RewardOptions

EVALUATION_FILE = "evaluation.json"
WINDOWS_HELP = WINDOW_RULE_HELP
PICKLE_WARNING = (
    "Warning: the gbt artifact is a joblib pickle and loading a pickle can run code; load models only "
    "from folders you trust (artifacts are read only from MODELS/<algo>/)."
)


def _reward_options(
    power_limit: float,
    band: tuple[float, float],
    baseline_rule: str,
    throttle: str,
    energy_weight: float,
    limit_source: str = "row",
    memory_term: str = "published",
    memory_total_mb: float | None = None,
) -> RewardOptions:
    from policies.contract import RewardOptions  # at run time, as the module docstring says (fast CLI start)

    try:
        lo, hi = band
        return RewardOptions(
            power_limit_w=power_limit,
            band=(lo, hi),
            baseline_rule=baseline_rule,
            throttle=throttle,
            energy_weight=energy_weight,
            limit_source=limit_source,
            memory_term=memory_term,
            memory_total_mb=memory_total_mb,
        )
    except ValueError as exc:
        errors = getattr(exc, "errors", None)
        detail = "; ".join(e["msg"] for e in errors()) if callable(errors) else str(exc)
        raise UsageError(
            f"bad reward option: {detail}",
            fix="--band LOW,HIGH (e.g. 0.95,0.98), --baseline-rule last|per_repeat, --throttle any|power_thermal, "
            "--limit-source row|fixed, --memory-term published|total|auto",
        ) from None


def _check_state(state: str) -> str:
    if state not in ("hindsight", "pre"):
        raise UsageError(
            f"--state must be hindsight or pre, got {state!r}",
            fix="--state pre uses the pre-decision snapshot of rows.jsonl",
        )
    return state


def train(ctx: typer.Context, **given: Any) -> None:
    """Train the policies on a sweep and write their artifacts and picks.json.

    The gbt artifact is a joblib pickle: loading a pickle can run code, so load models only from folders you made.
    """
    from policies.base import parse_algos, parse_params
    from policies.base import train as train_all
    from policies.contract import load_dataset
    from policies.report import print_picks, print_published_picks

    opts: TrainOptions = resolve_options(ctx, TrainOptions, given)
    names = parse_algos(opts.algos)
    params = parse_params(opts.param)
    extra = sorted(set(params) - set(names))
    if extra:
        raise UsageError(
            f"--param names {', '.join(extra)}, which --algos {opts.algos!r} does not train",
            fix="add it to --algos or drop the --param",
        )
    data = load_dataset(
        opts.dataset,
        state=opts.state,
        reward=_reward_options(
            opts.power_limit,
            opts.band,
            opts.baseline_rule,
            opts.throttle,
            opts.energy_weight,
            opts.limit_source,
            opts.memory_term,
            opts.memory_total_mb,
        ),
        windows=opts.invalid_windows,
        power_cap=opts.power_cap,
        sm_clock=opts.sm_clock,
    )
    if opts.tune:
        from harness.core.jsonl import write_json_atomic
        from policies.tune import tune_variants

        tunings = tune_variants(data, opts.seed)
        params.update({t.variant: t.chosen for t in tunings})
        names += [t.variant for t in tunings]
        write_json_atomic(opts.out / "tuning.json", [t.model_dump() for t in tunings])
    selection = {"invalid_windows": opts.invalid_windows, "power_cap": opts.power_cap, "sm_clock": opts.sm_clock}
    summary = train_all(
        data, opts.out, names, opts.seed, params, selection=selection, options=opts.model_dump(mode="json")
    )
    print_picks(opts.out)
    print_published_picks(summary.model_dump())
    typer.echo(
        f"trained {len(summary.algorithms)} on {len(data)} rows ({data.skipped_errors} skipped) in "
        f"{summary.total_seconds:.1f} s -> {opts.out}"
    )


options_command(train, TrainOptions, "harness train")


def register(app: typer.Typer, groups: dict[str, typer.Typer]) -> None:
    app.command()(train)

    @app.command()
    def evaluate(
        models: Annotated[Path, typer.Option(help=f"models folder written by harness train. {PICKLE_WARNING}")],
        dataset: Annotated[Optional[Path], typer.Option(help="sweep to evaluate on (offline)")] = None,
        as_json: Annotated[bool, typer.Option("--json", help="print the evaluation as JSON")] = False,
        loro: Annotated[bool, typer.Option(help="leave-one-repeat-out refits (offline)")] = True,
        seed: Annotated[int, typer.Option()] = 0,
        live: Annotated[bool, typer.Option(help="A/B the picks on a live engine instead")] = False,
        engine: Annotated[str, typer.Option(help="twin or sglang (with --live)")] = "twin",
        trials: Annotated[int, typer.Option(help="trials per config and batch size (with --live)")] = 3,
        batch_sizes: Annotated[
            Optional[str], typer.Option(help="subset of batch sizes (with --live), e.g. 1,16")
        ] = None,
        time_scale: Annotated[float, typer.Option(help="twin time scale (with --live --engine twin)")] = 20.0,
        sampler_url: Annotated[Optional[str], typer.Option(help="existing sampler (with --live)")] = None,
        output_tokens: Annotated[
            Optional[int], typer.Option(help="max new tokens per request (with --live; default 512)")
        ] = None,
        state: Annotated[str, typer.Option()] = "hindsight",
        invalid_windows: Annotated[
            Optional[str], typer.Option("--invalid-windows", help=WINDOWS_HELP + "; default: as train chose")
        ] = None,
        power_cap: Annotated[
            Optional[str],
            typer.Option(
                "--power-cap",
                help="the cap pass to use when the sweep ran several (--power-caps); default: the one train used",
            ),
        ] = None,
        sm_clock: Annotated[
            Optional[str],
            typer.Option(
                "--sm-clock",
                help="the SM clock pass to use when the sweep ran several (--sm-clocks); default: the one train used",
            ),
        ] = None,
        trust_artifacts: Annotated[bool, typer.Option("--trust-artifacts", help=TRUST_HELP)] = False,
    ) -> None:
        """Evaluate trained policies offline (in-sample, held-out repeats, IPS/SNIPS/DR) or live (--live)."""
        from harness.core.jsonl import write_json_atomic

        if live:
            from policies.live import run_live
            from policies.report import print_live

            result = run_live(
                models,
                engine=engine,
                trials=trials,
                seed=seed,
                batch_sizes=batch_sizes,
                time_scale=time_scale,
                sampler_url=sampler_url,
                output_tokens=output_tokens,
                progress=lambda line: typer.echo(line, err=True),
            )
            typer.echo(result.model_dump_json(indent=2)) if as_json else print_live(result)
            return
        if dataset is None:
            raise UsageError(
                "offline evaluation needs --dataset", fix="pass the sweep the models were trained on, or --live"
            )
        from policies.base import read_train_meta, reward_options_of
        from policies.contract import load_dataset
        from policies.evaluate import evaluate as run_eval
        from policies.options import one_cap, one_clock
        from policies.report import print_evaluation

        train_meta = read_train_meta(models)
        reward = reward_options_of(models, train_meta)
        chosen = train_meta.get("selection") or {}  # the rows train used, unless told otherwise
        data = load_dataset(
            dataset,
            state=_check_state(train_meta.get("state", state)),  # type: ignore[arg-type]
            reward=reward,
            windows=invalid_windows or chosen.get("invalid_windows") or "exclude",
            power_cap=one_cap(power_cap) if power_cap is not None else chosen.get("power_cap"),
            sm_clock=one_clock(sm_clock) if sm_clock is not None else chosen.get("sm_clock"),
        )
        algos = train_meta.get("algorithms") or None
        ev = run_eval(data, models_dir=models, algos=algos, seed=seed, with_loro=loro, trust_artifacts=trust_artifacts)
        write_json_atomic(models / EVALUATION_FILE, ev.model_dump())
        typer.echo(ev.model_dump_json(indent=2)) if as_json else print_evaluation(ev)

    @app.command()
    def recommend(
        models: Annotated[Path, typer.Option(help=f"models folder written by harness train. {PICKLE_WARNING}")],
        algo: Annotated[str, typer.Option(help="which policy's pick")],
        batch_size: Annotated[int, typer.Option(help="the batch size to serve")],
        port: Annotated[int, typer.Option()] = 30000,
        sglang_version: Annotated[
            str,
            typer.Option(
                help="the sglang the command is for (its flags differ per version): auto (the one installed here, "
                "else the published 0.5.2) or a version such as 0.5.23"
            ),
        ] = "auto",
        trust_artifacts: Annotated[bool, typer.Option("--trust-artifacts", help=TRUST_HELP)] = False,
    ) -> None:
        """Print the sglang launch command for a policy's pick at a batch size (after loading its artifact)."""
        from policies.live import launch_command

        typer.echo(launch_command(models, algo, batch_size, port, sglang_version, trust_artifacts))

    @groups["report"].command("policies")
    def report_policies(
        models: Annotated[
            Path, typer.Argument(help="models folder (train.json, picks.json, evaluation.json, live.json)")
        ],
        figures: Annotated[bool, typer.Option(help="write PNG figures into MODELS/figures")] = True,
    ) -> None:
        """Rich tables and PNG figures for trained policies."""
        from policies.report import report

        report(models, figures=figures)
