"""docs/ARCHITECTURE.md names files and modules that exist (reads files only; runs nothing).

What the text names, in backticks, and where it must be:

- a path with a folder in it (``harness/engine/launch.py``, ``tests/nvml_shim/``) or a top-level folder of the
  repository (``tests/``): from the repository root;
- a bare module or folder name (``probes.py``, ``device/``) in a row of the wings table: in that wing's folder or in one of the
  wing's subfolders the same row names;
- a bare name elsewhere: in the folder of the last path the same paragraph named before it (the text says
  "``harness/twin/engine/launch.py`` ... ``scheduler.py``"), or, with none before it, anywhere in the code folders;
- a dotted name of the packages (``harness.world.bench``, ``harness.runs.rows.pilot_row``): a module, or a module and
  a name it defines or imports at its top level.

HTTP routes (``/v1/state``), placeholders (``tests/<wing>/``) and globs are not paths, and bare names of other
files (``manifest.json``, ``train.json``) are what a run writes: all are left alone.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "ARCHITECTURE.md"
PACKAGES = ("harness", "pilots", "policies")
CODE_FOLDERS = (*PACKAGES, "tests", "benchmarks")
SUFFIXES = (".py", ".md", ".json", ".jsonl", ".toml", ".sh", ".yaml", ".yml", ".txt", ".csv")
PATH = re.compile(r"[\w.-]+(?:/[\w.-]+)*/?")
DOTTED = re.compile(r"(?:harness|pilots|policies)(?:\.\w+)+")


@dataclass(frozen=True)
class Named:
    token: str
    line: int
    where: str  # the folder it resolves against, or "" for anywhere in the code folders


def _is_path(token: str) -> bool:
    return bool(PATH.fullmatch(token)) and (token.endswith("/") or token.endswith(SUFFIXES))


TOP_FOLDERS = {p.name for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith(".")}


def _rooted(token: str) -> bool:
    return "/" in token.rstrip("/") or (token.endswith("/") and token.rstrip("/") in TOP_FOLDERS)


def _folder_of(token: str) -> str:
    return token.rstrip("/") if token.endswith("/") else token.rpartition("/")[0]


def _wing_row(line: str) -> tuple[str, list[str]] | None:
    """A row of the wings table: (the wing's folder, its backticked tokens after the wing cell)."""
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    if len(cells) < 3 or not cells[0].isdigit():
        return None
    wing = cells[1].strip("`")
    return _folder_of(wing) if wing.endswith(".py") else wing.rstrip("/"), re.findall(r"`([^`]+)`", "|".join(cells[2:]))


def named_paths(text: str) -> tuple[list[Named], list[Named]]:
    """(file and folder names with the folder each resolves against, dotted module names) of the text."""
    paths: list[Named] = []
    dotted: list[Named] = []
    last_folder = ""
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            last_folder = ""  # a new paragraph
            continue
        row = _wing_row(line)
        tokens = row[1] if row else re.findall(r"`([^`]+)`", line)
        for token in tokens:
            if m := DOTTED.match(token):
                dotted.append(Named(m.group(0), number, ""))
            if not _is_path(token) or token.startswith("/"):
                continue
            if not _rooted(token) and not token.endswith((".py", "/")):
                continue  # a file a run writes (manifest.json), not one of the repository
            if _rooted(token):
                paths.append(Named(token, number, "."))
                last_folder = _folder_of(token)
            elif row:
                subfolders = [t.rstrip("/") for t in row[1] if _is_path(t) and t.endswith("/") and not _rooted(t)]
                paths.append(Named(token, number, ";".join([row[0], *(f"{row[0]}/{s}" for s in subfolders)])))
            else:
                paths.append(Named(token, number, last_folder))
    return paths, dotted


def _exists(named: Named) -> bool:
    if named.where == ".":
        return (ROOT / named.token).exists()
    if named.where:
        return any((ROOT / folder / named.token).exists() for folder in named.where.split(";"))
    name = named.token.rstrip("/")
    return any(p.name == name for folder in CODE_FOLDERS for p in (ROOT / folder).rglob(name))


def _module_file(module: str) -> Path | None:
    base = ROOT / module.replace(".", "/")
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _defines(path: Path, name: str) -> bool:
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            return True
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                return True
        if isinstance(node, (ast.Import, ast.ImportFrom)) and any(
            (a.asname or a.name.split(".")[0]) == name for a in node.names
        ):
            return True
    return False


def _module_exists(dotted: str) -> bool:
    """A module, or a module and one name it defines (``harness.runs.rows.pilot_row``)."""
    if _module_file(dotted):
        return True
    module, _, name = dotted.rpartition(".")
    path = _module_file(module)
    return path is not None and _defines(path, name)


def missing(text: str) -> list[str]:
    paths, dotted = named_paths(text)
    gone = [f"line {n.line}: `{n.token}` (in {n.where or 'the code folders'})" for n in paths if not _exists(n)]
    return gone + [
        f"line {n.line}: `{n.token}` (no such module or name)" for n in dotted if not _module_exists(n.token)
    ]


def test_every_path_and_module_named_in_the_architecture_exists() -> None:
    assert missing(DOC.read_text()) == []


def test_the_rules_resolve_as_the_text_reads() -> None:
    paths, dotted = named_paths(DOC.read_text())
    assert len(paths) > 150 and len(dotted) > 10  # the check reads the whole document
    by_token = {n.token: n for n in paths}
    assert by_token["harness/core/httpserve.py"].where == "."
    assert by_token["probes.py"].where == "harness/telemetry"
    assert "harness/twin/device" in by_token["history.py"].where.split(";")  # a subfolder the twin's row names
    # a planted paragraph: a moved file, a bare name after a path, a wing row, routes and placeholders
    planted = (
        "| 4 | `harness/telemetry/` | `probes.py`, `gone.py`, `tests/nvml_shim/` |\n\n"
        "Routes `/v1/state`, `tests/<wing>/` and `rows.jsonl` are no paths. `harness/engine/launch.py` then `argv.py`; "
        "`harness.engine.spec.EngineSpec`, `harness.engine.spec.Nowhere`, `harness.engine.nowhere`.\n"
    )
    assert missing(planted) == [
        "line 1: `gone.py` (in harness/telemetry)",
        "line 3: `argv.py` (in harness/engine)",
        "line 3: `harness.engine.spec.Nowhere` (no such module or name)",
        "line 3: `harness.engine.nowhere` (no such module or name)",
    ]
