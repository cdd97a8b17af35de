"""How well the twin reproduces the published live measurements, and what a policy would pick on it.

    .venv/bin/python benchmarks/twin_fit.py [--profile rtx4060-laptop] [--seeds 3] [--rewards] [--repeats 3] [--json]

Prints the fit table (twin vs published, per row of calibration.json: accept length, speed, J/token, utilization,
p20 step time, each with its error and the target: speed 5 %, accept 3 %, J/token 10 %, utilization 0.03), the
bs-16 ordering check, and with ``--rewards`` the per-batch-size mean reward of every action under the published
reward (3-repeat twin grid, pure model, no servers) with the margin of the winner. Exit code 1 when a row misses
its targets or the ranking differs from the published recipe.
"""

from __future__ import annotations

import argparse
import json
import sys

from rich.console import Console

from harness.grid import SpecConfig
from harness.twin.fit.calibrate import evaluate, load_calibration, predict_rewards
from harness.twin.fit.report import fit_table, print_fit_table
from harness.twin.profile import load_profile

RECIPE = {1: SpecConfig(3, 4, 8), 4: SpecConfig(3, 4, 8), 8: SpecConfig(3, 4, 8), 16: SpecConfig(3, 2, 4)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", default="rtx4060-laptop")
    ap.add_argument("--seeds", type=int, default=3, help="simulated repeats per published row")
    ap.add_argument("--rewards", action="store_true", help="also predict the per-batch-size reward ranking")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    args = ap.parse_args(argv)
    console = Console(width=170)
    prof = load_profile(args.profile)
    fits = evaluate(prof, load_calibration(), seeds=tuple(range(args.seeds)))
    rows = fit_table(fits)
    by = {(f.batch_size, f.config): f for f in fits}
    ref, chosen = by[(16, (3, 4, 8))], by[(16, (3, 2, 4))]
    ordering_ok = ref.util > 0.98 and 0.95 <= chosen.util <= 0.98 and chosen.speed > ref.speed
    ok = all(r["ok"] for r in rows) and ordering_ok
    out: dict = {
        "profile": prof.name,
        "rows": rows,
        "bs16_ordering_ok": ordering_ok,
        "bs16": {
            "(3,4,8)": {"util": ref.util, "speed": ref.speed},
            "(3,2,4)": {"util": chosen.util, "speed": chosen.speed},
        },
    }
    if args.rewards:
        ranking = predict_rewards(prof, repeats=args.repeats)
        out["rewards"] = {}
        for bs, lst in ranking.items():
            best, second = lst[0], lst[1]
            se = ((best[2] ** 2 + second[2] ** 2) / args.repeats) ** 0.5
            picks_recipe = best[0] == RECIPE.get(bs)
            ok = ok and picks_recipe
            out["rewards"][str(bs)] = {
                "best": str(best[0]),
                "recipe": str(RECIPE.get(bs)),
                "picks_recipe": picks_recipe,
                "margin": best[1] - second[1],
                "margin_se": se,
                "top5": [[str(c), round(m, 4), round(s, 4)] for c, m, s in lst[:5]],
            }
    if args.json:
        print(json.dumps(out, indent=2))
        return 0 if ok else 1
    print_fit_table(fits)
    console.print(
        f"bs 16: reference (3,4,8) u={ref.util:.3f} speed {ref.speed:.1f}; chosen (3,2,4) u={chosen.util:.3f} speed "
        f"{chosen.speed:.1f} -> published ordering {'reproduced' if ordering_ok else 'NOT reproduced'}"
    )
    for bs, r in out.get("rewards", {}).items():
        console.print(
            f"bs {bs:>2}: best {r['best']} (recipe {r['recipe']}: {'yes' if r['picks_recipe'] else 'NO'}), margin "
            f"{r['margin']:.4f} (s.e. {r['margin_se']:.4f}); top: " + ", ".join(f"{c} {m:.3f}" for c, m, _ in r["top5"])
        )
    console.print("all targets met" if ok else "[bold red]targets missed[/]")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
