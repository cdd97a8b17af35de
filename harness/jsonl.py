"""Append-only JSONL files: every append is flushed and fsynced; readers tolerate one torn final line.

A torn final line (a process killed mid-write) is reported and, when a writer reopens the file, cut off so the
next record starts on a clean line. Any other malformed line is a ``DataError`` naming the file and line.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterator

from harness.errors import DataError, MissingFileError, OutputError


def read_jsonl(path: str | Path, *, allow_torn_tail: bool = True) -> list[dict[str, Any]]:
    """All records of a JSONL file. A truncated last line is skipped when ``allow_torn_tail``."""
    return list(iter_jsonl(path, allow_torn_tail=allow_torn_tail))


def iter_jsonl(path: str | Path, *, allow_torn_tail: bool = True) -> Iterator[dict[str, Any]]:
    p = Path(path)
    if not p.exists():
        raise MissingFileError(f"file not found: {p}", fix="check the path (a run folder holds rows.jsonl and dataset.jsonl)")
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
            raise DataError(
                f"{p}:{i}: malformed JSON line ({exc.msg if hasattr(exc, 'msg') else exc})",
                fix="repair or remove that line; a run folder can be resumed with --resume",
            ) from None
        if not isinstance(rec, dict):
            raise DataError(f"{p}:{i}: expected a JSON object per line, got {type(rec).__name__}", fix="each line must be one JSON object")
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
            raise OutputError(f"cannot write {self.path}: {exc.strerror}", fix="choose a writable --out folder") from None

    def append(self, record: dict[str, Any]) -> None:
        line = (json.dumps(record, separators=(",", ":"), allow_nan=False) + "\n").encode()
        self._f.write(line)
        self._f.flush()
        if self.fsync:
            os.fsync(self._f.fileno())

    def close(self) -> None:
        if not self._f.closed:
            self._f.close()

    def __enter__(self) -> "JsonlAppender":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def write_json_atomic(path: str | Path, obj: Any) -> None:
    """Write JSON to a temp file, fsync, rename: readers never see a half-written file."""
    p = Path(path)
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_name(f".{p.name}.tmp{os.getpid()}")
        with open(tmp, "w") as f:
            json.dump(obj, f, indent=2, sort_keys=False, default=str)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, p)
    except OSError as exc:
        raise OutputError(f"cannot write {p}: {exc.strerror}", fix="choose a writable output folder") from None


def write_jsonl_atomic(path: str | Path, records: list[dict[str, Any]]) -> None:
    """Write a whole JSONL file atomically (temp file + fsync + rename)."""
    p = Path(path)
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_name(f".{p.name}.tmp{os.getpid()}")
        with open(tmp, "w") as f:
            for r in records:
                f.write(json.dumps(r, separators=(",", ":"), allow_nan=False) + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, p)
    except OSError as exc:
        raise OutputError(f"cannot write {p}: {exc.strerror}", fix="choose a writable output folder") from None
