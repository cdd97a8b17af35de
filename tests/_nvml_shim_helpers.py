"""The NVML shim for tests: build ``tests/nvml_shim/nvml_shim.c`` into a ``libnvidia-ml.so.1`` with gcc, write its
script of values, and load it under the real nvidia-ml-py (in this process or through ``LD_LIBRARY_PATH``).

The shim is a faithful stand-in for the NVIDIA driver's library (same entry points, struct layouts and return codes
as nvml.h for what the probe calls), not the driver: see docs/telemetry.md for what it cannot show.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

SHIM_SRC = Path(__file__).resolve().parent / "nvml_shim" / "nvml_shim.c"
SONAME = "libnvidia-ml.so.1"
# NVML return codes (nvml.h) the tests script
NOT_SUPPORTED, FUNCTION_NOT_FOUND, GPU_IS_LOST, UNKNOWN = 3, 13, 15, 999
POWER_AVERAGE, POWER_INSTANT = 185, 186
# An older driver: entry points added in later releases are absent from its library
OLD_DRIVER = ("nvmlDeviceGetMemoryInfo_v2", "nvmlDeviceGetCurrentClocksEventReasons")

DEFAULT_SCRIPT: dict[str, Any] = {
    "name": "NVIDIA H200 (shim)", "uuid": "GPU-5h1m0000-0000-0000-0000-000000000001", "driver_version": "575.57.08",
    "nvml_version": "12.575.57.08", "power_mw": 71500, "power_avg_mw": 70250, "power_usage_mw": 69000,
    "energy_start_mj": 5_000_000, "temperature_c": 61, "sm_clock_mhz": 1980, "mem_clock_mhz": 3201, "util_gpu": 97,
    "util_mem": 40, "mem_total": 8 << 30, "mem_reserved": 1 << 28, "mem_used": 3 << 30, "limit_enforced_mw": 600000,
    "limit_mgmt_mw": 650000, "limit_default_mw": 700000, "clock_events": 0x4,
}  # fmt: skip


def build_shim(out_dir: Path, omit: tuple[str, ...] = ()) -> Path:
    """Compile the shim into ``out_dir/libnvidia-ml.so.1`` (without the ``omit`` entry points); returns ``out_dir``."""
    gcc = shutil.which("gcc") or shutil.which("cc")
    if gcc is None:
        raise RuntimeError("the NVML shim tests need a C compiler: install gcc (apt-get install gcc)")
    out_dir.mkdir(parents=True, exist_ok=True)
    argv = [gcc, "-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-Werror", f"-Wl,-soname,{SONAME}", "-o", str(out_dir / SONAME),
            str(SHIM_SRC), "-lpthread", *(f"-DOMIT_{name}" for name in omit)]  # fmt: skip
    r = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        raise RuntimeError(f"building the NVML shim failed:\n{r.stderr}")
    return out_dir


_BUILT: dict[tuple[str, ...], Path] = {}


def session_shim(tmp_path_factory: Any, omit: tuple[str, ...] = ()) -> Path:
    """The shim directory for this test session, built on first use (once per ``omit`` set, shared by all files)."""
    key = tuple(sorted(omit))
    if key not in _BUILT:
        _BUILT[key] = build_shim(tmp_path_factory.mktemp("nvml-shim"), omit=key)
    return _BUILT[key]


class ShimScript:
    """The shim's script file. Every change is written to a new file renamed over the old one (the shim re-reads
    it on its next call), so a test can change values, fail entry points or lose the GPU mid-run."""

    def __init__(self, path: Path, **values: Any) -> None:
        self.path = path
        self.values: dict[str, Any] = {**DEFAULT_SCRIPT, **values}
        self._write()

    def set(self, values: dict[str, Any]) -> "ShimScript":
        """Change keys (None removes one); keys like ``fail.nvmlDeviceGetPowerUsage`` or ``field.186`` included."""
        for k, v in values.items():
            if v is None:
                self.values.pop(k, None)
            else:
                self.values[k] = v
        self._write()
        return self

    def fail(self, function: str, code: int | None) -> "ShimScript":
        """Make an entry point return ``code`` (None: answer normally again)."""
        return self.set({f"fail.{function}": code})

    def field(self, field_id: int, code: int | None) -> "ShimScript":
        """Make one field of ``nvmlDeviceGetFieldValues`` answer ``code`` (None: answer normally again)."""
        return self.set({f"field.{field_id}": code})

    def _write(self) -> None:
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text("".join(f"{k} = {v}\n" for k, v in self.values.items()))
        os.replace(tmp, self.path)

    def env(self, lib_dir: Path) -> dict[str, str]:
        """Environment for a child process that loads the shim through nvidia-ml-py's own ``dlopen``."""
        return {"LD_LIBRARY_PATH": os.pathsep.join(filter(None, [str(lib_dir), os.environ.get("LD_LIBRARY_PATH")])),
                "NVML_SHIM_SCRIPT": str(self.path)}  # fmt: skip


def load_in_process(lib_dir: Path) -> ctypes.CDLL:
    """Load the shim into this process by path. nvidia-ml-py's own ``CDLL("libnvidia-ml.so.1")`` then gets this
    library (the dynamic loader matches an already-loaded object by its soname), so the real binding code runs.
    Without ``NVML_SHIM_SCRIPT`` in the environment the shim answers like a machine without a driver.
    Raises if nvidia-ml-py already holds another NVML library (a real driver's, on a GPU host)."""
    lib = ctypes.CDLL(str(lib_dir / SONAME))
    import pynvml

    pynvml._LoadNvmlLibrary()  # the binding's own (private) loader, as nvmlInit runs it
    ours, theirs = (ctypes.cast(x.nvmlInitWithFlags, ctypes.c_void_p).value for x in (lib, pynvml.nvmlLib))
    if ours != theirs:
        raise RuntimeError(
            f"nvidia-ml-py already loaded another NVML library ({pynvml.nvmlLib}); run the shim tests in a fresh process"
        )
    return lib


def call_count(lib: ctypes.CDLL, function: str) -> int:
    """How often the shim's entry point ``function`` was called in this process (a shim-only symbol)."""
    fn = lib.nvmlShimCallCount
    fn.restype, fn.argtypes = ctypes.c_ulong, [ctypes.c_char_p]
    return int(fn(function.encode()))


# Codes a loaded test machine alone can raise (a descheduled sampler); they say nothing about NVML handling
LOAD_ONLY_REASONS = {"gap_over_3_periods", "coverage_below_95pct", "slow_probe"}


def assert_measured(w: Any, power_w: float, method: str) -> None:
    """The window's energy is ``power_w`` x its duration by ``method``, and nothing but machine load flagged it."""
    assert set(w.reasons) <= LOAD_ONLY_REASONS, w.reasons
    assert w.energy_method == method and w.energy_j is not None
    assert abs(w.energy_j - power_w * w.duration_s) <= 0.01 * power_w * w.duration_s, (
        w.energy_j,
        power_w * w.duration_s,
    )
