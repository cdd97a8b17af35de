"""Runs inside a vLLM conformance venv (tests/_sglang_helpers.conformance_python(version, "vllm")): vLLM's own
argument parser judges each argv (the flags after ``-m vllm.entrypoints.openai.api_server``), and each parsed
``--speculative-config`` is checked against vLLM's own ``SpeculativeConfig`` fields and its ``method`` choices.

No stubs: ``VLLM_TARGET_DEVICE=cpu`` (set by the test) lets vLLM pick its CPU platform, so ``make_arg_parser`` runs
without a GPU; vLLM 0.11 ignores that variable and gets the same ``CpuPlatform`` from the platform plugin of
``cpu_platform/`` (vLLM's ``vllm.platform_plugins`` entry point, on ``PYTHONPATH``). What does not run here is ``SpeculativeConfig.__post_init__`` (it loads the draft model's config from
the Hugging Face hub), so the speculative check stops at field names, the method and the token count's type.
Also reported: ``spec_fields``, ``SpeculativeConfig``'s field names, and ``tree_readers``, the vLLM source files
(relative to the package) that mention ``speculative_token_tree``: which parts of the engine know of a token tree.
Stdin: a JSON list of argvs; stdout (last line): ``{"version", "platform", "spec_fields", "tree_readers",
"results": [{"ok", "error", "speculative_config"}]}``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import sys
import typing


def _parser():  # type: ignore[no-untyped-def]
    """vLLM's api_server parser and its post-parse check (``validate_parsed_serve_args``), as its ``main`` runs them."""
    try:
        from vllm.entrypoints.common.cli_args import make_arg_parser, validate_parsed_serve_args  # 0.2x and later
    except ImportError:
        from vllm.entrypoints.openai.cli_args import make_arg_parser, validate_parsed_serve_args  # 0.11
    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except ImportError:
        from vllm.utils import FlexibleArgumentParser
    return make_arg_parser(FlexibleArgumentParser()), validate_parsed_serve_args


def _methods(field_type: object) -> set[str]:
    out: set[str] = set()
    for arg in typing.get_args(field_type) or ():
        out |= _methods(arg) if typing.get_args(arg) else ({arg} if isinstance(arg, str) else set())
    return out


def _check_spec(sc: dict) -> str | None:
    from vllm.config import SpeculativeConfig

    fields = {f.name: f for f in dataclasses.fields(SpeculativeConfig)}
    unknown = sorted(set(sc) - set(fields))
    if unknown:
        return f"SpeculativeConfig has no field(s) {unknown}"
    methods = _methods(typing.get_type_hints(SpeculativeConfig)["method"])
    if sc.get("method") not in methods:
        return f"method {sc.get('method')!r} not in {sorted(methods)}"
    if not isinstance(sc.get("num_speculative_tokens"), int) or sc["num_speculative_tokens"] < 1:
        return "num_speculative_tokens must be a positive int"
    return None


def _tree_readers() -> list[str]:
    """The vLLM ``.py`` files whose text names ``speculative_token_tree`` (read as text, nothing imported)."""
    import pathlib

    import vllm

    root = pathlib.Path(vllm.__file__).parent
    return sorted(
        str(f.relative_to(root))
        for f in root.rglob("*.py")
        if "speculative_token_tree" in f.read_text(encoding="utf-8", errors="replace")
    )


def main() -> None:
    import importlib.metadata

    argvs = json.loads(sys.stdin.read())
    parser, validate = _parser()
    results = []
    for argv in argvs:
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                args = parser.parse_args(argv)
            validate(args)
        except (SystemExit, TypeError, ValueError) as exc:
            if not isinstance(exc, SystemExit):
                err.write(f"\n{type(exc).__name__}: {exc}")
            results.append({"ok": False, "error": err.getvalue().strip().splitlines()[-1:]})
            continue
        sc = args.speculative_config
        problem = _check_spec(sc) if sc else None
        results.append(
            {
                "ok": problem is None,
                "error": problem,
                "speculative_config": sc,
                "max_num_seqs": args.max_num_seqs,
                "gpu_memory_utilization": args.gpu_memory_utilization,
                "model": args.model,
            }
        )
    from vllm.config import SpeculativeConfig
    from vllm.platforms import current_platform

    print(
        json.dumps(
            {
                "version": importlib.metadata.version("vllm"),
                "platform": type(current_platform).__name__,
                "spec_fields": sorted(f.name for f in dataclasses.fields(SpeculativeConfig)),
                "tree_readers": _tree_readers(),
                "results": results,
            }
        )
    )


if __name__ == "__main__":
    main()
