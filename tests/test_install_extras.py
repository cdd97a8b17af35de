"""Installing beside sglang: the core install keeps an environment's own torch and runs the sweep; the extras
(``[policies]``, ``[report]``, ``[export]``, ``[ray]``, ``[stats]``, ``[all]``) bring the rest, and a missing one is
named when needed: every command of the CLI, its modules imported on the core install, either works or says which
extra to install (``tests/_import_scan.py`` walks them inside the venv).

The fresh venv gets a STAND-IN ``torch`` (tests/_install_helpers.py: a tiny wheel at another version, not PyTorch)
first, then the harness core from a copy of the sources with ``--no-index`` (core wheels cached offline). The tests of
this module share that venv and run in file order; the last one uninstalls the stand-in.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from _import_scan import PACKAGES
from _install_helpers import (
    STANDIN_TORCH_VERSION,
    copy_sources,
    core_wheelhouse,
    new_venv,
    pip,
    pyproject,
    standin_torch_wheel,
)
from packaging.requirements import Requirement

import harness
from harness.core.errors import MissingDependencyError
from harness.core.extras import EXTRA_OF, needs

OPTIONAL = ("torch", "sklearn", "joblib", "matplotlib", "pyarrow", "datasets", "ray", "scipy")
SCAN = Path(__file__).with_name("_import_scan.py")


class CoreVenv:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.bin = new_venv(root / "venv")
        self.install_log = ""

    def run(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        env = {
            **os.environ,
            "PATH": f"{self.bin}:{os.environ['PATH']}",
            "COLUMNS": "200",
            "VIRTUAL_ENV": str(self.bin.parent),
        }
        env.pop("PYTHONPATH", None)
        return subprocess.run(
            [str(self.bin / args[0]), *args[1:]],
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=self.root,
            env=env,
        )

    def py(self, code: str) -> str:
        out = self.run("python", "-c", code)
        assert out.returncode == 0, out.stderr
        return out.stdout.strip()


@pytest.fixture(scope="module")
def core_venv(tmp_path_factory: pytest.TempPathFactory) -> CoreVenv:
    wheels = core_wheelhouse()
    root = tmp_path_factory.mktemp("core-venv")
    venv = CoreVenv(root)
    first = pip(venv.bin, "install", str(standin_torch_wheel(root)))
    assert first.returncode == 0, first.stderr
    src = copy_sources(root / "src")
    core = pip(venv.bin, "install", "--find-links", str(wheels), str(src))
    venv.install_log = core.stdout + core.stderr
    assert core.returncode == 0, venv.install_log[-3000:]
    return venv


@pytest.mark.slow  # one fresh venv for the module: ~35 s to build and install, on 2 loaded cores
def test_core_install_keeps_the_environments_torch(core_venv: CoreVenv) -> None:
    # the harness came in, torch was neither replaced nor touched, and no optional dependency was pulled
    assert "Successfully installed" in core_venv.install_log and "eagle-energy-harness" in core_venv.install_log
    assert not re.search(r"(?im)^.*(collecting|uninstall\w*|downloading)\s+torch\b", core_venv.install_log)
    found = json.loads(
        core_venv.py(
            "import importlib.metadata as m, importlib.util as u, json, torch;"
            f"print(json.dumps({{'torch': torch.__version__, 'dist': m.version('torch'), 'harness': m.version('eagle-energy-harness'),"
            f"'present': [n for n in {list(OPTIONAL[1:])!r} if u.find_spec(n)]}}))"
        )
    )
    assert found == {
        "torch": STANDIN_TORCH_VERSION,
        "dist": STANDIN_TORCH_VERSION,
        "harness": harness.__version__,
        "present": [],
    }
    check = pip(core_venv.bin, "check")
    assert check.returncode == 0, check.stdout


@pytest.mark.slow  # one fresh venv for the module: ~35 s to build and install, on 2 loaded cores
def test_core_install_runs_a_twin_sweep_and_names_missing_extras(core_venv: CoreVenv) -> None:
    assert core_venv.run("harness", "sweep", "--help").returncode == 0
    assert core_venv.run("harness", "version").stdout.strip() == harness.__version__
    run = core_venv.root / "run"
    sweep = core_venv.run(
        "harness",
        "sweep",
        "--engine",
        "twin",
        "--quick",
        "--configs",
        "0:0:0,3:4:8",
        "--batch-sizes",
        "1",
        "--output-tokens",
        "64",
        "--time-scale",
        "50",
        "--plain",
        "--out",
        str(run),
        timeout=300,
    )
    assert sweep.returncode == 0, sweep.stdout[-2000:] + sweep.stderr[-2000:]
    rows = [json.loads(line) for line in (run / "rows.jsonl").read_text().splitlines() if line.strip()]
    assert len(rows) == 2 and all(r["error"] is None and r["window_valid"] for r in rows)
    tables = core_venv.run("harness", "report", "sweep", str(run), "--no-figures")
    assert tables.returncode == 0, tables.stderr
    # figures need [report]: the tables still print, then a clear error and exit 7
    figures = core_venv.run("harness", "report", "sweep", str(run))
    assert figures.returncode == 7 and "needs matplotlib" in figures.stderr
    assert "pip install 'eagle-energy-harness[report]'" in figures.stderr and "--no-figures" in figures.stderr
    # parquet needs [export]: refused before anything is written
    export = core_venv.run(
        "harness", "dataset", "export", str(run), "--format", "parquet", "--out", str(core_venv.root / "exp")
    )
    assert export.returncode == 7 and "eagle-energy-harness[export]" in export.stderr, export.stderr
    assert not (core_venv.root / "exp").exists()
    jsonl = core_venv.run(
        "harness", "dataset", "export", str(run), "--format", "jsonl", "--out", str(core_venv.root / "exp")
    )
    assert jsonl.returncode == 0, jsonl.stderr


@pytest.mark.slow  # one fresh venv for the module: ~35 s to build and install, on 2 loaded cores
def test_training_without_the_policies_extra_names_it(core_venv: CoreVenv) -> None:
    # last in this module: without the stand-in, torch is simply absent, as in a core-only venv
    assert pip(core_venv.bin, "uninstall", "-y", "torch").returncode == 0
    run = core_venv.root / "run"
    train = core_venv.run("harness", "train", "--dataset", str(run), "--out", str(core_venv.root / "models"))
    assert train.returncode == 7, train.stdout + train.stderr
    assert "needs torch" in train.stderr and "pip install 'eagle-energy-harness[policies]'" in train.stderr
    gbt = core_venv.run(
        "harness", "train", "--dataset", str(run), "--out", str(core_venv.root / "models"), "--algos", "gbt"
    )
    assert gbt.returncode == 7 and "needs sklearn" in gbt.stderr and "[policies]" in gbt.stderr
    assert not (core_venv.root / "models").exists()  # refused before training anything
    # the numpy-only policies need no extra
    numpy_only = core_venv.run(
        "harness",
        "train",
        "--dataset",
        str(run),
        "--out",
        str(core_venv.root / "models"),
        "--algos",
        "lookup_table,linucb,thompson_sampling",
    )
    assert numpy_only.returncode == 0, numpy_only.stdout[-2000:] + numpy_only.stderr[-2000:]
    assert (core_venv.root / "models" / "picks.json").exists()


def _dist_names(reqs: list[str]) -> set[str]:
    return {Requirement(r).name.lower() for r in reqs}


def test_extras_cover_every_former_dependency_and_one_version_source() -> None:
    project = pyproject()
    extras = project["optional-dependencies"]
    core = _dist_names(project["dependencies"])
    # issue 14: prometheus_client renders /metrics; pyyaml reads `harness sweep --config run.yaml`; issue 45:
    # pydantic-core (pydantic's own, now imported: an option value's refusal) declared, not a new install
    assert core == {
        "typer", "rich", "pydantic", "pydantic-core", "httpx", "numpy", "nvidia-ml-py", "prometheus_client", "pyyaml"
    }  # fmt: skip
    assert [Requirement(r) for r in extras["all"]] == [
        Requirement("eagle-energy-harness[policies,report,export,ray,stats]")
    ]
    everything = core | _dist_names(extras["policies"]) | _dist_names(extras["report"]) | _dist_names(extras["export"])
    assert _dist_names(extras["ray"]) == {"ray"}  # added with --executor ray (issue 16), not a former dependency
    # imported since, declared by issue 45 (`dataset compare`, the twin fit): not a former dependency either
    assert _dist_names(extras["stats"]) == {"scipy"}
    everything -= {"ray"}
    # the dependency list before the split, plus prometheus_client (/metrics), pyyaml (--config), pydantic-core
    assert everything == {
        "typer",
        "rich",
        "pydantic",
        "pydantic-core",
        "httpx",
        "numpy",
        "scikit-learn",
        "joblib",
        "matplotlib",
        "pyarrow",
        "datasets",
        "nvidia-ml-py",
        "torch",
        "prometheus_client",
        "pyyaml",
    }
    # each optional module maps to the extra that installs its distribution
    dist_of = {
        "torch": "torch",
        "sklearn": "scikit-learn",
        "joblib": "joblib",
        "matplotlib": "matplotlib",
        "pyarrow": "pyarrow",
        "datasets": "datasets",
        "ray": "ray",
        "scipy": "scipy",
    }
    assert set(EXTRA_OF) == set(OPTIONAL)
    assert all(dist_of[m] in _dist_names(extras[e]) for m, e in EXTRA_OF.items())
    # [policies] accepts another torch; the suite pins the one it is verified with
    torch_spec = Requirement(next(r for r in extras["policies"] if r.startswith("torch"))).specifier
    assert torch_spec.contains("2.8.0") and torch_spec.contains(STANDIN_TORCH_VERSION) and torch_spec.contains("2.13.0")
    assert "torch==2.13.0" in extras["test"]
    assert project["dynamic"] == ["version"] and "version" not in project


def test_needs_names_the_extra() -> None:
    with pytest.raises(ModuleNotFoundError):
        with needs("policy cql"):
            import not_an_optional_module_xyz  # noqa: F401 - the failing import is what the test feeds to needs()
    with pytest.raises(MissingDependencyError) as info:
        with needs("policy cql"):
            raise ModuleNotFoundError("No module named 'torch.nn'", name="torch.nn")
    assert info.value.exit_code == 7 and "policy cql needs torch" in info.value.message
    assert info.value.fix and "eagle-energy-harness[policies]" in info.value.fix


@pytest.mark.slow  # one fresh venv for the module: ~35 s to build and install, on 2 loaded cores
def test_every_command_works_or_names_its_extra_on_a_core_install(core_venv: CoreVenv) -> None:
    # after the stand-in torch is gone: the venv holds the core install and nothing optional
    assert core_venv.run("harness", "--help").returncode == 0
    walk = core_venv.run("python", str(SCAN), timeout=300)  # every command's modules imported there, see _import_scan
    assert walk.returncode == 0, walk.stderr[-3000:]
    report: dict[str, list[dict]] = json.loads(walk.stdout)
    extras = set(pyproject()["optional-dependencies"]) - {"all", "test", "lint"}
    named: dict[str, set[str]] = {}
    problems = []
    for command, steps in report.items():
        for step in steps:
            if step.get("ok"):
                continue
            extra = re.search(r"eagle-energy-harness\[(\w+)\]", step.get("fix") or "")
            if step.get("exit") == 7 and extra and extra.group(1) in extras and "needs" in step["error"]:
                named.setdefault(command, set()).add(extra.group(1))
            else:
                problems.append(f"harness {command}: {step['import']}: {step.get('traceback') or step}")
    assert problems == []
    assert {"sweep", "reproduce", "serve", "train", "dataset compare", "twin calibrate", "version"} <= set(report)
    assert all(any(s["import"].startswith(PACKAGES) for s in steps) for steps in report.values())
    # it ran on a core install: each feature extra was found missing by the commands that need it
    assert "stats" in named["dataset compare"] and "stats" in named["twin calibrate"]
    assert {"policies", "stats"} <= named["train"] and "report" in named["report sweep"]
    assert "export" in named["dataset export"] and "ray" in named["sweep"] and "version" not in named
    # the commands themselves: the symptom of issue 45 (a traceback from `dataset compare`), now exit 7 and the fix
    run = core_venv.root / "run"
    compare = core_venv.run("harness", "dataset", "compare", str(run), str(run))
    assert compare.returncode == 7 and "Traceback" not in compare.stderr, compare.stderr
    assert "needs scipy" in compare.stderr and "pip install 'eagle-energy-harness[stats]'" in compare.stderr
    active = core_venv.run(
        "harness", "sweep", "--engine", "twin", "--quick", "--strategy", "active", "--out", str(core_venv.root / "a")
    )
    assert active.returncode == 7 and "--strategy active" in active.stderr and "[stats]" in active.stderr
    assert not (core_venv.root / "a").exists()  # refused before the first cell, not at the first fit
