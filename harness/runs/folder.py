"""A sweep's run folder: its files, a new run id, preparing the folder for a new run or a resume."""

from __future__ import annotations

import shutil
import time
import uuid
from pathlib import Path

from harness.core.errors import OutputError
from harness.runs.lock import RunLock

RECIPE_FILE = "recipe.json"
"""``--strategy active``: the recipe per batch size (harness.sweep.active)."""
PROFILE_FILE = "twin_profile.json"
"""``--strategy active``: the twin profile fitted to the run's rows."""
RUN_FILES = ("rows.jsonl", "dataset.jsonl", "manifest.json", "published.jsonl", RECIPE_FILE, PROFILE_FILE)
RUN_DIRS = ("logs", "sampler", "reports")


def new_run_id() -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + uuid.uuid4().hex[:6]


def prepare_run_dir(out: Path, *, force: bool, lock: RunLock | None = None) -> None:
    """Create ``out`` and take its writer lock (when given); refuse a folder that holds a run unless ``force`` (which
    deletes only the run's own files, and only once the lock shows nobody else is writing them)."""
    if out.exists() and not out.is_dir():
        raise OutputError(f"--out {out} exists and is not a folder", fix="choose another --out")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"cannot write to {out}: {exc.strerror}", fix="choose a writable --out folder") from None
    if lock is not None:
        lock.acquire()
    has_run = any((out / f).exists() for f in RUN_FILES[:3])
    if has_run and not force:
        if lock is not None:
            lock.release()
        raise OutputError(
            f"{out} already holds a run", fix=f"continue it with --resume {out}, or pass --force to start over"
        )
    if has_run and force:
        for f in RUN_FILES:
            (out / f).unlink(missing_ok=True)
        for d in RUN_DIRS:
            shutil.rmtree(out / d, ignore_errors=True)
    try:
        probe = out / f".write-test-{uuid.uuid4().hex[:6]}"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        if lock is not None:
            lock.release()
        raise OutputError(f"cannot write to {out}: {exc.strerror}", fix="choose a writable --out folder") from None


def prepare_resume(run_dir: Path) -> None:
    """Repair torn tails before resuming (RowStore also re-derives missing published lines)."""
    from harness.core.jsonl import repair_torn_tail

    for name in ("rows.jsonl", "dataset.jsonl"):
        repair_torn_tail(run_dir / name)
