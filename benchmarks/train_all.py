"""Train and evaluate all eight policies on a 228-row dataset; time each algorithm and the total against a 30 s goal.

    python benchmarks/train_all.py [--dataset FILE] [--seed 0] [--out DIR] [--tune] [--gradients hand,func]

Without --dataset it uses the SYNTHETIC grid of ``tests/policies/_synthetic_grid.py`` (19 actions x 4 batch sizes x 3 repeats, three
error rows at bs 16 (5,4,16) like the published sweep). Per algorithm: fit on all rows + picks + save, then
evaluation = in-sample scoring + leave-one-repeat-out refits on all three folds + IPS/SNIPS/DR. Deterministic for a seed:
the picks and the evaluation figures printed are the same on every run (only the timings vary).

``--gradients hand,func`` (the default) trains every algorithm once per gradient mode of the neural trainer, interleaved,
on the same data and seeds, and prints the neural algorithms' CPU time per mode with its ratio to the first (the
baseline, hand-derived backprop) and whether picks and figures agree within ``FIGURE_TOL``; docs/policies.md records
the figure that decided to keep the hand-derived gradients.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "policies"))  # _synthetic_grid

GOAL_S = 30.0
GRADIENT_MODES = ("hand", "func", "autograd")
NEURAL = ("mlp_bandit", "cql", "bcq")
"""The algorithms trained by ``policies.nets.train_batched`` (the only ones the gradient mode changes)."""
FIGURE_TOL = 1e-3
"""Largest difference in in-sample value, held-out value or regret tolerated between gradient modes."""


def compare_gradients(
    modes: list[str], timings: dict[str, dict[str, dict[str, float]]], results: dict[str, dict[str, tuple]]
) -> None:
    """Print, per mode against the first, the neural algorithms' CPU time and ratio, and whether the results agree."""
    base = modes[0]
    base_cpu = sum(timings[base][n]["cpu"] for n in NEURAL)
    for mode in modes[1:]:
        cpu = sum(timings[mode][n]["cpu"] for n in NEURAL)
        same_picks = all(results[mode][n][0] == results[base][n][0] for n in results[base])
        diff = max(abs(a - b) for n in results[base] for a, b in zip(results[mode][n][1], results[base][n][1]))
        agree = "agree" if same_picks and diff <= FIGURE_TOL else "DISAGREE"
        print(
            f"gradients {mode} vs {base}: neural train + evaluate {cpu:.2f} s CPU vs {base_cpu:.2f} s (ratio {cpu / base_cpu:.2f}); "
            f"results {agree} (picks {'identical' if same_picks else 'differ'}, largest figure difference {diff:.2e}, tolerance {FIGURE_TOL:g})"
        )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--dataset", type=Path, default=None, help="run folder, rows.jsonl or dataset.jsonl (default: synthetic)"
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None, help="models folder (default: a temporary folder)")
    ap.add_argument("--tune", action="store_true", help="also tune cql/bcq on held-out repeats (timed separately)")
    ap.add_argument(
        "--gradients",
        default="hand,func",
        help="comma list of gradient modes of the neural trainer, run interleaved on the same data and seeds: "
        "hand (policies.nets.forward_backward), func (torch.func vmap + grad), autograd; the first is the baseline",
    )
    args = ap.parse_args(argv)
    modes = args.gradients.split(",")
    if any(m not in GRADIENT_MODES for m in modes) or len(set(modes)) != len(modes):
        ap.error(
            f"--gradients takes a comma list of distinct modes out of {', '.join(GRADIENT_MODES)}, got {args.gradients!r}"
        )

    t_import = time.perf_counter()
    from _synthetic_grid import synthetic_rows

    from policies import nets
    from policies.base import ALGORITHMS, train
    from policies.contract import dataset_from_rows, load_dataset
    from policies.evaluate import evaluate

    import_s = time.perf_counter() - t_import
    if args.dataset:
        data = load_dataset(args.dataset)
    else:
        data = dataset_from_rows(
            synthetic_rows(args.seed), source="synthetic (tests/policies/_synthetic_grid.py, seed %d)" % args.seed
        )
    out = args.out or Path(tempfile.mkdtemp(prefix="train_all-"))
    print(
        f"dataset: {data.source}: {len(data) + data.skipped_errors} rows, {len(data)} used, {data.skipped_errors} skipped (errors)"
    )
    print(f"cpus: {os.cpu_count()}  torch threads during training: 1  imports: {import_s:.2f} s")

    timings: dict[str, dict[str, dict[str, float]]] = {m: {} for m in modes}
    results: dict[str, dict[str, tuple]] = {m: {} for m in modes}
    for name in ALGORITHMS:
        for mode in modes:  # interleaved per algorithm, so a change in machine load hits every mode alike
            nets.GRADIENTS = mode
            mode_out = out / mode if len(modes) > 1 else out
            t0, c0 = time.perf_counter(), time.process_time()
            train(data, mode_out, [name], args.seed)
            t1 = time.perf_counter()
            ev = evaluate(data, models_dir=mode_out, algos=[name], seed=args.seed)
            t2, c2 = time.perf_counter(), time.process_time()
            timings[mode][name] = {"train": t1 - t0, "evaluate": t2 - t1, "total": t2 - t0, "cpu": c2 - c0}
            s = ev.summary[name]
            picks = json.loads((mode_out / "picks.json").read_text())[name]
            results[mode][name] = (picks, (s.in_sample_avg, s.loro_value, s.loro_regret))
            tag = f"[{mode}] " if len(modes) > 1 else ""
            print(f"{tag}{name:18s} train {t1 - t0:6.2f} s  evaluate {t2 - t1:6.2f} s  cpu {c2 - c0:6.2f} s | in-sample {s.in_sample_avg:.4f}  "
                  f"held-out {s.loro_value:.4f} [{s.loro_value_ci[0]:.3f}, {s.loro_value_ci[1]:.3f}]  regret {s.loro_regret:.4f}  "
                  f"picks {' '.join(f'{b}:{tuple(c)}' for b, c in picks.items())}")  # fmt: skip
            sys.stdout.flush()
    nets.GRADIENTS = modes[0]
    out = out / modes[0] if len(modes) > 1 else out  # --tune and the digest use the baseline's models
    load = os.getloadavg()[0]
    for mode in modes:
        total = sum(t["total"] for t in timings[mode].values())
        cpu = sum(t["cpu"] for t in timings[mode].values())
        tag = f"[{mode}] " if len(modes) > 1 else ""
        print(
            f"{tag}TOTAL train + evaluate, all eight: {total:.2f} s wall  (goal {GOAL_S:.0f} s, ratio {total / GOAL_S:.2f} x goal); "
            f"{cpu:.2f} s CPU (ratio {cpu / GOAL_S:.2f}); 1-min load average {load:.2f} on {os.cpu_count()} cpus"
        )
    if len(modes) > 1:
        compare_gradients(modes, timings, results)
    if args.tune:
        from policies.tune import tune_variants

        t0 = time.perf_counter()
        tunings = tune_variants(data, args.seed)
        train(data, out, [t.variant for t in tunings], args.seed, {t.variant: t.chosen for t in tunings})
        print(
            f"tuning cql/bcq on held-out repeats + refit: {time.perf_counter() - t0:.2f} s -> "
            + ", ".join(f"{t.variant} {t.chosen}" for t in tunings)
        )
    digest = hashlib.sha256((out / "picks.json").read_bytes()).hexdigest()[:16]
    print(f"picks.json sha256[:16] {digest}  (models in {out})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
