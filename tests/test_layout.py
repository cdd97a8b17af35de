"""The house's layout rules, checked on the source tree: no import cycle between modules, no source file over the
size limit (the twin physics model excepted). Reads files only; runs nothing."""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("harness", "pilots", "policies")
MAX_LINES = 450
EXCEPTED = {"harness/twin/model.py"}  # the twin physics model: one set of equations, kept together
def _tracked_python() -> list[str]:
    """The repository's Python files (relative paths): git's list where there is a checkout, else the source folders."""
    git = subprocess.run(["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True)
    if git.returncode == 0 and git.stdout.strip():
        return [p for p in git.stdout.split() if (ROOT / p).is_file()]
    return [str(p.relative_to(ROOT)) for d in (*PACKAGES, "tests", "benchmarks") for p in sorted((ROOT / d).rglob("*.py"))]


def _module_name(rel: str) -> str:
    name = rel.removesuffix(".py").replace("/", ".")
    return name.removesuffix(".__init__")


def _import_graph(files: list[str]) -> dict[str, set[str]]:
    """Module -> the repository modules it imports at module level (imports inside functions run on call, not on
    import, and ``if TYPE_CHECKING:`` blocks never run)."""
    mods = {_module_name(f): f for f in files if f.split("/")[0] in PACKAGES}

    def resolve(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {m: set() for m in mods}
    for mod, rel in mods.items():
        stack: list[ast.stmt] = list(ast.parse((ROOT / rel).read_text()).body)
        while stack:
            node = stack.pop()
            if isinstance(node, ast.If):
                if not (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"):
                    stack.extend(node.body + node.orelse)
            elif isinstance(node, ast.Try):
                stack.extend(node.body + node.orelse + node.finalbody + [s for h in node.handlers for s in h.body])
            elif isinstance(node, ast.Import):
                graph[mod].update(t for a in node.names if (t := resolve(a.name)) and t != mod)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                graph[mod].update(t for a in node.names if (t := resolve(f"{node.module}.{a.name}")) and t != mod)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            v, children = work[-1]
            w = next(children, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def test_cycle_finder_finds_a_planted_cycle():
    """The finder itself: a -> b -> c -> a is one cycle, d hanging off it is not part of it."""
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles_between_modules():
    graph = _import_graph(_tracked_python())
    assert len(graph) > 50 and any(graph.values())  # the walk really saw the packages and their imports
    assert _cycles(graph) == []


def test_no_source_file_over_the_size_limit():
    sizes = {f: len((ROOT / f).read_text().splitlines()) for f in _tracked_python()}
    over = sorted(f for f, n in sizes.items() if n > MAX_LINES and f not in EXCEPTED)
    assert not over, f"split these by concern (limit {MAX_LINES} lines): {', '.join(f'{f} ({sizes[f]})' for f in over)}"
