"""Replay the active strategy against a finished full-grid run: which cells it would measure, its recipe, its cost.

    .venv/bin/python benchmarks/active_replay.py FULL_RUN_DIR... [--budget 0.2] [--quiet]

A development tool for the decision rules of ``harness/sweep/active/``, not a measurement: the seeded twin gives a cell
nearly the same row whichever sweep measures it (same seed, same cell, same repeat), so the rows of a full grid
(``benchmarks/active_sweep.py`` keeps them under ``results/bench-active/<profile>/full``) stand in for the GPU.
The active loop runs unchanged (``harness.sweep.active.rounds.ActiveSweep``); each cell it asks for is answered with the
full grid's row of that cell, so a replay takes the refits' CPU time (about a minute) instead of the sweep's. Costs are
the rows' recorded GPU-seconds. The recipe is scored against the full grid the same way as the benchmark does.
Only ``benchmarks/active_sweep.py`` measures the strategy live; a replay says nothing about launch or timing, and on
a board run at its power cap it is a weak stand-in: there the throttle flag (x0.3) of a cell's row can differ from
one sweep to the next, and a replay always sees the full grid's draw.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from harness.runs.manifest import read_manifest, read_options
from harness.runs.plan import Cell, plan_cells
from harness.runs.rows import RowStore, SweepRow
from harness.sweep.active.cost import row_cost
from harness.sweep.active.rounds import ActiveSweep
from harness.world.bench import load_prompts
from harness.world.world import twin_sampler_rate_hz

SAMPLER_RATE_HZ = 10.0
"""The harness's default sampler rate (``harness.world.world``); a twin world raises it with the time scale."""


class ReplayStore:
    """The rows the replay has 'measured' so far (what ``ActiveSweep`` reads of a ``RowStore``)."""

    def __init__(self) -> None:
        self.rows: list[SweepRow] = []

    def latest(self) -> list[SweepRow]:
        return list(self.rows)


class ReplayConsole:
    """The active loop's console lines, printed unless ``quiet``."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet

    def line(self, text: str) -> None:
        if not self.quiet:
            print(text)


class ReplayRunner:
    """What ``ActiveSweep`` needs of a ``SweepRunner``; ``run_cells`` answers with the full grid's rows."""

    def __init__(self, full_dir: Path, out: Path, budget: float, quiet: bool) -> None:
        opts = read_options(full_dir).model_copy(update={"strategy": "active", "budget": budget, "budget_s": None})
        self.opts = opts
        self.settings = SimpleNamespace(prompts=load_prompts(opts.prompts_file))
        self.manifest = read_manifest(full_dir).model_copy(update={"active": None})
        scale = float(opts.time_scale or 1.0)  # the sampler rate a twin world of that time scale runs (10 Hz asked)
        self.world = SimpleNamespace(
            clock=SimpleNamespace(scale=scale), sampler_rate_hz=twin_sampler_rate_hz(SAMPLER_RATE_HZ, scale)
        )
        self.cells: list[Cell] = plan_cells(opts)
        self.full = {r.key: r for r in RowStore(full_dir).latest()}
        self.store = ReplayStore()
        self.run_dir, self.run_id = out, f"replay-{full_dir.name}"
        self.console = ReplayConsole(quiet)
        out.mkdir(parents=True, exist_ok=True)

    def run_cells(self, cells: list[Cell]) -> None:
        done = {r.key for r in self.store.rows}
        for c in cells:
            row = self.full.get(c.cell_id)
            if row is not None and c.cell_id not in done:
                self.store.rows.append(row)


def replay(full_dir: Path, budget: float, quiet: bool = False) -> dict[str, Any]:
    """Run the active loop on ``full_dir``'s rows; returns its recipe, rows and GPU-seconds against the full grid's."""
    with tempfile.TemporaryDirectory(prefix="active-replay-") as tmp:
        runner = ReplayRunner(full_dir, Path(tmp), budget, quiet)
        ActiveSweep(runner).run()
        recipe = json.loads((Path(tmp) / "recipe.json").read_text())
    spent = sum(row_cost(r).total_s for r in runner.store.rows)
    full = sum(row_cost(r).total_s for r in runner.full.values())
    return {
        "recipe": recipe,
        "rows": runner.store.rows,
        "spent_s": spent,
        "full_s": full,
        "active": runner.manifest.active,
        "full_rows": list(runner.full.values()),
        "limit_w": runner.manifest.power_limit_w,
    }


def main(argv: list[str] | None = None) -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from active_sweep import score, truth

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("full_runs", type=Path, nargs="+")
    ap.add_argument("--budget", type=float, default=0.2)
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    ok_all = True
    for full_dir in args.full_runs:
        res = replay(full_dir, args.budget, quiet=args.quiet)
        true = truth(res["full_rows"], res["limit_w"])
        frac = res["spent_s"] / res["full_s"]
        ok_all &= frac <= args.budget
        print(
            f"{full_dir}: {len(res['rows'])} cells, GPU-s {res['spent_s']:.0f}/{res['full_s']:.0f} = {frac:.3f}, "
            f"stop {res['active']['stop_reason']}"
        )
        for bs, t in true.items():
            pick = tuple(res["recipe"][str(bs)]["config"])
            good, gap = score(pick, t)
            ok_all &= good
            print(
                f"  bs {bs}: best {t['best']} {t['means'][t['best']]:.3f} (s.e. {t['se']:.3f}); pick {pick} "
                f"{t['means'].get(pick, float('nan')):.3f} ({gap:.1f} s.e.) {'ok' if good else 'MISS'}; "
                f"confidence {res['recipe'][str(bs)]['confidence']:.2f}"
            )
    return 0 if ok_all else 1


if __name__ == "__main__":
    sys.exit(main())
