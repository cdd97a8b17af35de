"""``harness pilot setup --suite terminalbench``: the isolated Harbor venv (or a check of ``--harbor-bin``)."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field
from rich.console import Console

from harness.core.errors import HarnessError
from pilots.terminalbench.harbor_install import (
    HARBOR_VERSION,
    default_venv,
    find_python312,
    harbor_version,
    resolve_harbor_bin,
)


class SetupOptions(BaseModel):
    """Suite flags of ``harness pilot setup --suite terminalbench``."""

    model_config = ConfigDict(extra="forbid")

    harbor_bin: str | None = Field(default=None, description="Use this Harbor executable instead of creating a venv.")
    venv: Path | None = Field(
        default=None, description="Where to create the Harbor venv (default <project>/.harbor-venv)."
    )
    python: str | None = Field(default=None, description="Python >= 3.12 for the venv (default: found automatically).")
    harbor_version: str = Field(default=HARBOR_VERSION, description="Pinned Harbor version.")
    force: bool = Field(default=False, description="Recreate the venv even if it already has Harbor.")


SUITE_OPTIONS = SetupOptions


class SetupError(HarnessError):
    exit_code = 5


def setup(options: object, extra: SetupOptions | None = None) -> Path:
    """Create (or check) the Harbor install; return the path of its ``harbor`` executable."""
    console = Console(emoji=False)
    opts = extra if isinstance(extra, SetupOptions) else SetupOptions()
    if opts.harbor_bin:
        harbor = resolve_harbor_bin(opts.harbor_bin)
        console.print(f"using Harbor at {harbor}: version {harbor_version(harbor) or 'unknown'}")
        return harbor
    venv = (opts.venv or default_venv()).resolve()
    harbor = venv / "bin" / "harbor"
    if harbor.exists() and not opts.force:
        have = harbor_version(harbor)
        if have == opts.harbor_version:
            console.print(f"Harbor {have} already installed in {venv}")
            return harbor
        console.print(f"{venv} has Harbor {have or 'unknown'}; installing {opts.harbor_version}")
    python = opts.python or find_python312()
    t0 = time.monotonic()
    if opts.force and venv.exists():
        shutil.rmtree(venv)
    if not (venv / "bin" / "python").exists():
        console.print(f"creating venv {venv} with {python}")
        _run([python, "-m", "venv", str(venv)], "create the Harbor venv")
    console.print(f"installing harbor=={opts.harbor_version} (about 95 s, 430 MB)")
    _run(
        [
            str(venv / "bin" / "python"),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            f"harbor=={opts.harbor_version}",
        ],
        "install Harbor",
    )
    have = harbor_version(harbor)
    if have != opts.harbor_version:
        raise SetupError(
            f"Harbor in {venv} reports version {have!r}, expected {opts.harbor_version}", fix="rerun with --force"
        )
    console.print(f"Harbor {have} ready in {venv} ({time.monotonic() - t0:.0f} s)")
    return harbor


def _run(argv: list[str], what: str) -> None:
    proc = subprocess.run(argv, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-15:])
        raise SetupError(
            f"could not {what} (exit {proc.returncode}):\n{tail}",
            fix="check that PyPI is reachable and that the interpreter has the venv module",
        )
