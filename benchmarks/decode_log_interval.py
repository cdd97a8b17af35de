"""What ``--decode-log-interval 1`` costs: the same cells at interval 1 and 40, interleaved, speed and step time.

sglang logs decode statistics (a step-time sample, the accept length) once per ``--decode-log-interval`` decode
steps. The harness launches real sglang with 1 (a sample every step; docs/harness.md), which adds host work to every
decode step, inside the measured step time when the overlap scheduler is off (sglang 0.5.2 with EAGLE). This
benchmark makes that cost a measured fact on the box it runs on: repeats of one small grid at interval 1 and at 40,
alternated (1, 40, 1, 40, ...) so drift hits both, then per cell the ratio of mean speed (interval 1 / interval 40)
and the rows' ``extras.decode_log_interval`` and ``extras.overlap_schedule`` (what the server resolved). Usage::

    .venv/bin/python benchmarks/decode_log_interval.py --engine sglang [--configs 0:0:0,3:1:4] [--batch-sizes 1,16]
        [--repeats 3] [--out results/decode_log_interval]

On a GPU box (docs/gpu_check.md, first-contact table): about 2 x repeats x configs launches of ~45 s each plus the
windows, ~10 minutes at the defaults. ``--engine-device cpu`` runs it on real sglang's CPU build; on the twin
(``--engine twin``, the default here for a dry run) the interval changes no host work, so its ratio is ~1 by
construction and says nothing about a GPU.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from harness.grid import parse_batch_sizes, parse_configs
from harness.runs.options import SweepOptions
from harness.sweep.console import SweepConsole
from harness.sweep.session import run_sweep

INTERVALS = (1, 40)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engine", default="twin", choices=["twin", "sglang"])
    ap.add_argument("--engine-device", default="gpu", choices=["gpu", "cpu"])
    ap.add_argument("--configs", default="0:0:0,3:1:4")
    ap.add_argument("--batch-sizes", default="1,16")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--output-tokens", type=int, default=256)
    ap.add_argument("--time-scale", type=float, default=20.0, help="twin only")
    ap.add_argument("--out", type=Path, default=Path("results/decode_log_interval"))
    args = ap.parse_args(argv)
    configs = [c.as_tuple() for c in parse_configs(args.configs)]
    speeds: dict[tuple[int, tuple[int, int, int], int], list[float]] = {}
    resolved: dict[int, set[object]] = {i: set() for i in INTERVALS}
    for rep in range(args.repeats):
        for interval in INTERVALS:  # alternated: a drift over the run hits both intervals alike
            opts = SweepOptions(
                engine=args.engine, engine_device=args.engine_device, configs=configs,
                batch_sizes=parse_batch_sizes(args.batch_sizes), output_tokens=args.output_tokens, settle="0",
                decode_log_interval=interval, launch_per="config", probe="off", seed=rep,
                **({"time_scale": args.time_scale} if args.engine == "twin" else {}),
            )  # fmt: skip
            _, rows, _ = run_sweep(
                opts, args.out / f"r{rep}-i{interval}", force=True, console=SweepConsole(quiet=True),
                argv=["decode_log_interval"],
            )  # fmt: skip
            for r in rows:
                if r.error is None and r.speed_tok_s is not None:
                    speeds.setdefault((interval, r.config.as_tuple(), r.batch_size), []).append(float(r.speed_tok_s))
                    extras = r.extras or {}
                    resolved[interval].add((extras.get("decode_log_interval"), extras.get("overlap_schedule")))
    table = Table(title=f"--decode-log-interval 1 vs 40 ({args.engine}, {args.repeats} repeats each, alternated)")
    for col in ("config", "bs", "tok/s at 1", "tok/s at 40", "ratio 1/40"):
        table.add_column(col)
    ratios = []
    out = []
    for cfg in configs:
        for bs in parse_batch_sizes(args.batch_sizes):
            a, b = speeds.get((1, cfg, bs)), speeds.get((40, cfg, bs))
            if not a or not b:
                table.add_row(str(cfg), str(bs), "-", "-", "error rows")
                continue
            ratio = statistics.mean(a) / statistics.mean(b)
            ratios.append(ratio)
            out.append({"config": list(cfg), "batch_size": bs, "speed_1": a, "speed_40": b, "ratio": ratio})
            table.add_row(str(cfg), str(bs), f"{statistics.mean(a):.1f}", f"{statistics.mean(b):.1f}", f"{ratio:.3f}")
    console = Console(highlight=False)
    console.print(table)
    summary = {
        "engine": args.engine,
        "engine_device": args.engine_device,
        "cells": out,
        "resolved": {str(i): sorted(map(str, v)) for i, v in resolved.items()},
        "geomean_ratio": statistics.geometric_mean(ratios) if ratios else None,
    }
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1))
    console.print(
        f"speed at interval 1 / interval 40, geometric mean over cells: {summary['geomean_ratio']:.3f} "
        f"(rows say interval/overlap: {summary['resolved']}); {args.out / 'summary.json'}"
        if ratios
        else "no cell measured at both intervals"
    )
    return 0 if ratios else 1


if __name__ == "__main__":
    sys.exit(main())
