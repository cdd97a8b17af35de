"""Suite-wide settings: no telemetry or network lookups from Harbor/litellm, a UTC-agnostic suite; the
``integration`` marker applied by rule (tests/_integration_rule.py) and checked by a guard."""

import os
from collections.abc import Iterator

import pytest
from _integration_rule import SpawnGuard, StarterWalk, is_integration
from _mark_rule import marks_on_helpers

os.environ.setdefault("HARBOR_TELEMETRY", "0")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Refuse a mark on a helper; mark every test that starts a process (itself or through a fixture or helper)
    ``integration``."""
    misplaced = sorted(
        {
            f"{m.__name__}.{name}"
            for m in {getattr(item, "module", None) for item in items} - {None}
            for name in marks_on_helpers(m)
        }
    )
    if misplaced:
        raise pytest.UsageError(
            f"pytest marks on functions that are not tests: {', '.join(misplaced)}; move each mark onto its test"
        )
    walk = StarterWalk()
    for item in items:
        if item.get_closest_marker("integration") is None and is_integration(item, walk):
            item.add_marker(pytest.mark.integration)


@pytest.fixture(autouse=True)
def _unit_tests_start_no_process(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A test left unmarked by the rule that starts a process anyway fails: ``-m "not integration"`` stays unit tests."""
    if request.node.get_closest_marker("integration") is not None:
        yield
        return
    guard = SpawnGuard()
    guard.install(monkeypatch)
    yield
    if guard.started:
        pytest.fail(
            f"this test started {len(guard.started)} process(es) ({guard.started[0][:200]}) but the integration rule "
            "did not mark it: name the starter in EXTRA_STARTERS of tests/_integration_rule.py"
        )
