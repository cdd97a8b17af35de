"""The sample store: a bounded in-memory ring for queries plus an append-only JSONL log on disk.

The ring keeps ``retention_s`` seconds of records, at most ``max_records`` (40 000: ~50 MB; 66 min at 10 Hz, 6.7 min
at 100 Hz). Log file ``<dir>/samples.jsonl``: every record is flushed when written and the file is fsynced at least once a
second. Sequence numbers are contiguous across restarts. A restart on an existing log first cuts a torn final line,
reloads the recent past into the ring, then writes an explicit ``gap`` record (previous run id and seq, gap edges)
and a ``start`` record, so windows spanning the downtime are invalid with ``sampler_restart`` / ``gap_over_3_periods``.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from bisect import bisect_left, bisect_right
from pathlib import Path
from typing import Any

from harness.core.clocks import mono_ns, wall_ns
from harness.core.errors import OutputError
from harness.core.jsonl import JsonlAppender
from harness.telemetry.windows import OUTSIDE_RETENTION, GpuSample, WindowStats, compute_window

LOG_NAME = "samples.jsonl"
MARKS_NAME = "marks.jsonl"
FSYNC_INTERVAL_NS = 1_000_000_000
LOG_MARGIN_NS = 10_000_000_000  # read this much log beyond each edge of an old window
MAX_RECORDS = 40_000
_TAIL_BYTES_PER_RECORD = 900
_ALL_FIELDS = set(GpuSample.model_fields)  # one shared fields-set for every stored record (saves ~2 KB each)


def _compact(rec: GpuSample) -> GpuSample:
    """Make a record cheap to keep: intern its repeated strings and share pydantic's fields-set."""
    for key in ("run_id", "name", "uuid", "driver_version"):
        v = rec.__dict__.get(key)
        if isinstance(v, str):
            rec.__dict__[key] = sys.intern(v)
    object.__setattr__(rec, "__pydantic_fields_set__", _ALL_FIELDS)
    return rec


class SampleStore:
    """Thread-safe ring of records (all kinds, seq order) with an optional log directory."""

    def __init__(self, log_dir: str | Path | None, retention_s: float = 3600.0, max_records: int = MAX_RECORDS) -> None:
        self.log_dir = Path(log_dir) if log_dir else None
        self.retention_ns = int(retention_s * 1e9)
        self.max_records = max_records
        self._records: list[GpuSample] = []
        self._walls: list[int] = []
        self._lock = threading.Lock()
        self.new_record = threading.Condition(self._lock)
        self._log: JsonlAppender | None = None
        self._sync_fd: int | None = None
        self._last_fsync_ns = 0
        self._marks: JsonlAppender | None = None
        self._next_seq = 0
        self.trimmed = False
        self.log_errors_total = 0
        self.last_log_error: str | None = None
        self.previous_run: dict[str, Any] | None = None

    # -- lifecycle -------------------------------------------------------------------------------------------------

    def open(self, run_id: str, detail: dict[str, Any]) -> None:
        """Open the log (repairing a torn tail), reload recent history, write ``gap`` (if resuming) and ``start``."""
        now_w, now_m = wall_ns(), mono_ns()
        if self.log_dir is not None:
            path = self.log_dir / LOG_NAME
            self._log = JsonlAppender(path, fsync=False)  # repairs a torn final line
            self._sync_fd = os.open(path, os.O_RDONLY)
            self._marks = JsonlAppender(self.log_dir / MARKS_NAME, fsync=True)
            history = _read_tail(
                path, max_bytes=max(1 << 20, min(256 << 20, int(self.retention_ns / 1e8) * _TAIL_BYTES_PER_RECORD))
            )
            for rec in history[-self.max_records :]:
                if rec.t_wall_ns >= now_w - self.retention_ns:
                    self._records.append(rec)
                    self._walls.append(rec.t_wall_ns)
            if history:
                last = history[-1]
                self._next_seq = last.seq + 1
                self.previous_run = {"run_id": last.run_id, "seq": last.seq, "t_wall_ns": last.t_wall_ns}
                self.append(
                    GpuSample(
                        kind="gap",
                        run_id=run_id,
                        seq=self._next_seq,
                        t_wall_ns=now_w,
                        t_mono_ns=now_m,
                        detail={
                            "prev_run_id": last.run_id,
                            "prev_seq": last.seq,
                            "gap_start_ns": last.t_wall_ns,
                            "gap_end_ns": now_w,
                        },
                    )
                )
        self.append(
            GpuSample(kind="start", run_id=run_id, seq=self._next_seq, t_wall_ns=now_w, t_mono_ns=now_m, detail=detail)
        )

    def close(self) -> None:
        with self._lock:
            if self._log is not None:
                self._log.close()
                self._log = None
            if self._sync_fd is not None:
                os.fsync(self._sync_fd)
                os.close(self._sync_fd)
                self._sync_fd = None
            if self._marks is not None:
                self._marks.close()
                self._marks = None

    # -- writing ---------------------------------------------------------------------------------------------------

    def next_seq(self) -> int:
        return self._next_seq

    def append(self, rec: GpuSample) -> None:
        """Log (flushed; fsynced if a second has passed) and add to the ring; wakes window waiters."""
        with self._lock:
            if rec.seq != self._next_seq:
                raise ValueError(f"seq {rec.seq} out of order (expected {self._next_seq})")
            if self._log is not None:
                try:
                    self._log.append(rec.to_record())
                    now = mono_ns()
                    if self._sync_fd is not None and now - self._last_fsync_ns >= FSYNC_INTERVAL_NS:
                        os.fsync(self._sync_fd)
                        self._last_fsync_ns = now
                except (
                    OSError,
                    OutputError,
                ) as exc:  # disk full, I/O error: keep sampling into the ring, count and report it
                    self.log_errors_total += 1
                    self.last_log_error = f"{type(exc).__name__}: {exc}"
            self._next_seq += 1
            self._records.append(_compact(rec))
            self._walls.append(rec.t_wall_ns)
            self._trim(rec.t_wall_ns)
            self.new_record.notify_all()

    def _trim(self, now_w: int) -> None:
        cutoff = now_w - self.retention_ns
        if self._walls and (self._walls[0] < cutoff or len(self._walls) > self.max_records) and len(self._walls) > 64:
            k = max(bisect_left(self._walls, cutoff), len(self._walls) - self.max_records)
            if (
                k > len(self._walls) // 8 or len(self._walls) > self.max_records * 1.125
            ):  # trim in chunks, not per sample
                del self._records[:k]
                del self._walls[:k]
                self.trimmed = True

    def add_mark(self, mark: dict[str, Any]) -> None:
        with self._lock:
            if self._marks is not None:
                self._marks.append(mark)

    # -- reading ---------------------------------------------------------------------------------------------------

    def latest(self, *, usable: bool = True) -> GpuSample | None:
        with self._lock:
            for rec in reversed(self._records):
                if rec.kind == "sample" and (rec.usable or not usable):
                    return rec
        return None

    def since(self, since_seq: int, limit: int) -> list[GpuSample]:
        with self._lock:
            if not self._records:
                return []
            first = self._records[0].seq
            i = max(0, since_seq + 1 - first)
            return self._records[i : i + limit]

    def has_sample_after(self, t_ns: int) -> bool:
        with self._lock:
            return self._has_after(t_ns)

    def _has_after(self, t_ns: int) -> bool:
        for rec in reversed(self._records):
            if rec.t_wall_ns < t_ns:
                return False
            if rec.usable:
                return True
        return False

    def wait_for_sample_after(self, t_ns: int, timeout_s: float) -> bool:
        with self.new_record:
            return self.new_record.wait_for(lambda: self._has_after(t_ns), timeout=max(0.0, timeout_s))

    def window(self, start_ns: int, end_ns: int, period_s: float, edge_model: str = "step") -> WindowStats:
        """Aggregate the records around ``[start_ns, end_ns]`` with ``compute_window``."""
        with self._lock:
            recs, walls = self._records, self._walls
            i0 = bisect_right(walls, start_ns) - 1
            while i0 > 0 and not recs[i0].usable:
                i0 -= 1
            i1 = bisect_left(walls, end_ns)
            while i1 < len(recs) - 1 and not recs[i1].usable:
                i1 += 1
            chunk = recs[max(0, i0 - 2) : i1 + 3]
            oldest = walls[0] if walls else None
        from_log = False
        if self.trimmed and oldest is not None and start_ns < oldest and self.log_dir is not None:
            margin = max(LOG_MARGIN_NS, int(10 * period_s * 1e9))
            chunk = scan_log(self.log_dir / LOG_NAME, start_ns - margin, end_ns + margin)
            from_log = True
        samples = [r for r in chunk if r.kind == "sample"]
        samples.sort(key=lambda r: r.t_wall_ns)
        restarts = [r.t_wall_ns for r in chunk if r.kind == "gap"]
        stats = compute_window(samples, start_ns, end_ns, period_s, restarts_ns=restarts, edge_model=edge_model)
        if self.trimmed and oldest is not None and start_ns < oldest and not from_log:
            stats.reasons.append(OUTSIDE_RETENTION)
            stats.valid = False
        return stats

    def __len__(self) -> int:
        return len(self._records)


def _read_tail(path: Path, max_bytes: int) -> list[GpuSample]:
    """Parse the last ``max_bytes`` of a log (the first, partial line skipped); unparsable lines are skipped."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return []
    with open(path, "rb") as f:
        f.seek(max(0, size - max_bytes))
        data = f.read()
    lines = data.split(b"\n")
    if size > max_bytes:
        lines = lines[1:]
    out: list[GpuSample] = []
    for raw in lines:
        if not raw.strip():
            continue
        try:
            out.append(_compact(GpuSample.model_validate(json.loads(raw))))
        except ValueError:
            continue
    return out


def _wall_of(line: bytes) -> int | None:
    try:
        return int(json.loads(line)["t_wall_ns"])
    except (ValueError, KeyError, TypeError):
        return None


def scan_log(path: Path, lo_ns: int, hi_ns: int) -> list[GpuSample]:
    """Records of a log with ``lo_ns <= t_wall_ns <= hi_ns``: binary search on byte offsets, then a forward read.

    For windows older than the ring. Unparsable lines (a torn tail being written) are skipped.
    """
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        return []
    with f:
        size = f.seek(0, os.SEEK_END)
        lo, hi = 0, size  # find the first line start whose record is at or after lo_ns
        while hi - lo > 4096:
            mid = (lo + hi) // 2
            f.seek(mid)
            f.readline()  # to the next line start
            pos = f.tell()
            line = f.readline()
            w = _wall_of(line) if line else None
            if w is None or w >= lo_ns:
                hi = mid
            else:
                lo = pos
        f.seek(lo)
        if lo:
            f.seek(lo - 1)
            if f.read(1) != b"\n":
                f.readline()
        out: list[GpuSample] = []
        for line in f:
            try:
                rec = GpuSample.model_validate(json.loads(line))
            except ValueError:
                continue
            if rec.t_wall_ns > hi_ns:
                break
            if rec.t_wall_ns >= lo_ns:
                out.append(_compact(rec))
        return out
