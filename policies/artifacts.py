"""Artifact integrity: ``harness train`` records the sha256 of every file it writes under ``MODELS/<algo>/`` in
``train.json`` (``artifact_sha256``), and loading checks each file against it before reading it, since an artifact
can be a pickle (gbt's ``model.joblib``) and loading one can run code. ``--trust-artifacts`` skips the check."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Iterable, Mapping

from harness.core.errors import DataError

HASHES_KEY = "artifact_sha256"
"""The ``train.json`` key: ``{"<algo>/<file>": sha256 hex}``."""
TRUST_FLAG = "--trust-artifacts"
TRUST_HELP = (
    "load the models folder's artifacts without checking them against the sha256 harness train recorded "
    "(a folder trained before hashes were recorded, or artifacts you placed there yourself and trust)"
)


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def record(models: Path, files: Iterable[Path]) -> dict[str, str]:
    """``{path relative to models: sha256}`` of each of ``files`` (written under ``models``)."""
    return {p.relative_to(models).as_posix(): file_sha256(p) for p in files}


def previous_hashes(train_file: Path) -> dict[str, str]:
    """The hashes an earlier ``train`` into the same folder recorded in ``train_file`` (its other algorithms stay
    loadable); none when there is no readable one."""
    try:
        meta = json.loads(train_file.read_text())
    except (OSError, ValueError):
        return {}
    found = meta.get(HASHES_KEY) if isinstance(meta, dict) else None
    return {k: v for k, v in found.items() if isinstance(v, str)} if isinstance(found, dict) else {}


def recorded_for(meta: Mapping[str, object], name: str) -> dict[str, str]:
    """``{file name: sha256}`` that a ``train.json`` (``meta``) records for ``MODELS/<name>/``."""
    found = meta.get(HASHES_KEY)
    if not isinstance(found, dict):
        return {}
    prefix = f"{name}/"
    return {k[len(prefix) :]: v for k, v in found.items() if k.startswith(prefix) and isinstance(v, str)}


def verify(directory: Path, names: Iterable[str], expected: Mapping[str, str], *, what: str, fix: str) -> None:
    """Each ``directory/<name>`` must match its recorded sha256; a file with no recorded hash, a missing one or a
    changed one is a DataError, and nothing is loaded."""
    fix = f"{fix}; or, for a folder you trust, pass {TRUST_FLAG}"
    for name in names:
        path = directory / name
        want = expected.get(name)
        if want is None:
            raise DataError(
                f"{what} {path} has no sha256 recorded in train.json (not written by harness train, or trained "
                "before artifacts were hashed); an artifact can be a pickle, so it is not loaded",
                fix=fix,
            )
        got = file_sha256(path) if path.is_file() else None
        if got != want:
            seen = f"sha256 {got[:12]}..." if got else "missing"
            raise DataError(
                f"{what} {path} is not the file harness train wrote ({seen}, recorded {want[:12]}...): corrupt or "
                "replaced since training, so it is not loaded",
                fix=fix,
            )
