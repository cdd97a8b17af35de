"""Rich tables and PNG figures for trained policies (matplotlib imported lazily, Agg backend).

Tables: picks (algo x batch size), the picks under the published scripts' options, offline evaluation (algo x batch size in-sample reward, average, delta to the
reference, held-out value / regret with CIs, OPE), live A/B (mean reward with CI, delta to the reference).
Figures: reward per algorithm per batch size; throughput of each pick labelled with its config; the energy band chart
(utilization per config per batch size against the 0.95-0.98 band); live reward with error bars when live.json exists.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

from harness.core.errors import MissingFileError

if TYPE_CHECKING:
    from policies.evaluate import Evaluation
    from policies.live import LiveResult

LIVE_FILE = "live.json"
EVALUATION_FILE = "evaluation.json"
console = Console(emoji=False, highlight=False)
if not console.is_terminal:
    console = Console(emoji=False, highlight=False, width=160)


def _cfg(c: list[int]) -> str:
    return f"({c[0]},{c[1]},{c[2]})"


def _ci(ci: Any) -> str:
    return "-" if not ci else f"[{ci[0]:.3f}, {ci[1]:.3f}]"


def print_picks(models: Path) -> None:
    from policies.base import load_picks

    picks = load_picks(models)
    bss = sorted({bs for p in picks.values() for bs in p})
    t = Table(title=f"picks ({models})")
    t.add_column("algorithm")
    for bs in bss:
        t.add_column(f"bs {bs}", justify="center")
    for algo, p in picks.items():
        t.add_row(algo, *[str(p[bs]) if bs in p else "-" for bs in bss])
    console.print(t)


def print_published_picks(train_meta: dict) -> None:
    """Per algorithm, the picks under the published scripts' options: the trained picks where every option is the
    published one, else those of the refit with the published options that ``train`` recorded (train.json)."""
    if "deviations" not in train_meta:
        console.print(
            "train.json predates the recorded policy options (issue 15): retrain to see the picks under the published scripts' options"
        )
        return
    picks, published, deviations = (
        train_meta.get("picks", {}),
        train_meta.get("published_picks", {}),
        train_meta["deviations"],
    )
    bss = sorted({int(bs) for p in picks.values() for bs in p})
    t = Table(title="picks with the published scripts' options (policy semantics: docs/policies.md)")
    t.add_column("algorithm")
    for bs in bss:
        t.add_column(f"bs {bs}", justify="center")
    t.add_column("trained with")
    for algo, p in picks.items():
        shown = published.get(algo, p)
        dev = deviations.get(algo)
        note = (
            "published options"
            if not dev
            else "; ".join(f"{k}={v[0]} (published {v[1]}; refit shown)" for k, v in dev.items())
        )
        t.add_row(algo, *[_cfg(shown[str(bs)]) if str(bs) in shown else "-" for bs in bss], note)
    console.print(t)


def print_evaluation(ev: "Evaluation") -> None:
    bss = sorted({p.batch_size for ps in ev.in_sample.values() for p in ps})
    t = Table(
        title=f"in-sample reward of each pick ({ev.rows} rows, state {ev.state}); reference (3,4,8) avg {ev.reference_in_sample_avg:.4f}, oracle avg {ev.oracle_in_sample_avg:.4f}"
    )
    t.add_column("algorithm")
    for bs in bss:
        t.add_column(f"bs {bs}", justify="right")
    t.add_column("avg", justify="right")
    t.add_column("delta ref", justify="right")
    for algo, ps in ev.in_sample.items():
        by = {p.batch_size: p for p in ps}
        s = ev.summary[algo]
        cells = [f"{by[b].reward:.3f} {_cfg(by[b].config)}" if b in by else "-" for b in bss]
        t.add_row(algo, *cells, f"{s.in_sample_avg:.4f}", f"{s.delta_reference_in_sample:+.4f}")
    console.print(t)
    if not ev.fold_scores:
        return
    h = Table(
        title=f"held-out repeats (leave-one-repeat-out, folds {ev.folds}): mean over (fold, bs) with 95% bootstrap CI"
    )
    for col in ("algorithm", "value [CI]", "regret [CI]", "delta ref [CI]", "hit", "SNIPS", "DR", "IPS", "ctx DR"):
        h.add_column(col, justify="left" if col == "algorithm" else "right")
    for algo, s in ev.summary.items():
        o = s.ope
        h.add_row(algo, f"{s.loro_value:.4f} {_ci(s.loro_value_ci)}", f"{s.loro_regret:.4f} {_ci(s.loro_regret_ci)}",
                  f"{s.loro_delta_reference:+.4f} {_ci(s.loro_delta_reference_ci)}", f"{s.hit_rate:.2f}",
                  f"{o.get('recipe_snips', float('nan')):.4f}", f"{o.get('recipe_dr', float('nan')):.4f}",
                  f"{o.get('recipe_ips', float('nan')):.4f}", f"{o.get('contextual_dr', float('nan')):.4f}")  # fmt: skip
    console.print(h)


def print_live(result: "LiveResult") -> None:
    bss = result.batch_sizes
    t = Table(
        title=f"live A/B on {result.engine} ({result.hardware}), {result.trials} trials per config, mean reward [95% CI]"
    )
    t.add_column("arm")
    for bs in bss:
        t.add_column(f"bs {bs}", justify="right")
    for col in ("avg", "CI", "delta ref", "CI"):
        t.add_column(col, justify="right")
    for name, arm in result.per_algo.items():
        cells = []
        for bs in bss:
            a = next((x for x in result.per_bs if x.algo == name and x.batch_size == bs), None)
            cells.append("-" if a is None else f"{a.mean_reward:.3f} {_cfg(a.config)}")
        t.add_row(
            name, *cells, f"{arm.avg_reward:.4f}", _ci(arm.avg_ci), f"{arm.delta_reference:+.4f}", _ci(arm.delta_ci)
        )
    console.print(t)


def print_tuning(tunings: list[dict]) -> None:
    t = Table(title="tuned variants: candidates by mean held-out value (chosen marked *)")
    for col in ("variant", "candidate", "held-out value"):
        t.add_column(col, justify="right" if col == "held-out value" else "left")
    for tu in tunings:
        for c in tu["candidates"]:
            mark = " *" if c["params"] == tu["chosen"] else ""
            t.add_row(tu["variant"], json.dumps(c["params"]) + mark, f"{c['heldout_value']:.4f}")
    console.print(t)


def _load(models: Path, name: str) -> Any:
    p = models / name
    return json.loads(p.read_text()) if p.exists() else None


def report(models: Path, *, figures: bool = True) -> list[Path]:
    """Print every table the models folder supports; write the figures; return the figure paths."""
    from policies.evaluate import Evaluation
    from policies.live import LiveResult

    if not models.is_dir():
        raise MissingFileError(
            f"models folder not found: {models}", fix="train first: harness train --dataset FILE --out DIR"
        )
    print_picks(models)
    train_meta = _load(models, "train.json")
    if train_meta:
        print_published_picks(train_meta)
    ev_raw, live_raw = _load(models, EVALUATION_FILE), _load(models, LIVE_FILE)
    ev = Evaluation.model_validate(ev_raw) if ev_raw else None
    live = LiveResult.model_validate(live_raw) if live_raw else None
    if ev:
        print_evaluation(ev)
    else:
        console.print(f"no {EVALUATION_FILE}: run harness evaluate --dataset FILE --models {models}", markup=False)
    if live:
        print_live(live)
    tuning = _load(models, "tuning.json")
    if tuning:
        print_tuning(tuning)
    written = write_figures(models / "figures", ev, live) if figures and (ev or live) else []
    for p in written:
        console.print(f"figure: {p}", markup=False)
    return written


def write_figures(out: Path, ev: "Evaluation | None", live: "LiveResult | None") -> list[Path]:
    from harness.core.extras import needs

    with needs("writing PNG figures (--no-figures skips them)"):
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    import numpy as np

    out.mkdir(parents=True, exist_ok=True)
    paths: list[Path] = []

    def save(fig: Any, name: str) -> None:
        fig.tight_layout()
        fig.savefig(out / name, dpi=110)
        plt.close(fig)
        paths.append(out / name)

    if ev:
        algos = list(ev.in_sample)
        bss = sorted({p.batch_size for ps in ev.in_sample.values() for p in ps})
        width = 0.8 / max(1, len(algos))
        x = np.arange(len(bss))
        fig, ax = plt.subplots(figsize=(10, 4.5))
        for i, algo in enumerate(algos):
            by = {p.batch_size: p for p in ev.in_sample[algo]}
            ax.bar(x + i * width, [by[b].reward if b in by else 0 for b in bss], width, label=algo)
        ref = {p.batch_size: p.reference for p in next(iter(ev.in_sample.values()))}
        ax.scatter(
            x + 0.4 - width / 2,
            [ref.get(b, 0) for b in bss],
            marker="_",
            s=900,
            color="black",
            label="reference (3,4,8)",
        )
        ax.set_xticks(x + 0.4 - width / 2, [f"bs {b}" for b in bss])
        ax.set_ylabel("mean reward (in-sample)")
        ax.set_title("reward of each algorithm's pick per batch size")
        ax.legend(fontsize=7, ncol=3)
        save(fig, "reward_per_algorithm.png")

        cells = {(c.batch_size, tuple(c.config)): c for c in ev.cells}
        fig, ax = plt.subplots(figsize=(10, 4.5))
        for i, algo in enumerate(algos):
            for j, b in enumerate(bss):
                p = next((q for q in ev.in_sample[algo] if q.batch_size == b), None)
                c = cells.get((b, tuple(p.config))) if p else None
                if c is None:
                    continue
                ax.bar(j + i * width, c.speed_tok_s, width, color=f"C{i}", label=algo if j == 0 else None)
                ax.text(j + i * width, c.speed_tok_s, _cfg(c.config), rotation=90, ha="center", va="bottom", fontsize=6)
        ax.set_xticks(x + 0.4 - width / 2, [f"bs {b}" for b in bss])
        ax.set_ylim(0, max([c.speed_tok_s for c in ev.cells] + [1.0]) * 1.18)
        ax.set_ylabel("speed (tok/s per sequence)")
        ax.set_title("throughput of each pick (label: steps, topk, draft tokens)")
        ax.legend(fontsize=7, ncol=3)
        save(fig, "throughput_of_picks.png")

        fig, ax = plt.subplots(figsize=(11, 4.5))
        configs = sorted(
            {tuple(c.config) for c in ev.cells}, key=lambda c: [tuple(x.config) for x in ev.cells].index(c)
        )
        for b in bss:
            ys = [cells[(b, c)].utilization if (b, c) in cells else np.nan for c in configs]
            ax.plot(range(len(configs)), ys, marker="o", label=f"bs {b}")
        lo, hi = ev.reward_options.get("band", (0.95, 0.98))
        ax.axhspan(lo, hi, color="green", alpha=0.2, label=f"band {lo}-{hi}")
        ax.set_xticks(range(len(configs)), [_cfg(list(c)) for c in configs], rotation=60, fontsize=7)
        ax.set_ylabel("utilization (avg power / limit)")
        ax.set_title("energy band: utilization per config per batch size")
        ax.legend(fontsize=7)
        save(fig, "energy_band.png")

    if live:
        names = list(live.per_algo)
        bss = live.batch_sizes
        width = 0.8 / max(1, len(names))
        x = np.arange(len(bss))
        fig, ax = plt.subplots(figsize=(10, 4.5))
        for i, name in enumerate(names):
            arms = [next((a for a in live.per_bs if a.algo == name and a.batch_size == b), None) for b in bss]
            means = [a.mean_reward if a else 0 for a in arms]
            err = np.array([[a.mean_reward - a.ci[0], a.ci[1] - a.mean_reward] if a else [0, 0] for a in arms]).T
            ax.bar(x + i * width, means, width, yerr=err, capsize=2, label=name)
        ax.set_xticks(x + 0.4 - width / 2, [f"bs {b}" for b in bss])
        ax.set_ylabel("live mean reward (95% CI)")
        ax.set_title(f"live A/B on {live.engine}: {live.trials} randomised trials per config")
        ax.legend(fontsize=7, ncol=3)
        save(fig, "live_reward.png")
    return paths
