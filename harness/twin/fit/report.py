"""The fit table of a twin profile against its reference figures (published or a run's own): rows as JSON, and the
rich table ``harness twin calibrate`` prints."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from harness.twin.fit.calibrate import RowFit


def _round(v: float | None, digits: int) -> float | None:
    return None if v is None else round(v, digits)


def fit_table(fits: list[RowFit]) -> list[dict]:
    rows = []
    for f in fits:
        e = f.errors
        rows.append(
            {
                "batch_size": f.batch_size,
                "config": list(f.config),
                "accept": round(f.accept, 3),
                "pub_accept": f.pub_accept,
                "accept_err": _round(e["accept"], 4),
                "speed": round(f.speed, 2),
                "pub_speed": f.pub_speed,
                "speed_err": _round(e["speed"], 4),
                "jpt": round(f.jpt, 5),
                "pub_jpt": f.pub_jpt,
                "jpt_err": _round(e["jpt"], 4),
                "util": round(f.util, 3),
                "pub_util": f.pub_util,
                "util_err": _round(e["util"], 4),
                "step_ms": None if f.step_ms is None else round(f.step_ms, 2),
                "pub_step_ms": f.pub_step_ms,
                "reward": None if f.reward is None else round(f.reward, 4),
                "pub_reward": f.pub_reward,
                "ok": f.within_targets(),
            }
        )
    return rows


def _pct(v: float | None) -> str:
    return "" if v is None else f"{100 * v:+.1f}%"


def print_fit_table(fits: list[RowFit], title: str = "twin vs published (calibration.json)", ref: str = "pub") -> None:
    """The fit table: model vs reference (``ref``: the column label of the reference figures) per row."""
    from rich.console import Console
    from rich.table import Table

    t = Table(title=title)
    for col in (
        "bs",
        "config",
        "accept",
        ref,
        "err",
        "speed",
        ref,
        "err",
        "J/tok",
        ref,
        "err",
        "util",
        ref,
        "err",
        "step ms",
        ref,
        "reward",
        ref,
        "ok",
    ):
        t.add_column(col, justify="right")
    for r in fit_table(fits):
        t.add_row(
            str(r["batch_size"]),
            str(tuple(r["config"])),
            f"{r['accept']:.3f}",
            f"{r['pub_accept']:.3f}",
            _pct(r["accept_err"]),
            f"{r['speed']:.1f}",
            f"{r['pub_speed']:.1f}",
            _pct(r["speed_err"]),
            f"{r['jpt']:.4f}",
            f"{r['pub_jpt']:.4f}",
            _pct(r["jpt_err"]),
            f"{r['util']:.3f}",
            "" if r["pub_util"] is None else f"{r['pub_util']:.3f}",
            "" if r["util_err"] is None else f"{r['util_err']:+.3f}",
            "" if r["step_ms"] is None else f"{r['step_ms']:.2f}",
            "" if r["pub_step_ms"] is None else f"{r['pub_step_ms']:.2f}",
            "" if r["reward"] is None else f"{r['reward']:.3f}",
            "" if r["pub_reward"] is None else f"{r['pub_reward']:.3f}",
            "yes" if r["ok"] else "NO",
        )
    Console(width=max(160, Console(emoji=False).width)).print(t)
