"""Rich tables of a Terminal-Bench pilot: the published columns and the stuck-call table."""

from __future__ import annotations

from typing import Any, Iterable

from rich.table import Table

PUBLISHED_COLUMNS = (
    "config",
    "task",
    "success",
    "tok/s",
    "output tokens",
    "duration",
    "accept len",
    "avg power",
    "GPU util",
)
STUCK_COLUMNS = ("config", "task", "calls", "longest call", "kind", "share of trial", "stuck")


def _num(v: Any, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def duration_text(rec: dict[str, Any]) -> str:
    d = rec.get("duration_s")
    if d is None:
        return "-"
    return f"{d:,.1f} s (timeout)" if rec.get("timed_out") else f"{d:,.1f} s"


def success_text(rec: dict[str, Any]) -> str:
    if rec.get("success") is None:
        return f"error ({rec.get('status')})"
    return "pass" if rec["success"] else "fail"


def published_rows(records: Iterable[dict[str, Any]]) -> list[list[str]]:
    """One row per trial, formatted like the published pilot table."""
    rows = []
    for r in records:
        rows.append(
            [
                str(r.get("config")),
                str(r.get("task")),
                success_text(r),
                _num(r.get("output_tokens_per_s"), ",.1f"),
                _num(r.get("output_tokens"), ",d"),
                duration_text(r),
                _num(r.get("accept_length"), ".3f"),
                "-" if r.get("avg_power_watts") is None else f"{r['avg_power_watts']:.1f} W",
                "-" if r.get("avg_util_pct") is None else f"{r['avg_util_pct']:.1f}%",
            ]
        )
    return rows


def stuck_rows(records: Iterable[dict[str, Any]]) -> list[list[str]]:
    rows = []
    for r in records:
        c = r.get("calls") or {}
        share = c.get("longest_share")
        rows.append(
            [
                str(r.get("config")),
                str(r.get("task")),
                str(c.get("n_calls", 0)),
                _num(c.get("longest_s"), ",.1f") + " s",
                str(c.get("longest_kind") or "-"),
                "-" if share is None else f"{share:.0%}",
                "STUCK" if r.get("stuck_call") else "no",
            ]
        )
    return rows


def print_report(result: Any, console: Any, *, engine: str = "sglang") -> None:
    records = [t.record for t in result.trials]
    table = Table(title=f"Terminal-Bench pilot ({result.run_dir})")
    for c in PUBLISHED_COLUMNS:
        table.add_column(c, justify="left" if c in ("config", "task", "success") else "right")
    for row in published_rows(records):
        table.add_row(*row)
    console.print(table)
    stuck = Table(title="Per-call durations (a call taking most of a trial is a stuck / runaway generation)")
    for c in STUCK_COLUMNS:
        stuck.add_column(c, justify="left" if c in ("config", "task", "kind", "stuck") else "right")
    for row in stuck_rows(records):
        stuck.add_row(*row)
    console.print(stuck)
    ran = [r for r in records if r.get("status") != "harbor_error"]
    if engine == "twin" and ran and not any(r.get("success") for r in ran):
        console.print(
            "[yellow]All trials failed, as expected on the twin:[/] it answers with filler text, not a "
            "model's reply, so Terminus 2 cannot act. The run checks the plumbing and the telemetry, not "
            "task success."
        )
    errors = [r for r in records if r.get("status") == "harbor_error"]
    for r in errors:
        console.print(f"[red]{r.get('config')} {r.get('task')}: {r.get('error')}[/]")
    console.print(
        f"outputs: {result.run_dir}/reports/merged.jsonl, dataset_rows.jsonl, reports/terminalbench_trials.jsonl",
        markup=False,
    )
