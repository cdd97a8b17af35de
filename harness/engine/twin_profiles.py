"""The twin profiles a ``--twin-profile`` value may name, for the engine block (``harness.engine.options``).

The engine wing sits below the twin's, so it reads the twin's profile folder as files and imports nothing from it:
a name must be one of the shipped ``harness/twin/profiles/*.json``, a path an existing JSON object. The twin GPU
validates the profile itself when it loads it (``harness.twin.profile.load_profile``), and ``harness.twin.profile``
takes its folder, default and names from here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.core.errors import MissingFileError, UsageError
from harness.core.jsonl import read_json_object

PROFILES_DIR = Path(__file__).resolve().parents[1] / "twin" / "profiles"
DEFAULT_PROFILE = "rtx4060-laptop"


def known_profiles() -> list[str]:
    """The names of the profiles shipped in ``harness/twin/profiles/``."""
    return sorted(q.stem for q in PROFILES_DIR.glob("*.json"))


def check_twin_profile(value: Any, name: str = "--twin-profile") -> str | None:
    """A ``--twin-profile`` value: a shipped profile's name (``h100-sxm``) or a path to a profile JSON. An unknown
    name is a usage error (exit 2) listing the known ones; a missing or non-JSON file exit 3, as any input."""
    if value is None:
        return None
    known = ", ".join(known_profiles()) or "none"
    fix = f"use one of: {known}, or a path to a profile JSON"
    if not isinstance(value, str) or not value.strip():
        raise UsageError(f"{name} {value!r} is not a twin profile name (known: {known})", fix=fix)
    text = value.strip()
    if not (text.endswith(".json") or "/" in text or "\\" in text):
        if not (PROFILES_DIR / f"{text}.json").exists():
            raise UsageError(f"{name} {text!r} is not a twin profile (known: {known})", fix=fix)
        return text
    path = Path(text).expanduser()
    if not path.is_file():
        raise MissingFileError(f"twin profile not found: {path}", fix=fix)
    read_json_object(path, "twin profile", "regenerate it with `harness twin calibrate`")
    return text
