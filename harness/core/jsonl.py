"""Append-only JSONL files: every append is flushed and fsynced; readers tolerate one torn final line.

A torn final line (a process killed mid-write) is reported and, when a writer reopens the file, cut off so the
next record starts on a clean line. Any other malformed line is a ``DataError`` naming the file and line.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterator

from harness.core.errors import DataError, MissingFileError, OutputError

DISK_FULL_FIX = "free space, then --resume"
"""What a sweep says when its disk fills up: nothing written is lost, the run continues with ``--resume``."""


def write_error(path: Path, exc: OSError, fix: str = "choose a writable output folder") -> OutputError:
    """An OutputError for a failed write; a full disk (ENOSPC, EDQUOT) says "free space, then --resume"."""
    import errno

    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return OutputError(
            f"cannot write {path}: no space left on the device (nothing written is lost)",
            fix=f"{DISK_FULL_FIX} (for a sweep: harness sweep --resume RUN_DIR)",
        )
    return OutputError(f"cannot write {path}: {exc.strerror or exc}", fix=fix)


def read_json_object(path: Path, what: str, fix: str) -> dict[str, Any]:
    """The JSON object in ``path``; a ``DataError`` (exit 3) naming the file as ``what`` when it cannot be read, is
    not JSON, or holds something else than an object."""
    try:
        body = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise DataError(f"{path} is corrupt, not a readable {what} ({exc})", fix=fix) from None
    if not isinstance(body, dict):
        raise DataError(f"{path} is not a {what} (not a JSON object)", fix=fix)
    return body


def read_jsonl(path: str | Path, *, allow_torn_tail: bool = True) -> list[dict[str, Any]]:
    """All records of a JSONL file. A truncated last line is skipped when ``allow_torn_tail``."""
    return list(iter_jsonl(path, allow_torn_tail=allow_torn_tail))


def iter_jsonl(path: str | Path, *, allow_torn_tail: bool = True) -> Iterator[dict[str, Any]]:
    p = Path(path)
    if not p.exists():
        raise MissingFileError(
            f"file not found: {p}", fix="check the path (a run folder holds rows.jsonl and dataset.jsonl)"
        )
    data = p.read_bytes()
    lines = data.split(b"\n")
    torn_tail = not data.endswith(b"\n") and data != b""
    for i, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        is_last = i == len(lines)
        try:
            rec = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            if is_last and torn_tail and allow_torn_tail:
                return
            if is_last and torn_tail:
                raise DataError(
                    f"{p}:{i}: torn last line (unterminated, unparsable: a writer was killed mid-line); "
                    f"the {i - 1} lines before it are intact",
                    fix="harness sweep --resume RUN_DIR repairs a run folder's torn tail; in a file, delete that last line",
                ) from None
            raise DataError(
                f"{p}:{i}: malformed JSON line ({exc.msg if hasattr(exc, 'msg') else exc})",
                fix="repair or remove that line; a run folder can be resumed with --resume",
            ) from None
        if not isinstance(rec, dict):
            raise DataError(
                f"{p}:{i}: expected a JSON object per line, got {type(rec).__name__}",
                fix="each line must be one JSON object",
            )
        yield rec


def repair_torn_tail(path: str | Path) -> int:
    """Cut a torn (unterminated, unparsable) final line off ``path``; return the bytes removed."""
    p = Path(path)
    if not p.exists():
        return 0
    data = p.read_bytes()
    if not data or data.endswith(b"\n"):
        return 0
    cut = data.rfind(b"\n") + 1
    tail = data[cut:]
    try:
        json.loads(tail)
        # A complete record that only lacks its newline: keep it, add the newline.
        with open(p, "ab") as f:
            f.write(b"\n")
            f.flush()
            os.fsync(f.fileno())
        return 0
    except (json.JSONDecodeError, UnicodeDecodeError):
        with open(p, "r+b") as f:
            f.truncate(cut)
            f.flush()
            os.fsync(f.fileno())
        return len(tail)


class JsonlAppender:
    """Append records to a JSONL file, one fsynced line each (``fsync=False`` flushes only)."""

    def __init__(self, path: str | Path, *, fsync: bool = True) -> None:
        self.path = Path(path)
        self.fsync = fsync
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            repair_torn_tail(self.path)
            self._f = open(self.path, "ab")
        except OSError as exc:
            raise OutputError(
                f"cannot write {self.path}: {exc.strerror}", fix="choose a writable --out folder"
            ) from None

    def append(self, record: dict[str, Any]) -> None:
        """Append one line; a failed write (full disk) is cut back off, so the file never keeps a torn line."""
        line = (json.dumps(record, separators=(",", ":"), allow_nan=False) + "\n").encode()
        start = self._f.tell()
        try:
            self._f.write(line)
            self._f.flush()
            if self.fsync:
                os.fsync(self._f.fileno())
        except OSError as exc:
            self._rollback(start)
            raise write_error(self.path, exc, fix="choose a writable --out folder") from None

    def _rollback(self, size: int) -> None:
        """Drop whatever part of a failed line reached the file (and the unflushed buffer with it)."""
        try:
            self._f.close()
        except OSError:
            pass
        try:
            os.truncate(self.path, size)
        except OSError:
            pass
        self._f = open(self.path, "ab")

    def close(self) -> None:
        if not self._f.closed:
            self._f.close()

    def __enter__(self) -> "JsonlAppender":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _write_atomic(path: str | Path, text: str) -> None:
    """Write ``text`` to a temp sibling, fsync, rename; on any failure the temp file is removed."""
    p = Path(path)
    tmp = p.with_name(f".{p.name}.tmp{os.getpid()}")
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, p)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise write_error(p, exc) from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_json_atomic(path: str | Path, obj: Any) -> None:
    """Write JSON to a temp file, fsync, rename: readers never see a half-written file, no temp file is left."""
    _write_atomic(path, json.dumps(obj, indent=2, sort_keys=False, default=str) + "\n")


def write_jsonl_atomic(path: str | Path, records: list[dict[str, Any]]) -> None:
    """Write a whole JSONL file atomically (temp file + fsync + rename). Non-finite numbers are a DataError
    raised before anything is written."""
    try:
        text = "".join(json.dumps(r, separators=(",", ":"), allow_nan=False) + "\n" for r in records)
    except ValueError as exc:
        raise DataError(
            f"cannot write {path}: {exc} (NaN or infinity in a record)",
            fix="find the row with harness dataset validate and fix or drop it",
        ) from None
    _write_atomic(path, text)
