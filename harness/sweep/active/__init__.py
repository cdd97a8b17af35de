"""The active sweep (``harness sweep --strategy active``): measure only the cells that can still change the recipe.

``calibset`` picks the short calibration set, ``cost`` counts GPU-seconds (launch + measure) and predicts them,
``estimate`` predicts every cell's reward with an uncertainty from a profile fitted to the measured rows
(``harness.twin.fit.from_run``), ``corner`` names the low-step cells a weak or slow draft head makes worth measuring, ``decide`` turns estimates into the recipe and the next cells to measure, ``loop``
drives a ``SweepRunner`` round by round and writes ``recipe.json``, the fitted profile and the manifest's
``active`` record. See docs/active.md.
"""
