"""Which tests start processes: the rule behind the ``integration`` marker, and a guard that keeps the rule honest.

The rule is static. A test is an integration test when its function, or a fixture it uses, reaches a process starter
through the code it names: ``subprocess``, ``os.fork``/``posix_spawn``/``exec*``, ``multiprocessing``, ``ray``, or a
function or class of this repository (tests/ helpers, harness/, pilots/, policies/) whose own code reaches one. Names
are followed through module globals and the methods of the repository's classes, so ``twin_gpu``, ``run_harness`` and
``EngineLauncher`` mark the tests that use them without a mark in any test file.

The guard is dynamic: a test the rule leaves unmarked fails at teardown when it starts a process anyway (a path the
static walk cannot see, e.g. a call through an attribute of an object a fixture returns), so ``make test-fast`` stays
the unit tests only. The fix is then to name the starter in ``EXTRA_STARTERS``.
"""

from __future__ import annotations

import contextlib
import dis
import importlib
import importlib.util
import os
import runpy
import subprocess
import sys
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent
OWN_PACKAGES = ("harness", "pilots", "policies")
OWN_ROOTS = tuple(str(REPO / d) + os.sep for d in ("tests", "harness", "pilots", "policies"))

STARTER_MODULES = frozenset({"subprocess", "multiprocessing", "concurrent.futures.process", "ray", "pty"})
"""Modules whose use (a name bound to the module, or to anything defined in it) starts processes."""

STARTER_OS_NAMES = frozenset(
    {"fork", "forkpty", "posix_spawn", "posix_spawnp", "system", "popen", "spawnv", "spawnve", "spawnl", "spawnlp"}
    | {"execv", "execve", "execvp", "execvpe", "execl", "execle", "execlp", "execlpe"}
)
"""``os`` functions that start (or become) another program."""

EXTRA_STARTERS: frozenset[str] = frozenset()
"""Qualified names (``module.qualname``) of repository callables that start processes in ways the walk cannot follow."""


def _own_file(obj: Any) -> bool:
    code = getattr(obj, "__code__", None)
    path = (
        code.co_filename
        if code is not None
        else getattr(sys.modules.get(getattr(obj, "__module__", "")), "__file__", "")
    )
    return bool(path) and str(path).startswith(OWN_ROOTS)


def _codes(code: types.CodeType) -> Iterator[types.CodeType]:
    """``code`` and every code object nested in it (lambdas, inner functions, comprehensions)."""
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _codes(const)


def _unwrap(obj: Any) -> Any:
    while True:
        inner = getattr(obj, "__wrapped__", None) or getattr(obj, "__func__", None)
        if inner is None or inner is obj:
            return obj
        obj = inner


class StarterWalk:
    """Memoised answer to "does this callable (transitively) start a process?" over the repository's code."""

    def __init__(self) -> None:
        self._known: dict[int, bool] = {}
        self._open: set[int] = set()
        self._cut = False

    def starts_processes(self, obj: Any) -> bool:
        obj = _unwrap(obj)
        key = id(obj)
        if key in self._known:
            return self._known[key]
        if key in self._open:  # a cycle: "no" from inside, the outer call decides
            self._cut = True
            return False
        self._open.add(key)
        outer_cut, self._cut = self._cut, False
        try:
            answer = self._decide(obj)
        finally:
            self._open.discard(key)
        if answer or not self._cut:  # a "no" reached through a cut cycle may be a "yes" from elsewhere
            self._known[key] = answer
        self._cut = self._cut or outer_cut
        return answer

    def _decide(self, obj: Any) -> bool:
        if _is_starter(obj):
            return True
        if not _own_file(obj):
            return False
        if isinstance(obj, type):
            return any(self.starts_processes(member) for member in _methods(obj))
        code = getattr(obj, "__code__", None)
        if code is None:
            return False
        globals_ = getattr(obj, "__globals__", {})
        for c in _codes(code):
            for name in c.co_names:
                if name in globals_ and self.starts_processes_value(globals_[name], c.co_names):
                    return True
            for value in _local_imports(c):
                if self.starts_processes_value(value, c.co_names):
                    return True
        return False

    def starts_processes_value(self, value: Any, attrs: tuple[str, ...], _seen: frozenset[int] = frozenset()) -> bool:
        """A global ``value`` named in code whose attribute names are ``attrs``: ``os.fork`` names ``os`` and
        ``fork``, ``importlib.util.spec_from_file_location`` a module's module's function."""
        if not isinstance(value, types.ModuleType):
            return callable(value) and self.starts_processes(value)
        if _module_is_starter(value.__name__):
            return True
        own = _own_module(value.__name__)
        for name in attrs:
            member = getattr(value, name, None)
            if isinstance(member, types.ModuleType):
                if id(member) not in _seen and self.starts_processes_value(member, attrs, _seen | {id(value)}):
                    return True
            elif member is not None and (
                _is_starter(member) or (own and callable(member) and self.starts_processes(member))
            ):
                return True
        return False


def _local_imports(code: types.CodeType) -> Iterator[Any]:
    """What the ``import`` statements inside a function bind: modules, and the names ``from m import n`` takes.
    Modules not loaded yet are imported only when they are the repository's own (the test would import them anyway)
    or starters."""
    module: types.ModuleType | None = None
    for ins in dis.get_instructions(code):
        if ins.opname == "IMPORT_NAME":
            name = str(ins.argval)
            module = sys.modules.get(name)
            if module is None and (_module_is_starter(name) or _own_module(name)):
                module = importlib.import_module(name)
            if module is not None:
                yield module
        elif ins.opname == "IMPORT_FROM" and module is not None:
            value = getattr(module, str(ins.argval), None)
            if value is None:  # a submodule not imported by its package
                with contextlib.suppress(ImportError):
                    value = importlib.import_module(f"{module.__name__}.{ins.argval}")
            if value is not None:
                yield value


def _own_module(name: str) -> bool:
    """A module of this repository: harness, pilots, policies, or a tests/ helper."""
    top = name.split(".")[0]
    if top in OWN_PACKAGES:
        return True
    loaded = sys.modules.get(top)
    spec = None if loaded is not None else importlib.util.find_spec(top)
    origin = getattr(loaded, "__file__", None) if loaded is not None else getattr(spec, "origin", None)
    return str(origin or "").startswith(OWN_ROOTS)


def _module_is_starter(name: str) -> bool:
    return any(name == m or name.startswith(m + ".") for m in STARTER_MODULES)


UNREADABLE = (importlib.util.spec_from_file_location, runpy.run_path, runpy.run_module)
"""Code loaded by path or name at run time (a benchmark script) cannot be walked: it counts as a starter."""


def _is_starter(obj: Any) -> bool:
    if any(obj is u for u in UNREADABLE):
        return True
    module = getattr(obj, "__module__", None) or ""
    if _module_is_starter(module):
        return True
    if module in ("os", "posix") and getattr(obj, "__name__", "") in STARTER_OS_NAMES:
        return True
    return f"{module}.{getattr(obj, '__qualname__', '')}" in EXTRA_STARTERS


def _methods(cls: type) -> Iterator[Any]:
    for klass in cls.__mro__:
        if klass is object or not _own_file(klass):
            continue
        for value in vars(klass).values():
            if isinstance(value, (staticmethod, classmethod)):
                value = value.__func__
            elif isinstance(value, property):
                value = value.fget
            if callable(value):
                yield value


GUARD_FIXTURE = "_unit_tests_start_no_process"
"""The conftest fixture that installs ``SpawnGuard`` (it names ``subprocess`` to watch it, not to start anything)."""


def fixture_functions(item: pytest.Item) -> Iterator[Callable[..., Any]]:
    """The functions of every fixture ``item`` uses (pytest resolved the closure, autouse ones included)."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return
    for name in item.fixturenames:  # type: ignore[attr-defined]
        if name == GUARD_FIXTURE:
            continue
        for fixturedef in info.name2fixturedefs.get(name, ()):
            yield fixturedef.func


def is_integration(item: pytest.Item, walk: StarterWalk) -> bool:
    test_fn = getattr(item, "obj", None)
    return any(walk.starts_processes(f) for f in (test_fn, *fixture_functions(item)) if f is not None)


# ---- the guard --------------------------------------------------------------------------------------------------
class SpawnGuard:
    """Records every process a test starts (``subprocess.Popen`` and ``os.fork``) while the test runs."""

    def __init__(self) -> None:
        self.started: list[str] = []

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        popen_execute = subprocess.Popen._execute_child  # type: ignore[attr-defined]
        fork = os.fork
        started = self.started

        def execute_child(popen: subprocess.Popen, args: Any, *rest: Any, **kw: Any) -> Any:
            started.append(" ".join(map(str, args)) if isinstance(args, (list, tuple)) else str(args))
            return popen_execute(popen, args, *rest, **kw)

        def guarded_fork() -> int:
            started.append("os.fork()")
            return fork()

        monkeypatch.setattr(subprocess.Popen, "_execute_child", execute_child)
        monkeypatch.setattr(os, "fork", guarded_fork)
