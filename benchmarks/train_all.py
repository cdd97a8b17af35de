"""Train and evaluate all eight policies on a 228-row dataset; time each algorithm and the total against a 30 s goal.

    python benchmarks/train_all.py [--dataset FILE] [--seed 0] [--out DIR] [--tune]

Without --dataset it uses the SYNTHETIC grid of ``policies.synthetic`` (19 actions x 4 batch sizes x 3 repeats, three
error rows at bs 16 (5,4,16) like the published sweep). Per algorithm: fit on all rows + picks + save, then
evaluation = in-sample scoring + leave-one-repeat-out refits on all three folds + IPS/SNIPS/DR. Deterministic for a seed:
the picks and the evaluation figures printed are the same on every run (only the timings vary).
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

GOAL_S = 30.0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", type=Path, default=None, help="run folder, rows.jsonl or dataset.jsonl (default: synthetic)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None, help="models folder (default: a temporary folder)")
    ap.add_argument("--tune", action="store_true", help="also tune cql/bcq on held-out repeats (timed separately)")
    args = ap.parse_args(argv)

    t_import = time.perf_counter()
    from policies.base import ALGORITHMS, train
    from policies.contract import dataset_from_rows, load_dataset
    from policies.evaluate import evaluate
    from policies.synthetic import synthetic_rows

    import_s = time.perf_counter() - t_import
    if args.dataset:
        data = load_dataset(args.dataset)
    else:
        data = dataset_from_rows(synthetic_rows(args.seed), source="synthetic (policies.synthetic, seed %d)" % args.seed)
    out = args.out or Path(tempfile.mkdtemp(prefix="train_all-"))
    print(f"dataset: {data.source}: {len(data) + data.skipped_errors} rows, {len(data)} used, {data.skipped_errors} skipped (errors)")
    print(f"cpus: {os.cpu_count()}  torch threads during training: 1  imports: {import_s:.2f} s")

    timings: dict[str, dict[str, float]] = {}
    t_all = time.perf_counter()
    for name in ALGORITHMS:
        t0, c0 = time.perf_counter(), time.process_time()
        train(data, out, [name], args.seed)
        t1 = time.perf_counter()
        ev = evaluate(data, models_dir=out, algos=[name], seed=args.seed)
        t2, c2 = time.perf_counter(), time.process_time()
        timings[name] = {"train": t1 - t0, "evaluate": t2 - t1, "total": t2 - t0, "cpu": c2 - c0}
        s = ev.summary[name]
        picks = json.loads((out / "picks.json").read_text())[name]
        print(f"{name:18s} train {t1 - t0:6.2f} s  evaluate {t2 - t1:6.2f} s  cpu {c2 - c0:6.2f} s | in-sample {s.in_sample_avg:.4f}  "
              f"held-out {s.loro_value:.4f} [{s.loro_value_ci[0]:.3f}, {s.loro_value_ci[1]:.3f}]  regret {s.loro_regret:.4f}  "
              f"picks {' '.join(f'{b}:{tuple(c)}' for b, c in picks.items())}")  # fmt: skip
        sys.stdout.flush()
    total = time.perf_counter() - t_all
    cpu = sum(t["cpu"] for t in timings.values())
    load = os.getloadavg()[0]
    print(f"TOTAL train + evaluate, all eight: {total:.2f} s wall  (goal {GOAL_S:.0f} s, ratio {total / GOAL_S:.2f} x goal); "
          f"{cpu:.2f} s CPU (ratio {cpu / GOAL_S:.2f}); 1-min load average {load:.2f} on {os.cpu_count()} cpus")
    if args.tune:
        from policies.tune import tune_variants

        t0 = time.perf_counter()
        tunings = tune_variants(data, args.seed)
        train(data, out, [t.variant for t in tunings], args.seed, {t.variant: t.chosen for t in tunings})
        print(f"tuning cql/bcq on held-out repeats + refit: {time.perf_counter() - t0:.2f} s -> " + ", ".join(f"{t.variant} {t.chosen}" for t in tunings))
    digest = hashlib.sha256((out / "picks.json").read_bytes()).hexdigest()[:16]
    print(f"picks.json sha256[:16] {digest}  (models in {out})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
