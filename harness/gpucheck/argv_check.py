"""The launch line: the sglang argv the sweep would use for the 19 configs, checked against an installed sglang's
own parser when one is importable (the GPU machine has no sglang: then that is said plainly).

The argv is the sweep's own: its options' engine spec (``SweepOptions(...).engine_spec()``, so every flag the sweep
adds, e.g. ``--enable-metrics``) for the sglang installed here, as ``--sglang-version auto`` would find it, else for
the default image's sglang (0.5.2), and the output says which. A hand-built spec of 0.5.2's flags judged a 0.5.23
install by the wrong argv."""

from __future__ import annotations

import importlib.metadata
from typing import Any

SWEEP_BATCH_SIZE, SWEEP_MEM_FRACTION, PORT = 16, 0.65, 30000


def installed_sglang() -> str | None:
    """The sglang version installed for this interpreter (what ``--sglang-version auto`` reads), or None."""
    try:
        return importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        return None


def launch_lines() -> dict[str, Any]:
    try:
        from harness.engine.sglang_argv import build_argv
        from harness.engine.version import SUPPORTED_RANGE, version_tuple
        from harness.grid import ACTIONS
        from harness.runs.options import SweepOptions
    except ImportError as exc:
        return {
            "error": f"harness.engine.sglang_argv is not importable here ({exc}): run `benchmarks/gpu_check.py --argv` on a "
            "machine with the project installed (the argv does not depend on the GPU beyond its family)"
        }
    installed = installed_sglang()
    lo, hi = (version_tuple(v) for v in SUPPORTED_RANGE)
    if installed is not None and lo <= version_tuple(installed) <= hi:
        version, source = ".".join(str(p) for p in version_tuple(installed)), "installed"
    else:
        version = SUPPORTED_RANGE[0]
        source = (
            f"the default image's (sglang {installed} is outside the range)" if installed else "the default image's"
        )
    spec = SweepOptions(engine="sglang", sglang_version=version).engine_spec()
    lines = [build_argv(spec, cfg, SWEEP_BATCH_SIZE, SWEEP_MEM_FRACTION, PORT) for cfg in ACTIONS]
    out: dict[str, Any] = {"configs": len(lines), "sglang_version_flags": spec.sglang_version,
                           "sglang_version_source": source, "argv": lines,
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
