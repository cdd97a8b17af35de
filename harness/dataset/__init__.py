"""Dataset tools: load, validate, merge, compare and export sweep datasets (published or native layout).

Inputs are a run folder (``RUN_DIR/rows.jsonl``, else ``RUN_DIR/dataset.jsonl``) or a JSONL file. Records are read
strictly (a torn or malformed line is an error here: these tools judge finished data) and resolved like the run-folder
store: the last record per cell id (native) or per index (published) wins. Rules are documented in docs/dataset.md.

One module per concern: ``source`` (which file, which layout, per-row facts), ``validate`` (the rules), ``loader``
(the one loader consumers use), ``merge``, ``compare``, ``export``. Everything public is importable from here.
"""

from harness.dataset.compare import METRICS, CellDiff, CompareResult, RankAgreement, compare, pooled_cv
from harness.dataset.engines import EngineSide, engine_label, engine_sides
from harness.dataset.export import ExportFormat, export, to_arrow
from harness.dataset.loader import (
    CONSUMER_SOFT_CODES,
    WINDOW_RULE_HELP,
    Loaded,
    WindowRule,
    load,
    load_many,
    print_notes,
)
from harness.dataset.merge import MergeResult, merge, write_rows
from harness.dataset.source import (
    PILOT_ROWS,
    PILOT_SOURCES,
    Layout,
    config_problem,
    detect_layout,
    invalid_window,
    resolve_input,
)
from harness.dataset.validate import (
    Inspection,
    Issue,
    Plan,
    ValidationReport,
    check_rows,
    inspect,
    is_pilot,
    validate_file,
)

__all__ = [
    "EngineSide",
    "engine_label",
    "engine_sides",
    "CONSUMER_SOFT_CODES",
    "METRICS",
    "PILOT_ROWS",
    "PILOT_SOURCES",
    "WINDOW_RULE_HELP",
    "CellDiff",
    "CompareResult",
    "ExportFormat",
    "Inspection",
    "Issue",
    "Layout",
    "Loaded",
    "MergeResult",
    "Plan",
    "RankAgreement",
    "ValidationReport",
    "WindowRule",
    "check_rows",
    "compare",
    "config_problem",
    "detect_layout",
    "export",
    "inspect",
    "invalid_window",
    "is_pilot",
    "load",
    "load_many",
    "merge",
    "pooled_cv",
    "print_notes",
    "resolve_input",
    "to_arrow",
    "validate_file",
    "write_rows",
]
