"""Trace replay plans (``harness/serve/traces.py``) on the shipped Azure trace and on bad files, and the band
figures of the serving benchmark (``harness/serve/band_metrics.py``)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from harness.core.errors import DataError
from harness.serve.band_metrics import band_figures, percentile
from harness.serve.traces import offered_tok_s, plan_replay, prompt_of, rate_scale_for, read_trace
from harness.twin.engine.tokens import count_tokens

CONV = Path(__file__).resolve().parents[2] / "benchmarks" / "traces" / "azure-llm-inference-2023-conv.csv"
BAND = (0.95, 0.98)


def test_shipped_conversation_trace_is_the_unchanged_file_with_its_attribution() -> None:
    digest = hashlib.sha256(CONV.read_bytes()).hexdigest()
    assert digest == "2f1e5b666d4e3055fdbba98598ce2ec307767b9064e03e2fa46676dbcc7d0bf8"
    notes = (CONV.parent / "README.md").read_text()
    assert "CC-BY 4.0" in notes and "Splitwise" in notes and "Patel" in notes
    reqs = read_trace(CONV)
    assert len(reqs) == 19366 and reqs[0].t_s == 0.0 and 3400 < reqs[-1].t_s < 3600
    assert all(a.t_s <= b.t_s for a, b in zip(reqs, reqs[1:]))
    assert 5.4 < len(reqs) / reqs[-1].t_s < 5.7  # the README's 5.53 requests/s


def test_rate_scale_and_window_keep_token_counts() -> None:
    reqs = read_trace(CONV)
    rs = rate_scale_for(reqs, 300.0)
    assert offered_tok_s(reqs) * rs == pytest.approx(300.0)
    plan = plan_replay(reqs, rs, 60.0, start_s=600.0, max_generated=1000)
    picked = [r for r in reqs if 600.0 <= r.t_s < 600.0 + 60.0 * rs]
    assert len(plan.arrivals_s) == len(picked) > 0 and plan.rate_scale == rs
    assert all(0 <= a < 60.0 for a in plan.arrivals_s) and plan.arrivals_s == sorted(plan.arrivals_s)
    assert plan.context_tokens == [r.context_tokens for r in picked]
    assert plan.generated_tokens == [min(1000, max(1, r.generated_tokens)) for r in picked]
    assert count_tokens(prompt_of(1020)) == 1020  # the twin's tokenizer counts the trace's context exactly


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("TIMESTAMP,ContextTokens\n2023-11-16 18:15:46.68,3\n", "lacks column(s) GeneratedTokens"),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,x,4\n", "line 2: ContextTokens"),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,3,4\n", "line 2: TIMESTAMP 'yesterday'"),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,-3,4\n", "negative token count"),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\n", "has no requests"),
    ],
)
def test_bad_trace_files_are_refused_naming_the_problem(tmp_path: Path, text: str, says: str) -> None:
    p = tmp_path / "t.csv"
    p.write_text(text)
    with pytest.raises(DataError, match=None) as exc:
        read_trace(p)
    assert says in exc.value.message and exc.value.fix
    with pytest.raises(DataError, match="does not exist"):
        read_trace(tmp_path / "missing.csv")


def test_band_figures_busy_share_tracking_and_step_response() -> None:
    us = [0.16, 1.00, 0.99, 0.97, 0.96, 0.16, 0.90, 0.965, None]
    busy = [False, True, True, True, True, False, True, True, False]
    f = band_figures(us, busy, BAND)
    assert f["time_in_band"] == round(3 / 8, 4) and f["busy_in_band"] == 0.5  # 3 of 6 busy windows
    rms = ((0.02**2 + 0.01**2 + 0.05**2) / 6) ** 0.5
    assert f["tracking_rms"] == round(rms, 4) and f["busy_share"] == 0.75
    assert f["steps_reached"] == "2/2" and f["step_response_s"] == 2.5  # 3 s after index 1, 2 s after index 6
    cut = band_figures(us, busy, BAND, steps=[3])  # a step at 3 ends the first one's chance before it reached the band
    assert cut["steps_reached"] == "2/3" and cut["step_response_s"] == 1.5
    assert band_figures([0.5, 0.5], [True, True], BAND)["busy_in_band"] == 0.0
    with pytest.raises(ValueError, match="one busy flag per window"):
        band_figures([0.5], [], BAND)
    assert percentile([3.0, 1.0, 2.0], 0.5) == 2.0 and percentile([], 0.5) is None
