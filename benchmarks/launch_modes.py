"""Launch modes on the same grid: server launches and wall time of ``--launch-per cell`` vs ``--launch-per config``,
and whether their rows agree within repeat noise.

Runs two real sweeps against the twin (both with the same repeats), then compares them with
``harness.dataset.compare`` (per cell relative difference against the pooled repeat-noise band, per batch size rank
agreement). Usage::

    .venv/bin/python benchmarks/launch_modes.py [--repeats 2] [--time-scale 20] [--configs 0:0:0,1:1:2,3:2:4,3:4:8]
        [--batch-sizes 1,4,8,16] [--output-tokens 256] [--out results/launch_modes]

On a GPU box pass ``--engine sglang`` (then the time scale is 1 and it takes as long as two real sweeps).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from harness.dataset import compare
from harness.dataset.cli import render_compare
from harness.grid import parse_batch_sizes, parse_configs
from harness.runs.options import SweepOptions
from harness.sweep.console import SweepConsole
from harness.sweep.session import run_sweep


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engine", default="twin", choices=["twin", "sglang"])
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--time-scale", type=float, default=20.0)
    ap.add_argument("--configs", default="0:0:0,1:1:2,3:2:4,3:4:8")
    ap.add_argument("--batch-sizes", default="1,4,8,16")
    ap.add_argument("--output-tokens", type=int, default=256)
    ap.add_argument("--settle", default="0")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path("results/launch_modes"))
    args = ap.parse_args(argv)
    console = Console(highlight=False)
    configs = [c.as_tuple() for c in parse_configs(args.configs)]
    results = {}
    for mode in ("cell", "config"):
        opts = SweepOptions(
            engine=args.engine,
            configs=configs,
            batch_sizes=parse_batch_sizes(args.batch_sizes),
            repeats=args.repeats,
            launch_per=mode,
            output_tokens=args.output_tokens,
            time_scale=args.time_scale if args.engine == "twin" else 1.0,
            settle=args.settle,
            seed=args.seed,
        )
        console.print(f"[bold]--launch-per {mode}[/]")
        run_dir, rows, manifest = run_sweep(
            opts, args.out / mode, force=True, argv=sys.argv, console=SweepConsole(force_plain=True, quiet=True)
        )
        results[mode] = (rows, manifest)
    t = Table(title="launch modes on the same grid", title_justify="left")
    for col in ("mode", "cells", "error rows", "launches", "wall s", "s per cell"):
        t.add_column(col, justify="right")
    for mode, (rows, m) in results.items():
        t.add_row(
            mode,
            str(len(rows)),
            str(sum(r.is_error for r in rows)),
            str(m.launches),
            f"{m.wall_s or 0:.1f}",
            f"{(m.wall_s or 0) / max(1, len(rows)):.2f}",
        )
    console.print(t)
    (rc, mc), (rf, mf) = results["cell"], results["config"]
    console.print(
        f"ratios config/cell: launches {mf.launches / mc.launches:.2f}, wall time {(mf.wall_s or 0) / (mc.wall_s or 1):.2f}"
    )
    result = compare(rc, rf, a_name="cell", b_name="config")
    render_compare(result, console)
    return 0 if result.agrees else 1


if __name__ == "__main__":
    sys.exit(main())
