"""The GPU proof kit: one prepared check of the native path on the first real GPU it meets (docs/gpu_check.md).

    python3 benchmarks/gpu_check.py [--out DIR] [--full] [--gpu-index 0] [--budget-s 240] [--quick] [--only PHASES]
    .venv/bin/python benchmarks/gpu_check.py --argv      # the launch lines alone, where pydantic is installed

Runs with the standard library + nvidia-ml-py + torch only (no pydantic, project not installed): it imports the
project's NVML probe and sampling grid from this tree. Prints progress lines, a verdict table (PASS/WARN/FAIL/SKIP
per check with its figure) and writes DIR/gpu_check.json after every phase. By default it changes nothing on the GPU
(read-only: limits and supported clocks are read, no set call is made): a borrowed or shared GPU must not be changed by
accident. ``--full`` adds the setting phases (your own GPU, as root); whatever they change (power limit, locked SM
clocks) is restored on exit, on an exception and on SIGINT/SIGTERM.
Exit codes: 0 done (read the table), 2 no NVML/GPU here, 130/143 interrupted (settings restored).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--out",
        default=os.environ.get("OUT") or "results/gpu-check",
        help="output folder (default $OUT or results/gpu-check)",
    )
    ap.add_argument("--gpu-index", type=int, default=0)
    ap.add_argument(
        "--budget-s", type=float, default=240.0, help="scales every phase (default 240: about 4 min in all)"
    )
    ap.add_argument("--quick", action="store_true", help="a quarter of the budget")
    ap.add_argument(
        "--cpu-stand-in", action="store_true", help="run the torch load on the CPU even when CUDA exists (tests)"
    )
    ap.add_argument(
        "--only",
        default="",
        help="comma-separated phases to run (setup always runs): uuid,idle,ramp,sustained,decode,"
        "power_cap,sm_clocks,twin,launch_argv",
    )
    ap.add_argument(
        "--phase-hook",
        default=None,
        help="a command run with the phase name before each phase (tests set the NVML "
        "shim's power with it; on a GPU host e.g. a script logging nvidia-smi -q)",
    )
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument(
        "--full",
        action="store_true",
        help="also set, verify and restore a power limit and locked SM clocks (your own GPU, as root); "
        "GPU_CHECK_READ_ONLY=1 still forbids it",
    )
    mode.add_argument(
        "--read-only",
        action="store_true",
        help="the default: make no set call at all (limits and supported clocks are still read)",
    )
    ap.add_argument(
        "--argv",
        action="store_true",
        help="only print the sweep's sglang launch lines (needs the project's dependencies)",
    )
    args = ap.parse_args()
    args.read_only = not args.full or os.environ.get("GPU_CHECK_READ_ONLY") == "1"
    if args.argv:
        from harness.gpucheck.argv_check import launch_lines

        print(json.dumps(launch_lines(), indent=1))
        return 0
    from harness.core.errors import HarnessError
    from harness.gpucheck.judge import cap_binds_verdict, verdicts
    from harness.gpucheck.phases import Check, log, run_all
    from harness.gpucheck.verdict import print_table

    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    budget = args.budget_s / 4 if args.quick else args.budget_s
    log(
        f"start: budget {budget:g} s, out {out_dir / 'gpu_check.json'}"
        + (
            ", READ-ONLY (no set call)"
            if args.read_only
            else ", full (sets and restores the power limit and SM clocks)"
        )
    )
    try:
        chk = Check(
            out_dir / "gpu_check.json",
            args.gpu_index,
            budget,
            args.cpu_stand_in,
            only=tuple(p.strip() for p in args.only.split(",") if p.strip()),
            phase_hook=args.phase_hook,
            read_only=args.read_only,
        )
    except HarnessError as exc:
        log(f"no GPU check possible: {exc}")
        (out_dir / "gpu_check.json").write_text(json.dumps({"schema": 1, "error": exc.message, "fix": exc.fix}))
        return 2
    t0 = time.monotonic()
    code = 0
    try:
        run_all(chk)
    except SystemExit as exc:  # SIGINT/SIGTERM: the guard restored the GPU; still write and print what was measured
        code = exc.code if isinstance(exc.code, int) else 1
    finally:
        chk.guard.restore_all()
        chk.rec.stop()
        chk.smi.stop()
        chk.out["cap_binds_decode"] = cap_binds_verdict(chk.out)
        chk.out["verdicts"] = verdicts({**chk.out, "restores": chk.guard.results, "period": chk.rec.period_stats(),
                                        "smi": {"error": chk.smi.error}})  # fmt: skip
        chk.out["samples"] = chk.rec.records
        chk.out["smi_samples"] = chk.smi.samples
        chk.out["wall_s"] = round(time.monotonic() - t0, 1)
        chk.save()
        chk.probe.close()
    print_table(chk.out["verdicts"])
    log(
        f"{'interrupted (' + str(chk.guard.signal_received) + ')' if code else 'done'} in {chk.out['wall_s']} s: {out_dir / 'gpu_check.json'}"
    )
    return code


if __name__ == "__main__":
    sys.exit(main())
