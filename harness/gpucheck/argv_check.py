"""The launch line: the sglang argv the sweep would use for the 19 configs, checked against an installed sglang's
own parser when one is importable (the GPU machine has no sglang: then that is said plainly)."""

from __future__ import annotations

from typing import Any

SWEEP_BATCH_SIZE, SWEEP_MEM_FRACTION, PORT = 16, 0.65, 30000


def launch_lines() -> dict[str, Any]:
    try:
        from harness.engine.sglang_argv import build_argv
        from harness.engine.spec import EngineSpec
        from harness.grid import ACTIONS
    except ImportError as exc:
        return {
            "error": f"harness.engine.sglang_argv is not importable here ({exc}): run `benchmarks/gpu_check.py --argv` on a "
            "machine with the project installed (the argv does not depend on the GPU beyond its family)"
        }
    spec = EngineSpec(kind="sglang", python="python3")
    lines = [build_argv(spec, cfg, SWEEP_BATCH_SIZE, SWEEP_MEM_FRACTION, PORT) for cfg in ACTIONS]
    out: dict[str, Any] = {"configs": len(lines), "sglang_version_flags": spec.sglang_version, "argv": lines,
                           "note": "sglang itself could not be run on this machine: these lines are printed, not launched"}  # fmt: skip
    try:
        from sglang.srt.server_args import prepare_server_args
    except ImportError as exc:
        out["parser_check"] = f"SKIP: sglang is not importable here ({exc})"
        return out
    bad = []
    for argv in lines:
        try:
            prepare_server_args(argv[3:])
        except BaseException as exc:  # noqa: BLE001 - argparse exits with SystemExit on a bad flag
            bad.append({"argv": argv[3:], "error": f"{type(exc).__name__}: {exc}"})
    out["parser_check"] = "PASS" if not bad else f"FAIL: {len(bad)} argv rejected"
    out["parser_rejects"] = bad
    return out
