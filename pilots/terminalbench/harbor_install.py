"""Where Harbor lives and how it is run: a Python >= 3.12 interpreter, the isolated venv, the process environment.

Harbor needs Python >= 3.12 and is never imported by the harness; it runs as a subprocess from its own venv
(default ``<project>/.harbor-venv``, made by ``harness pilot setup --suite terminalbench``) or from ``--harbor-bin`` /
env ``HARBOR_BIN``. Every Harbor process gets ``HARBOR_TELEMETRY=0``, ``LITELLM_LOCAL_MODEL_COST_MAP=True``, a placeholder
``OPENAI_API_KEY`` and, unless already set, ``HF_HUB_OFFLINE=1`` (see ``harbor_environ``).
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
from pathlib import Path

from harness.core.errors import HarnessError, MissingFileError

HARBOR_VERSION = "0.25.0"
MIN_PYTHON = (3, 12)
PLACEHOLDER_API_KEY = "sk-local-placeholder"
SANDBOX_DIR = Path(__file__).resolve().parent / "harbor_side"
"""Put on Harbor's PYTHONPATH so ``--env tb_local_sandbox:LocalSandboxEnvironment`` imports."""
LOCAL_SANDBOX_IMPORT = "tb_local_sandbox:LocalSandboxEnvironment"


class HarborNotFoundError(HarnessError):
    """No usable Harbor executable or Python >= 3.12 interpreter."""

    exit_code = 4


def project_root() -> Path:
    """The checkout root (holds pyproject.toml) for an editable install, else the current folder."""
    root = Path(__file__).resolve().parents[2]
    return root if (root / "pyproject.toml").exists() else Path.cwd()


def default_venv() -> Path:
    return project_root() / ".harbor-venv"


def python_version(python: str | Path) -> tuple[int, int] | None:
    """(major, minor) of an interpreter, or None when it does not run."""
    try:
        out = subprocess.run(
            [str(python), "-c", "import sys; print(sys.version_info[0], sys.version_info[1])"],
            capture_output=True,
            text=True,
            timeout=20,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    try:
        major, minor = (int(x) for x in out.stdout.split())
    except ValueError:
        return None
    return major, minor


def candidate_pythons() -> list[str]:
    """Interpreters to try, most explicit first: $HARBOR_PYTHON, python3.13/3.12 on PATH, pyenv, /usr, this one."""
    out: list[str] = []
    if os.environ.get("HARBOR_PYTHON"):
        out.append(os.environ["HARBOR_PYTHON"])
    for name in ("python3.14", "python3.13", "python3.12"):
        found = shutil.which(name)
        if found:
            out.append(found)
    pyenv_root = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    for pattern in (
        f"{pyenv_root}/versions/3.1[2-9]*/bin/python3",
        "/usr/local/bin/python3.1[2-9]",
        "/usr/bin/python3.1[2-9]",
    ):
        out.extend(sorted(glob.glob(pattern), reverse=True))
    for name in ("python3", "python"):
        found = shutil.which(name)
        if found:
            out.append(found)
    out.append(sys.executable)
    return list(dict.fromkeys(out))


def find_python312() -> str:
    """The first interpreter >= 3.12; ``HarborNotFoundError`` naming what was tried otherwise."""
    tried = []
    for cand in candidate_pythons():
        ver = python_version(cand)
        tried.append(f"{cand} ({'.'.join(map(str, ver)) if ver else 'does not run'})")
        if ver and ver >= MIN_PYTHON:
            return cand
    raise HarborNotFoundError(
        "Harbor needs Python >= 3.12 and none was found; tried: " + ", ".join(tried),
        fix="install Python 3.12 (e.g. apt-get install python3.12 python3.12-venv, or pyenv install 3.12) "
        "or point HARBOR_PYTHON at one",
    )


def resolve_harbor_bin(harbor_bin: str | Path | None = None) -> Path:
    """``--harbor-bin``, else ``$HARBOR_BIN``, else ``<venv>/bin/harbor``; must exist and be executable."""
    explicit = harbor_bin or os.environ.get("HARBOR_BIN")
    path = Path(explicit) if explicit else default_venv() / "bin" / "harbor"
    if not explicit and not path.exists():
        found = shutil.which("harbor")
        if found:
            path = Path(found)
    if not path.exists() or not os.access(path, os.X_OK):
        raise HarborNotFoundError(
            f"Harbor executable not found at {path}",
            fix="run `harness pilot setup --suite terminalbench` (creates .harbor-venv with harbor=="
            f"{HARBOR_VERSION}) or pass --harbor-bin / set HARBOR_BIN",
        )
    return path


def harbor_python(harbor_bin: Path) -> Path:
    """The interpreter of a Harbor venv (``bin/python`` beside ``bin/harbor``), or the script's shebang."""
    beside = harbor_bin.parent / "python"
    if beside.exists():
        return beside
    first = harbor_bin.read_text(errors="replace").splitlines()[0] if harbor_bin.is_file() else ""
    if first.startswith("#!"):
        return Path(first[2:].strip().split()[0])
    raise MissingFileError(f"cannot find the Python of {harbor_bin}", fix="pass --harbor-bin of a venv install")


def harbor_environ(base: dict[str, str] | None = None, *, tz: str | None = None) -> dict[str, str]:
    """The environment of every Harbor process: no telemetry, no cost-map download, a placeholder key.

    The local sandbox folder is prepended to ``PYTHONPATH`` so Harbor can import the custom environment.
    A real ``OPENAI_API_KEY`` already set is replaced: the pilot only talks to the local server.
    """
    env = dict(os.environ if base is None else base)
    env["HARBOR_TELEMETRY"] = "0"
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    env["OPENAI_API_KEY"] = PLACEHOLDER_API_KEY
    env["PYTHONPATH"] = os.pathsep.join([str(SANDBOX_DIR), *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])])
    # litellm's token counter loads a Hugging Face tokenizer for llama-named models (Xenova/llama-3-tokenizer); offline
    # that costs ~25 s of hub timeouts inside the first trial's measured window. Offline unless the caller says so.
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.pop("VIRTUAL_ENV", None)
    env.setdefault("PYTHONUNBUFFERED", "1")
    if tz is not None:
        env["TZ"] = tz
    return env


def harbor_version(harbor_bin: Path) -> str | None:
    """Harbor's version: from the venv's ``harbor-*.dist-info`` when there is one (fast), else ``harbor --version``."""
    infos = glob.glob(str(Path(harbor_bin).parent.parent / "lib" / "python3*" / "site-packages" / "harbor-*.dist-info"))
    if len(infos) == 1:
        return Path(infos[0]).name[len("harbor-") : -len(".dist-info")]
    try:
        out = subprocess.run(
            [str(harbor_bin), "--version"], capture_output=True, text=True, timeout=60, env=harbor_environ()
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip().splitlines()[-1] if out.returncode == 0 and out.stdout.strip() else None


def check_local_sandbox_host() -> None:
    """The local sandbox needs root, util-linux and tmux on the host (its system dirs are the sandbox's, read-only)."""
    if os.geteuid() != 0:
        raise HarnessError(
            "the local sandbox environment needs root (it uses unshare, mount and chroot)",
            fix="run as root, or use --env docker",
        )
    missing = [t for t in ("tmux", "unshare", "nsenter", "chroot", "mount") if shutil.which(t) is None]
    if missing:
        raise HarnessError(
            f"the local sandbox needs {', '.join(missing)} on this host (Terminus 2 drives tmux)",
            fix="apt-get install -y tmux util-linux coreutils",
        )
