"""``RUN_DIR/manifest.json``: what produced a run (versions, git commit, argv, engine and GPU identity, seeds, launches)."""

from __future__ import annotations

import json
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

from harness.errors import DataError, MissingFileError
from harness.jsonl import write_json_atomic
from harness.timeutil import to_iso, wall_ns

MANIFEST = "manifest.json"
SCHEMA = 1
"""The manifest layout this harness writes and reads; a newer one is refused, never half-read."""


def git_commit(path: str | Path | None = None) -> dict[str, Any]:
    """The git commit (and whether the tree is dirty) of the checkout holding the harness, if any."""
    where = Path(path) if path else Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=where, capture_output=True, text=True, timeout=5)
        if head.returncode != 0:
            return {"commit": None}
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=where, capture_output=True,
                               text=True, timeout=5)
        return {"commit": head.stdout.strip(), "dirty": bool(dirty.stdout.strip())}
    except (OSError, subprocess.SubprocessError):
        return {"commit": None}


def versions() -> dict[str, Any]:
    from importlib import metadata

    out: dict[str, Any] = {"python": sys.version.split()[0], "platform": platform.platform()}
    for dist in ("eagle-energy-harness", "httpx", "pydantic", "nvidia-ml-py", "sglang"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = None
    return out


def new_manifest(run_id: str, argv: list[str], options: dict[str, Any]) -> dict[str, Any]:
    now = wall_ns()
    return {
        "schema": SCHEMA,
        "run_id": run_id,
        "created_ns": now,
        "created": to_iso(now),
        "status": "running",
        "argv": argv,
        "options": options,
        "versions": versions(),
        "git": git_commit(),
        "sessions": [],
        "launches": 0,
        "cells_planned": None,
        "cells_done": 0,
    }


def write_manifest(run_dir: str | Path, manifest: dict[str, Any]) -> None:
    write_json_atomic(Path(run_dir) / MANIFEST, manifest)


def read_manifest(run_dir: str | Path) -> dict[str, Any]:
    p = Path(run_dir) / MANIFEST
    if not p.exists():
        raise MissingFileError(f"{p} not found: {run_dir} is not a sweep run folder", fix="pass the folder a sweep wrote (--out)")
    try:
        data = json.loads(p.read_text())
    except json.JSONDecodeError as exc:
        raise DataError(f"{p} is not valid JSON: {exc.msg}", fix="the manifest is written atomically; restore it from a backup") from None
    if not isinstance(data, dict) or "run_id" not in data:
        raise DataError(f"{p} is not a sweep manifest", fix="pass the folder a sweep wrote (--out)")
    schema = data.get("schema", SCHEMA)
    if not isinstance(schema, int) or isinstance(schema, bool) or schema < 1:
        raise DataError(f"{p}: schema {schema!r} is not a manifest schema number", fix="restore the manifest a sweep wrote")
    if schema > SCHEMA:
        raise DataError(f"{p} has schema {schema}, newer than this harness reads ({SCHEMA})",
                        fix="use the harness version that wrote this run (see the manifest's versions), or upgrade")
    return data


def read_options(run_dir: str | Path) -> Any:
    """The ``SweepOptions`` a run was planned with; a manifest without usable ``options`` is a DataError."""
    from pydantic import ValidationError

    from harness.sweep import SweepOptions

    manifest = read_manifest(run_dir)
    p = Path(run_dir) / MANIFEST
    raw = manifest.get("options")
    if not isinstance(raw, dict):
        raise DataError(f"{p} has no 'options' (the sweep's planned grid)",
                        fix="restore the manifest the sweep wrote; without it the run cannot be resumed or checked against its plan")
    try:
        return SweepOptions.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(x) for x in err["loc"]) or "options"
        raise DataError(f"{p}: options.{where}: {err['msg']}", fix="restore the manifest the sweep wrote") from None
