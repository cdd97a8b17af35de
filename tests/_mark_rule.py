"""Marks belong on tests: a mark pytest never sees (on a helper) silently leaves its test in the wrong tier."""

from __future__ import annotations

import inspect
import types


def marks_on_helpers(module: types.ModuleType) -> list[str]:
    """Module-level functions of a test module that carry a pytest mark but are not tests (a ``@pytest.mark.slow``
    left on a helper when a test moved leaves the test in the wrong tier, silently)."""
    return [
        name
        for name, obj in vars(module).items()
        if inspect.isfunction(obj)
        and obj.__module__ == module.__name__
        and not name.startswith("test")
        and getattr(obj, "pytestmark", None)
    ]
