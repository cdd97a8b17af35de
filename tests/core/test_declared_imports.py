"""Every third-party module that harness/, pilots/ and policies/ import (module level or inside a function) is
declared: a core dependency of pyproject.toml, a module of an extra (``harness.core.extras.EXTRA_OF``, whose extra
installs its distribution, so a missing one is named), or one of the few ``ELSEWHERE`` modules, imported only by the
files named there. Reads files and the installed distributions' metadata; runs nothing. The same imports on a real
core-only install: ``tests/test_install_extras.py``."""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

from _import_scan import ImportSite, third_party_imports
from _install_helpers import pyproject
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from harness.core.extras import ELSEWHERE, EXTRA_OF

ROOT = Path(__file__).resolve().parents[2]
NOT_FEATURES = {"all", "test", "lint"}  # extras that group others or serve the repository, not a feature


def _dists(requirements: list[str]) -> set[str]:
    return {canonicalize_name(Requirement(r).name) for r in requirements}


def _where(sites: list[ImportSite]) -> str:
    return ", ".join(sorted({f"{s.file}:{s.line}" for s in sites}))


def undeclared(found: dict[str, list[ImportSite]]) -> list[str]:
    """What is wrong with the declarations of ``found`` (module -> the statements importing it), one line each."""
    project = pyproject()
    core = _dists(project["dependencies"])
    extras = {name: _dists(reqs) for name, reqs in project["optional-dependencies"].items()}
    dist_of = metadata.packages_distributions()
    problems: list[str] = []
    for module, sites in sorted(found.items()):
        dists = {canonicalize_name(d) for d in dist_of.get(module, [])}
        if module in ELSEWHERE:
            allowed, _why = ELSEWHERE[module]
            if stray := [s for s in sites if s.file not in allowed]:
                problems.append(f"{module}: imported by {_where(stray)}, but ELSEWHERE allows only {sorted(allowed)}")
        elif module in EXTRA_OF:
            if not dists & extras.get(EXTRA_OF[module], set()):
                problems.append(f"{module}: EXTRA_OF says [{EXTRA_OF[module]}], which does not install {dists or '?'}")
        elif not dists & core:
            problems.append(
                f"{module} ({_where(sites)}): neither a core dependency nor in EXTRA_OF or ELSEWHERE "
                "(add its distribution to an extra in pyproject.toml and the module to harness/core/extras.py)"
            )
    return problems


def test_every_third_party_import_is_declared() -> None:
    found = third_party_imports(ROOT)
    assert {"numpy", "pydantic", "torch", "scipy"} <= set(found)  # the scan sees both module and function imports
    assert undeclared(found) == []


def test_the_declarations_name_real_imports_and_every_feature_extra() -> None:
    found = third_party_imports(ROOT)
    features = set(pyproject()["optional-dependencies"]) - NOT_FEATURES
    assert set(EXTRA_OF.values()) == features  # each feature extra has its modules named, none is invented
    assert all(module in found for module in EXTRA_OF)  # no stale entry
    for module, (files, why) in ELSEWHERE.items():
        assert why and {s.file for s in found.get(module, [])} == files, module
    assert not set(ELSEWHERE) & set(EXTRA_OF)
    (everything,) = [Requirement(r) for r in pyproject()["optional-dependencies"]["all"]]
    assert everything.name == "eagle-energy-harness" and everything.extras == features  # [all] is every feature


def test_a_new_undeclared_import_is_named() -> None:
    # the check itself: a planted import of a module no declaration covers, and one of an ELSEWHERE module elsewhere
    planted = {
        "left_pad": [ImportSite("left_pad", (), "harness/core/new.py", 3, "import left_pad", None, False)],
        "sglang": [ImportSite("sglang.srt", (), "harness/sweep/new.py", 9, "import sglang.srt", None, False)],
    }
    problems = undeclared(planted)
    assert len(problems) == 2
    assert problems[0].startswith("left_pad (harness/core/new.py:3): neither a core dependency")
    assert "harness/sweep/new.py:9" in problems[1] and "ELSEWHERE allows only" in problems[1]
