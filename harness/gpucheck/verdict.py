"""Verdicts: each check's PASS / WARN / FAIL / SKIP with its figure, and the plain-text table (rich if importable)."""

from __future__ import annotations

from typing import Any

LEVELS = ("PASS", "WARN", "FAIL", "SKIP")


def grade(err: float | None, ok: float, warn: float) -> str:
    """PASS when |err| <= ok, WARN when <= warn, FAIL above; SKIP without a figure."""
    if err is None:
        return "SKIP"
    return "PASS" if abs(err) <= ok else "WARN" if abs(err) <= warn else "FAIL"


def row(check: str, status: str, figure: str, detail: str = "") -> dict[str, str]:
    assert status in LEVELS, status
    return {"check": check, "status": status, "figure": figure, "detail": detail}


def table(rows: list[dict[str, Any]]) -> str:
    """A fixed-width text table (readable in any log)."""
    w_check = max([5, *(len(r["check"]) for r in rows)])
    w_fig = min(60, max([6, *(len(r["figure"]) for r in rows)]))
    lines = [
        f"{'check':<{w_check}}  status  {'figure':<{w_fig}}  detail",
        f"{'-' * w_check}  ------  {'-' * w_fig}  ------",
    ]
    lines += [f"{r['check']:<{w_check}}  {r['status']:<6}  {r['figure']:<{w_fig}}  {r['detail']}" for r in rows]
    return "\n".join(lines)


def print_table(rows: list[dict[str, Any]]) -> None:
    try:
        from rich.console import Console
        from rich.markup import escape
        from rich.table import Table
    except ImportError:
        print(table(rows), flush=True)
        return
    t = Table(title="gpu_check verdict")
    for col in ("check", "status", "figure", "detail"):
        t.add_column(col, overflow="fold")
    style = {"PASS": "green", "WARN": "yellow", "FAIL": "red", "SKIP": "dim"}
    for r in rows:
        t.add_row(
            escape(r["check"]), f"[{style[r['status']]}]{r['status']}[/]", escape(r["figure"]), escape(r["detail"])
        )
    Console(emoji=False, width=160).print(t)
