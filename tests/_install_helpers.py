"""Fresh virtual environments for the install tests: an offline wheelhouse of the core dependencies, a hand-written
stand-in ``torch`` wheel, and the project's sources copied out of the work tree.

The wheelhouse holds the core dependencies (and setuptools, for the build) at exactly the versions this test venv has,
downloaded once with ``pip download`` (pip's own index and cache) into ``.e2e/test-cache/core-wheels`` (git-ignored);
installs then run with ``--no-index --find-links`` so nothing else can be fetched, and no GPU/CUDA wheel ever is.
"""

from __future__ import annotations

import base64
import hashlib
import shutil
import subprocess
import sys
import tomllib
import zipfile
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / ".e2e" / "test-cache" / "core-wheels"
SOURCES = ("pyproject.toml", "README.md", "harness", "pilots", "policies")


def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _closure(requirements: list[str]) -> dict[str, str]:
    """Every distribution the requirements pull in (markers evaluated here, no extras), at its installed version."""
    pinned: dict[str, str] = {}
    todo = [Requirement(r) for r in requirements]
    while todo:
        req = todo.pop()
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        name = canonicalize_name(req.name)
        if name in pinned:
            continue
        pinned[name] = metadata.version(name)
        todo += [Requirement(r) for r in metadata.requires(name) or []]
    return pinned


def core_wheelhouse() -> Path:
    """The cached wheelhouse of the core dependencies (filled on first use; needs pip's index once)."""
    pins = _closure(pyproject()["dependencies"] + ["setuptools>=68"])
    wanted = sorted(f"{n}=={v}" for n, v in pins.items())
    stamp = CACHE / "requirements.txt"
    if stamp.exists() and stamp.read_text().split() == wanted:
        return CACHE
    CACHE.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "-q",
            "--disable-pip-version-check",
            "--no-deps",
            "--only-binary=:all:",
            "-d",
            str(CACHE),
            *wanted,
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if proc.returncode != 0:
        raise RuntimeError(
            f"could not fill {CACHE} with the core wheels ({' '.join(wanted)}); pip's index is needed "
            f"once (or put those wheels there by hand):\n{proc.stderr[-2000:]}"
        )
    stamp.write_text("\n".join(wanted) + "\n")
    return CACHE


def write_wheel(out_dir: Path, name: str, version: str, files: dict[str, str], summary: str) -> Path:
    """A minimal pure-Python wheel (METADATA, WHEEL, RECORD with hashes) holding ``files``."""
    dist = f"{name}-{version}"
    path = out_dir / f"{dist}-py3-none-any.whl"
    records: list[str] = []
    with zipfile.ZipFile(path, "w") as z:

        def add(arcname: str, text: str) -> None:
            data = text.encode()
            z.writestr(arcname, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            records.append(f"{arcname},sha256={digest},{len(data)}")

        for arcname, text in files.items():
            add(arcname, text)
        add(
            f"{dist}.dist-info/METADATA",
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\nSummary: {summary}\n",
        )
        add(
            f"{dist}.dist-info/WHEEL",
            "Wheel-Version: 1.0\nGenerator: eagle-energy-harness tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        )
        records.append(f"{dist}.dist-info/RECORD,,")
        z.writestr(f"{dist}.dist-info/RECORD", "\n".join(records) + "\n")
    return path


STANDIN_TORCH_VERSION = "2.8.0+standin"  # a torch other than the suite's 2.13.0, marked as a stand-in


def standin_torch_wheel(out_dir: Path) -> Path:
    """A STAND-IN named ``torch`` (a few bytes, not PyTorch) at a version other than the one the suite uses: what pip
    sees of an sglang environment's own torch, without downloading a multi-GB CUDA wheel."""
    init = (
        f'"""Stand-in distribution named torch for the install tests; not PyTorch."""\n'
        f'__version__ = "{STANDIN_TORCH_VERSION}"\n'
    )
    return write_wheel(
        out_dir,
        "torch",
        STANDIN_TORCH_VERSION,
        {"torch/__init__.py": init},
        "stand-in for an environment's own torch (install tests only)",
    )


def copy_sources(dest: Path) -> Path:
    """The project's sources (what an sdist holds) copied out, so a build never writes into the work tree."""
    dest.mkdir(parents=True, exist_ok=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for name in SOURCES:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=ignore)
        else:
            shutil.copy2(src, dest / name)
    return dest


def new_venv(path: Path) -> Path:
    """A fresh venv without pip of its own (``pip()`` drives it from outside with ``--python``); returns its bin."""
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(path)], check=True, capture_output=True, timeout=120
    )
    return path / "bin"


def pip(bin_dir: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """pip acting on that venv, offline: only wheels and folders named on the command line or via --find-links (no
    config files, so neither this machine's index nor its local torch wheels)."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(bin_dir / "python"),
            "--disable-pip-version-check",
            "--no-input",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={
            "PATH": f"{bin_dir}:/usr/bin:/bin",
            "PIP_NO_INDEX": "1",
            "PIP_CONFIG_FILE": "/dev/null",
            "PIP_NO_COMPILE": "1",
            "HOME": str(bin_dir.parent),
        },
    )
