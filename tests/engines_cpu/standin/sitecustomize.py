"""Start-up hook of the sgl_kernel STAND-IN (test support code of this repository, not sglang's).

Python imports ``sitecustomize`` at start-up from ``sys.path``, so putting ``tests/engines_cpu/standin`` on
PYTHONPATH runs this file in the sglang server and in every process it spawns (sglang uses the ``spawn`` start
method, so each child starts a fresh interpreter). It does nothing unless ``SGLANG_USE_CPU_ENGINE=1``.

Why it exists: sglang takes its CPU (``intel_amx``) code path only when ``cpu_has_amx_support()`` is true, i.e.
``sglang.srt.utils.common.is_amx_tile_supported`` (read once from ``torch.cpu._is_amx_tile_supported()`` when that
module is imported) AND ``hasattr(torch.ops.sgl_kernel, "convert_weight_packed")``. The stand-in ops are pure
PyTorch and need no AMX, so on any x86 CPU (AMD or Intel without AMX too) this hook sets that one module global to
True right after sglang imports the module. Nothing else is touched: in particular torch's own
``torch.cpu._is_amx_tile_supported`` is left alone (torch inductor reads it to decide whether to emit AMX code).
The second half of the probe is answered by importing the stand-in package ``sgl_kernel`` next to this file.
See ``sgl_kernel/__init__.py``.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import platform
import sys
from pathlib import Path

_PROBE_MODULE = "sglang.srt.utils.common"
_HERE = str(Path(__file__).resolve().parent)


class _ForceAmxProbeLoader(importlib.abc.Loader):
    """Runs the real loader, then sets ``is_amx_tile_supported = True`` on the loaded module."""

    def __init__(self, inner: importlib.abc.Loader) -> None:
        self._inner = inner

    def create_module(self, spec):  # type: ignore[no-untyped-def]
        return self._inner.create_module(spec)

    def exec_module(self, module) -> None:  # type: ignore[no-untyped-def]
        self._inner.exec_module(module)
        module.is_amx_tile_supported = True


class _ForceAmxProbeFinder(importlib.abc.MetaPathFinder):
    """Finds ``sglang.srt.utils.common`` with the ordinary path finder and wraps its loader."""

    def find_spec(self, fullname, path, target=None):  # type: ignore[no-untyped-def]
        if fullname != _PROBE_MODULE:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _ForceAmxProbeLoader(spec.loader)
        return spec


def _install() -> None:
    if os.environ.get("SGLANG_USE_CPU_ENGINE") != "1":
        return
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return
    if not any(isinstance(f, _ForceAmxProbeFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _ForceAmxProbeFinder())


def _chain_next_sitecustomize() -> None:
    """Run the sitecustomize this file shadows (if any), so putting it on PYTHONPATH hides nothing."""
    others = [p for p in sys.path if p and os.path.abspath(p) != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", others)
    if spec is None or spec.loader is None or spec.origin == __file__:
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


_install()
_chain_next_sitecustomize()
