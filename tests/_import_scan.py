"""The imports of the harness's sources, read from their syntax trees: module level and inside functions (they run
later, but a command reaches them), ``importlib.import_module`` of a name or of a package's f-string (every module of
that package), never ``if TYPE_CHECKING:`` blocks (they never run).

Standard library only, so that it also runs as a script inside a core-only venv (``tests/test_install_extras.py``):
``python _import_scan.py`` there walks every command of the ``harness`` CLI, imports each command's modules (its own
module, the imports inside its function and, transitively, every harness module those reach, with the third-party
imports of all of them executed as the code writes them: inside ``needs(...)`` where the code has it), and prints one
JSON object: per command, what each import did there (``ok``, or the error, fix and exit code the CLI would print, or
a traceback).
"""

from __future__ import annotations

import ast
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

PACKAGES = ("harness", "pilots", "policies")
GUARDS = {"ImportError", "ModuleNotFoundError", "Exception", "BaseException"}


@dataclass(frozen=True)
class ImportSite:
    """One import statement: the module it names, where it is, and how the code guards it."""

    module: str  # absolute dotted module ("scipy.stats", "harness.core.extras")
    names: tuple[str, ...]  # a from-import's names; () for ``import x``
    file: str  # relative to the source root
    line: int
    statement: str
    purpose: str | None  # the source of the ``needs(...)`` argument of the ``with`` block around it, if any
    guarded: bool  # inside ``try:`` with an ``except`` for ImportError (the code handles its absence itself)

    @property
    def top(self) -> str:
        return self.module.split(".")[0]

    def third_party(self) -> bool:
        return self.top not in PACKAGES and self.top not in sys.stdlib_module_names and self.top != "__future__"


def module_name(rel: str) -> str:
    return rel.removesuffix(".py").replace("/", ".").removesuffix(".__init__")


def _is_type_checking(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (
        (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
        or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")
    )


def _needs_purpose(node: ast.With, source: str) -> str | None:
    for item in node.items:
        call = item.context_expr
        if isinstance(call, ast.Call) and call.args:
            name = call.func.id if isinstance(call.func, ast.Name) else getattr(call.func, "attr", "")
            if name == "needs":
                return ast.get_source_segment(source, call.args[0]) or "?"
    return None


def _catches_import_error(node: ast.Try) -> bool:
    for handler in node.handlers:
        kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
        if handler.type is None or any(isinstance(k, ast.Name) and k.id in GUARDS for k in kinds):
            return True
    return False


def _dynamic_targets(root: Path, call: ast.Call) -> list[str]:
    """``import_module("a.b")``: a.b; ``import_module(f"a.{name}")``: every module of package a."""
    name = call.func.id if isinstance(call.func, ast.Name) else getattr(call.func, "attr", "")
    if name != "import_module" or not call.args:
        return []
    arg = call.args[0]
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return [arg.value]
    head = arg.values[0] if isinstance(arg, ast.JoinedStr) and arg.values else None
    if isinstance(head, ast.Constant) and isinstance(head.value, str) and head.value.endswith("."):
        package = head.value.rstrip(".")
        folder = root / package.replace(".", "/")
        return [f"{package}.{p.stem}" for p in sorted(folder.glob("*.py")) if p.stem != "__init__"]
    return []


def imports_in(root: Path, rel: str, first_line: int = 0, last_line: int | None = None) -> list[ImportSite]:
    """The import statements of ``root/rel`` (those between ``first_line`` and ``last_line`` when given)."""
    source = (root / rel).read_text()
    package = module_name(rel) if rel.endswith("__init__.py") else module_name(rel).rpartition(".")[0]
    sites: list[ImportSite] = []

    def visit(node: ast.AST, purpose: str | None, guarded: bool) -> None:
        if _is_type_checking(node):
            return
        if isinstance(node, ast.With):
            purpose = _needs_purpose(node, source) or purpose
        if isinstance(node, ast.Try):
            for child in node.body:
                visit(child, purpose, guarded or _catches_import_error(node))
            for rest in (*node.handlers, *node.orelse, *node.finalbody):
                visit(rest, purpose, guarded)
            return
        in_range = first_line <= getattr(node, "lineno", 0) <= (last_line or 10**9)
        if isinstance(node, (ast.Import, ast.ImportFrom)) and in_range:
            if isinstance(node, ast.Import):
                targets = [(a.name, ()) for a in node.names]
            else:
                base = node.module or ""
                if node.level:
                    parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*parts, *([node.module] if node.module else [])])
                targets = [(base, tuple(a.name for a in node.names))]
            for module, names in targets:
                sites.append(ImportSite(module, names, rel, node.lineno, ast.unparse(node), purpose, guarded))
        if isinstance(node, ast.Call) and in_range:
            for module in _dynamic_targets(root, node):
                sites.append(ImportSite(module, (), rel, node.lineno, ast.unparse(node), purpose, guarded))
        for child in ast.iter_child_nodes(node):
            visit(child, purpose, guarded)

    visit(ast.parse(source), None, False)
    return sites


def source_files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for pkg in PACKAGES for p in (root / pkg).rglob("*.py"))


def third_party_imports(root: Path) -> dict[str, list[ImportSite]]:
    """Every third-party top-level module the packages under ``root`` import, with the statements that do."""
    found: dict[str, list[ImportSite]] = {}
    for rel in source_files(root):
        for site in imports_in(root, rel):
            if site.third_party():
                found.setdefault(site.top, []).append(site)
    return found


# ------------------------------------------------------------------------------------- the walk (run in a venv)


def _file_of(root: Path, module: str) -> str | None:
    for rel in (module.replace(".", "/") + ".py", module.replace(".", "/") + "/__init__.py"):
        if (root / rel).is_file():
            return rel
    return None


def _first_party_targets(root: Path, site: ImportSite) -> Iterator[str]:
    """The harness modules an import statement loads: the module, its packages, and from-imported submodules."""
    parts = site.module.split(".")
    for i in range(1, len(parts) + 1):
        yield ".".join(parts[:i])
    for name in site.names:
        if _file_of(root, f"{site.module}.{name}"):
            yield f"{site.module}.{name}"


def reach(root: Path, start: list[ImportSite]) -> tuple[list[str], list[ImportSite]]:
    """The harness modules the sites reach (transitively, imports inside functions included), and the third-party
    import statements of all of them."""
    modules: list[str] = []
    outside: list[ImportSite] = []
    todo = list(start)
    while todo:
        site = todo.pop()
        if site.third_party():
            outside.append(site)
            continue
        if site.top not in PACKAGES:
            continue
        for mod in _first_party_targets(root, site):
            rel = _file_of(root, mod)
            if rel is None or mod in modules:
                continue
            modules.append(mod)
            todo += imports_in(root, rel)
    return sorted(modules), outside


def commands() -> Iterator[tuple[str, Callable[..., Any]]]:
    """Every command of the ``harness`` CLI (each registrar loaded): its words and its function."""
    import typer.main

    from harness.cli import build_app

    def walk(cmd: Any, words: list[str]) -> Iterator[tuple[str, Callable[..., Any]]]:
        if hasattr(cmd, "commands"):  # a group (typer vendors its own click)
            for name, sub in sorted(cmd.commands.items()):
                yield from walk(sub, [*words, name])
        elif cmd.callback is not None:
            yield " ".join(words), cmd.callback

    yield from walk(typer.main.get_command(build_app()), [])


def _function_sites(root: Path, fn: Callable[..., Any]) -> list[ImportSite]:
    """The imports of ``fn``'s module plus those inside ``fn`` itself."""
    import inspect

    fn = inspect.unwrap(fn)
    rel = str(Path(inspect.getfile(fn)).resolve().relative_to(root))
    tree = ast.parse((root / rel).read_text())
    first = fn.__code__.co_firstlineno
    node = next(
        n
        for n in ast.walk(tree)
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
        and first in (n.lineno, *(d.lineno for d in n.decorator_list))
    )
    own = ImportSite(module_name(rel), (), rel, 0, f"import {module_name(rel)}", None, False)
    return [own, *imports_in(root, rel, node.lineno, node.end_lineno)]


def _outcome(action: Callable[[], object]) -> dict[str, Any]:
    """What the CLI makes of an action: nothing, a HarnessError's message and exit code, a missing optional module
    named (``harness.cli.main``'s last resort), or a traceback."""
    import traceback

    from harness.core.errors import HarnessError
    from harness.core.extras import dependency_error

    try:
        action()
    except HarnessError as exc:
        return {"exit": exc.exit_code, "error": exc.message, "fix": exc.fix}
    except ModuleNotFoundError as exc:
        err = dependency_error(exc)
        if err is None:
            return {"traceback": traceback.format_exc()}
        return {"exit": err.exit_code, "error": err.message, "fix": err.fix}
    except Exception:  # noqa: BLE001 - reported, not swallowed: the test fails on any traceback
        return {"traceback": traceback.format_exc()}
    return {"ok": True}


def _run_site(site: ImportSite) -> Callable[[], object]:
    def run() -> None:
        from harness.core.extras import needs

        if site.guarded:  # the code catches the ImportError itself
            try:
                exec(site.statement, {})
            except ImportError:
                pass
        elif site.purpose is not None:
            with needs("(the command)"):  # the purpose is often an f-string of the function's locals
                exec(site.statement, {})
        else:
            exec(site.statement, {})

    return run


def walk_commands() -> dict[str, list[dict[str, Any]]]:
    """Per command: each harness module it reaches imported, each third-party import executed; their outcomes."""
    import importlib

    import harness

    root = Path(harness.__file__).resolve().parent.parent
    done: dict[str, dict[str, Any]] = {}
    report: dict[str, list[dict[str, Any]]] = {}
    for words, fn in commands():
        modules, outside = reach(root, _function_sites(root, fn))
        steps: list[dict[str, Any]] = []
        for mod in modules:
            if mod not in done:
                done[mod] = _outcome(lambda mod=mod: importlib.import_module(mod))
            steps.append({"import": mod, **done[mod]})
        for site in sorted(set(outside), key=lambda s: (s.file, s.line)):
            key = f"{site.file}:{site.line}:{site.statement}"
            if key not in done:
                done[key] = _outcome(_run_site(site))
            steps.append({"import": key, **done[key]})
        report[words] = steps
    return report


if __name__ == "__main__":
    json.dump(walk_commands(), sys.stdout)
