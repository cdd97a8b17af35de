"""Does a twin grid earn the published recipe? Train lookup_table, doubly_robust and mlp_bandit on a sweep and check
their picks: bs 1, 4, 8 -> (3,4,8); bs 16 -> (3,2,4), under the published reward defaults.

    .venv/bin/python benchmarks/twin_grid_recipe.py RUN_DIR_OR_ROWS_JSONL [--json] [--top 4]

Prints, per batch size, the top configs by mean reward over the repeats (with the standard error of the mean), the
margin of the recipe over the best other config in units of the margin's standard error, the utilization of the top
configs, the picks of the three algorithms, and the dataset's row counts (usable rows, error rows, rows recovered at
a lower mem fraction, window sources). Exit code 0 when all three pick the recipe at every batch size, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from harness.grid import ACTIONS

RECIPE = {1: (3, 4, 8), 4: (3, 4, 8), 8: (3, 4, 8), 16: (3, 2, 4)}
ALGOS = ("lookup_table", "doubly_robust", "mlp_bandit")


def rows_path(arg: str) -> Path:
    p = Path(arg)
    return p / "rows.jsonl" if p.is_dir() else p


def row_counts(path: Path) -> dict:
    """Totals the grid check asserts: rows, error rows, ladder recoveries, window sources."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    errors = [r for r in rows if r.get("error")]
    return {
        "rows": len(rows),
        "errors": [[r["batch_size"], r["steps"], r["topk"], r["num_draft_tokens"], r.get("repeat")] for r in errors],
        "recovered": sum(1 for r in rows if r.get("retry_mem_fraction") is not None and not r.get("error")),
        "window_source": dict(
            Counter((r.get("extras") or {}).get("window_source", "none") for r in rows if not r.get("error"))
        ),
        "published_throttled": sum(1 for r in rows if r.get("gpu_throttling")),
    }


def ranking(data, top: int) -> dict[int, list[dict]]:
    """Per batch size: configs by mean reward (best first) with s.e. over repeats and mean utilization."""
    out: dict[int, list[dict]] = {}
    for bs in data.batch_size_list:
        sel = data.batch_sizes == bs
        items = []
        for a in np.unique(data.actions[sel]):
            m = sel & (data.actions == a)
            r = data.rewards[m]
            se = float(r.std(ddof=1) / math.sqrt(len(r))) if len(r) > 1 else float("nan")
            items.append(
                {
                    "config": ACTIONS[int(a)].as_tuple(),
                    "mean": float(r.mean()),
                    "se": se,
                    "n": int(len(r)),
                    "util": float(data.utilization[m].mean()),
                    "speed": float(data.speeds[m].mean()),
                }
            )
        items.sort(key=lambda d: -d["mean"])
        out[bs] = items[:top] if top else items
        recipe = next((d for d in items if d["config"] == RECIPE.get(bs)), None)
        rival = next((d for d in items if d["config"] != RECIPE.get(bs)), None)
        if recipe and rival:
            se = math.hypot(recipe["se"], rival["se"])
            out[bs].append(
                {
                    "margin": recipe["mean"] - rival["mean"],
                    "rival": rival["config"],
                    "margin_in_se": (recipe["mean"] - rival["mean"]) / se if se > 0 else float("inf"),
                }
            )
    return out


def main(argv: list[str] | None = None) -> int:
    from policies.base import fit_policy, pick
    from policies.contract import load_dataset

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dataset", help="a sweep run folder or its rows.jsonl")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--top", type=int, default=4)
    args = ap.parse_args(argv)
    path = rows_path(args.dataset)
    console = Console(width=140)
    t0 = time.perf_counter()
    data = load_dataset(path)
    picks: dict[str, dict[int, tuple[int, int, int]]] = {}
    timings: dict[str, float] = {}
    for algo in ALGOS:
        t = time.perf_counter()
        picks[algo] = {bs: c.as_tuple() for bs, c in pick(fit_policy(algo, data, seed=0), data).items()}
        timings[algo] = time.perf_counter() - t
    ok = all(p == RECIPE for p in picks.values())
    rank = ranking(data, args.top)
    out = {
        "dataset": str(path),
        "counts": row_counts(path),
        "picks": {a: {str(b): list(c) for b, c in p.items()} for a, p in picks.items()},
        "recipe_ok": ok,
        "ranking": {str(b): v for b, v in rank.items()},
        "train_s": timings,
        "total_s": time.perf_counter() - t0,
    }
    if args.json:
        print(json.dumps(out, indent=2, default=str))
        return 0 if ok else 1
    console.print(f"dataset {path}: {out['counts']}")
    table = Table(title="mean reward per config (top) and the recipe's margin over the best other config")
    for col in ("bs", "top configs: mean ± s.e. (util, speed)", "recipe margin", "picks lt / dr / mlp"):
        table.add_column(col)
    for bs, items in rank.items():
        tops = [d for d in items if "config" in d]
        marg = next((d for d in items if "margin" in d), None)
        table.add_row(
            str(bs),
            "\n".join(
                f"{d['config']} {d['mean']:.3f}±{d['se']:.3f} (u {d['util']:.3f}, {d['speed']:.1f})" for d in tops
            ),
            f"{marg['margin']:+.4f} vs {marg['rival']} ({marg['margin_in_se']:+.1f} s.e.)" if marg else "-",
            " / ".join(str(picks[a].get(bs)) for a in ALGOS),
        )
    console.print(table)
    console.print(
        "train: " + ", ".join(f"{a} {t:.1f} s" for a, t in timings.items()) + f"; total {out['total_s']:.1f} s"
    )
    console.print("[green]recipe reproduced by all three[/green]" if ok else "[red]recipe NOT reproduced[/red]")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
