"""The collection guard of tests/conftest.py: a pytest mark on a helper function is refused."""

import types

from _mark_rule import marks_on_helpers


def test_a_mark_on_a_helper_is_found_and_marks_on_tests_are_not() -> None:
    mod = types.ModuleType("test_example")
    exec(
        "import pytest\n"
        "@pytest.mark.slow\ndef _sessions(): pass\n"
        "@pytest.mark.slow\ndef test_kill(): pass\n"
        "def plain(): pass\n",
        mod.__dict__,
    )
    assert marks_on_helpers(mod) == ["_sessions"]
