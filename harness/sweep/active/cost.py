"""GPU-seconds: what a measured cell cost (launch + measure, device time) and what an unmeasured one will cost.

A row records ``cell_wall_s`` (from before the launch to the row: launch, warm-up, measured window) and each launch
attempt's ``launch_s`` in wall seconds; on the twin the device runs ``time_scale`` times faster than the wall clock,
so device seconds = wall seconds x ``time_scale`` (1 on a real GPU). The settle pause between cells is not counted.
The prediction for an unmeasured cell is linear in the model's own launch time and protocol time (warm-up +
measured requests), fitted to the measured cells, so it learns the launcher's and the host's fixed costs too.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from harness.runs.rows import SweepRow


@dataclass(frozen=True)
class CellCost:
    launch_s: float
    measure_s: float

    @property
    def total_s(self) -> float:
        return self.launch_s + self.measure_s


def row_cost(row: SweepRow) -> CellCost:
    """Device seconds a row's cell held the GPU: its launch attempts, then warm-up and measurement."""
    scale = float(row.time_scale or 1.0)
    attempts = (row.extras or {}).get("launch_attempts") or []
    launch_wall = sum(float(a.get("launch_s") or 0.0) for a in attempts if isinstance(a, dict))
    total_wall = float(row.cell_wall_s or launch_wall)
    launch_wall = min(launch_wall, total_wall)
    return CellCost(launch_wall * scale, (total_wall - launch_wall) * scale)


def spent(rows: list[SweepRow]) -> CellCost:
    """Total GPU-seconds of the rows (launch, measure)."""
    costs = [row_cost(r) for r in rows]
    return CellCost(sum(c.launch_s for c in costs), sum(c.measure_s for c in costs))


@dataclass(frozen=True)
class Line:
    """y = a + b x with a, b >= 0."""

    a: float
    b: float

    def __call__(self, x: float) -> float:
        return self.a + self.b * x


def fit_line(xs: list[float], ys: list[float]) -> Line:
    """Least squares with non-negative coefficients; a single point or no spread in x gives a ratio through 0."""
    if not xs:
        return Line(0.0, 1.0)
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    if len(xs) >= 3 and sxx > 1e-9 * max(1.0, mx * mx):
        b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
        a = my - b * mx
        if a >= 0 and b >= 0:
            return Line(a, b)
        if b < 0:
            return Line(max(my, 0.0), 0.0)
    total_x = sum(xs)
    return Line(0.0, sum(ys) / total_x) if total_x > 0 else Line(max(my, 0.0), 0.0)


@dataclass(frozen=True)
class CostModel:
    """Device seconds of a cell from the model's launch time and protocol time (both twin seconds)."""

    launch: Line
    measure: Line
    rel_error: float = 0.0
    """RMS log ratio of observed to predicted total GPU-seconds over the cells it was fitted to."""

    def predict(self, model_launch_s: float, model_measure_s: float) -> CellCost:
        return CellCost(self.launch(model_launch_s), self.measure(model_measure_s))

    @classmethod
    def fit(cls, samples: list[tuple[float, float, CellCost]]) -> "CostModel":
        """``samples``: (model launch s, model measure s, observed cost) of measured cells."""
        lines = cls(
            fit_line([s[0] for s in samples], [s[2].launch_s for s in samples]),
            fit_line([s[1] for s in samples], [s[2].measure_s for s in samples]),
        )
        logs = [
            math.log(seen.total_s / pred) ** 2
            for a, b, seen in samples
            if seen.total_s > 0 and (pred := lines.predict(a, b).total_s) > 0
        ]
        return cls(lines.launch, lines.measure, math.sqrt(statistics.fmean(logs)) if logs else 0.0)
