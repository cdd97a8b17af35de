"""The serving benchmark's HTML page: self-contained (figures inline), one table row per mode."""

from __future__ import annotations

from pathlib import Path

from harness.report.serve_html import write_serve_html

PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082"
)


def test_page_has_the_table_per_trace_and_the_figure_inline(tmp_path: Path) -> None:
    fig = tmp_path / "serve_band_conv.png"
    fig.write_bytes(PNG)
    modes = {
        "controller": {"busy_in_band": 0.8123, "tracking_rms": 0.0121, "tok_s": 512.3, "clock_changes": 14},
        "no_spec": {"busy_in_band": 0.0, "tracking_rms": None, "tok_s": 500.0, "clock_changes": 0},
    }
    report = {"commit": "abc", "hardware": "twin:x", "time_scale": 5.0, "band": [0.95, 0.98],
              "traces": {"conv": {"modes": modes, "notes": ["rate scale 0.25 <stated>"]}}}  # fmt: skip
    page = write_serve_html(tmp_path / "serve_band.html", report, [fig]).read_text()
    assert "<h2>conv</h2>" in page and "rate scale 0.25 &lt;stated&gt;" in page
    assert "<td>controller</td><td>81.2%</td>" in page and "<td>0.0121</td>" in page and "<td>–</td>" in page
    assert "data:image/png;base64," in page and 'src="http' not in page
