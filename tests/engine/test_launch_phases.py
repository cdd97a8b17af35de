"""A launch's phases from the server's own log (issue 48 items 1-2): real sglang 0.5.23's lines as this CPU's engine
printed them (tests/fixtures/sglang-0.5.23-cpu-launch.log, from `make engines-cpu`), the older format with stamps
only, and the twin engine printing the same lines with its model's phases."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.engine.launch_phases import PARTS, launch_phases, read_launch_phases

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "sglang-0.5.23-cpu-launch.log"


def test_a_real_sglang_0523_cpu_launch_splits_into_its_phases() -> None:
    parts = launch_phases(FIXTURE.read_text(), launch_s=30.0)
    assert parts is not None and tuple(parts) == PARTS
    assert parts["weights"] == pytest.approx(0.45)  # target 0.44 s + draft 0.01 s (its "load_weight=0.45" too)
    assert parts["cuda_graphs"] == 0.0  # no CUDA graphs on a CPU
    assert parts["imports"] == pytest.approx(28.0)  # everything before the first weight line: 30 s - (46 - 44)
    assert sum(parts.values()) == pytest.approx(30.0)


def test_the_older_format_and_stamps_alone() -> None:
    log = "\n".join(
        [
            "[2025-09-01 10:00:10] Load weight begin. avail mem=78.50 GB",
            "[2025-09-01 10:00:16] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=62.3 GB",
            "[2025-09-01 10:00:17] Capture cuda graph begin. This can take up to several minutes.",
            "[2025-09-01 10:00:29] Capture cuda graph end. Time elapsed: 12.31 s. mem usage=1.2 GB",
            "[2025-09-01 10:00:33] The server is fired up and ready to roll!",
        ]
    )
    parts = launch_phases(log, launch_s=42.0)
    assert parts == pytest.approx({"imports": 19.0, "weights": 6.0, "cuda_graphs": 12.31, "other": 4.69})
    assert launch_phases("no launch here", 10.0) is None and read_launch_phases("/nonexistent.log", 1.0) is None
