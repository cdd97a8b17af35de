"""Runs INSIDE a conformance venv (real sglang, no CUDA): parse argv lists with sglang's own ``prepare_server_args``.

Reads a JSON list of argv lists (the flags after ``python -m sglang.launch_server``) on stdin and prints one JSON
list: per argv ``{"ok": true, "args": {...selected resolved ServerArgs fields...}}`` or ``{"ok": false, "error": ...}``.
It is exactly what ``python -m sglang.launch_server`` runs before it touches a GPU: argparse, then the ``ServerArgs``
construction and its validation (``__post_init__`` in 0.5.2, the resolution hooks in newer versions).

Stubs (the only ones; each replaces something that needs a GPU or the network, nothing that parses or validates):

- ``get_device`` -> ``"cuda"``: sglang asks torch for an accelerator and raises "No accelerator (CUDA, XPU, HPU) is
  available" on a CPU-only machine; a GPU box answers "cuda".
- ``get_device_memory_capacity`` -> ``GPU_MEM_MB`` (an 8 GB RTX 4060 Laptop, the published hardware): sglang reads the
  GPU's memory to pick defaults (mem fraction, chunked prefill, CUDA-graph batch sizes); the harness pins the first.
- 0.5.23's resolution step (``ServerArgs.resolve_once``, run by ``launch_server`` after parsing) imports the
  multimodal model configs, which import ``torchvision``; PyPI's torchvision does not load beside the CPU torch
  used here, so for 0.5.23 only argparse (flag names, types, choices, abbreviations) is checked and the result says
  ``"resolved": false``. Nothing is stubbed for it.
- ``is_sm90_supported`` / ``is_sm100_supported`` -> from ``GPU_CC`` (Ada, sm89): sglang asks
  torch for the GPU's compute capability ("Torch not compiled with CUDA enabled" on a CPU build), e.g. to refuse
  the TensorRT-LLM backends off Blackwell.
- The target model's ``config.json`` comes from an offline Hugging Face cache the test writes (``HF_HUB_OFFLINE=1``,
  ``HF_HOME``): sglang reads the target's architecture (``LlamaForCausalLM``) to choose model-specific defaults.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import sys
import traceback

GPU_MEM_MB = 8188.0
GPU_CC = (8, 9)  # RTX 4060 Laptop (Ada): not Hopper (sm90), not Blackwell (sm100)
FIELDS = (
    "model_path",
    "host",
    "port",
    "dtype",
    "mem_fraction_static",
    "max_running_requests",
    "attention_backend",
    "speculative_algorithm",
    "speculative_draft_model_path",
    "speculative_num_steps",
    "speculative_eagle_topk",
    "speculative_num_draft_tokens",
    "cuda_graph_max_bs",
    "cuda_graph_max_bs_decode",
    "log_level",
    "enable_metrics",
)


def _install_stubs() -> None:
    """Patch the GPU queries wherever sglang's server-args code looked them up."""
    for name in ("sglang.srt.server_args", "sglang.srt.utils", "sglang.srt.utils.common"):
        try:
            mod = importlib.import_module(name)
        except ImportError:
            continue
        if hasattr(mod, "get_device"):
            mod.get_device = lambda device_id=None: "cuda"
        if hasattr(mod, "get_device_memory_capacity"):
            mod.get_device_memory_capacity = lambda device=None, *a, **k: GPU_MEM_MB
        if hasattr(mod, "is_sm90_supported"):
            mod.is_sm90_supported = lambda device=None: GPU_CC[0] == 9
        if hasattr(mod, "is_sm100_supported"):
            mod.is_sm100_supported = lambda device=None: GPU_CC[0] == 10


def _plain(val: object) -> object:
    return val if isinstance(val, (str, int, float, bool, type(None))) else str(val)


def _value(obj: object, name: str) -> object:
    return _plain(getattr(obj, name, None))


def parse_one(prepare, argv: list[str]) -> dict:
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            args = prepare(argv)
            parsed = {f: _value(args, f) for f in FIELDS if hasattr(args, f)}
            if hasattr(args, "resolve_once"):  # newer versions: launch_server resolves (and validates) after parsing
                try:
                    args.resolve_once()
                except ImportError as exc:  # an import the CPU-only venv cannot satisfy, not a verdict on the flags
                    return {
                        "ok": True,
                        "args": parsed,
                        "resolved": False,
                        "not_resolved": f"{type(exc).__name__}: {exc}"[:300],
                    }
                view = args.resolved_dict()
                return {"ok": True, "args": {f: _plain(view.get(f)) for f in FIELDS if f in view}, "resolved": True}
    except SystemExit as exc:  # argparse: unrecognized / ambiguous / invalid choice
        return {
            "ok": False,
            "error": err.getvalue().strip().splitlines()[-1] if err.getvalue().strip() else f"exit {exc.code}",
        }
    except Exception as exc:  # noqa: BLE001 - sglang's validation raises ValueError, AssertionError, ...
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()[-1500:]}
    return {"ok": True, "args": {f: _value(args, f) for f in FIELDS if hasattr(args, f)}, "resolved": True}


def choices(server_args_cls) -> dict:
    """The option strings and choices of the flags the harness passes, as sglang's own parser defines them."""
    import argparse

    parser = argparse.ArgumentParser()
    server_args_cls.add_cli_args(parser)
    out = {}
    for action in parser._actions:  # private: argparse has no public listing
        for opt in action.option_strings:
            out[opt] = sorted(action.choices) if action.choices else None
    return out


def main() -> None:
    import importlib.metadata

    _install_stubs()
    from sglang.srt.server_args import ServerArgs, prepare_server_args

    argvs = json.load(sys.stdin)
    out = {
        "version": importlib.metadata.version("sglang"),
        "options": choices(ServerArgs),
        "results": [parse_one(prepare_server_args, a) for a in argvs],
    }
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
