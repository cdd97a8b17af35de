"""The twin engine's log lines, shaped like sglang's (``[time] LEVEL message``) on stdout."""

from __future__ import annotations

from datetime import datetime, timezone


def log(msg: str, level: str = "INFO") -> None:
    """One log line on stdout, flushed (the harness tails the engine log)."""
    ts = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
    print(f"[{ts}] {level} {msg}", flush=True)
