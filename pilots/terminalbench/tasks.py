"""Which Terminal-Bench tasks a run uses, and the ``harbor run`` arguments that select them.

- Published default: ``-d terminal-bench-sample@2.0 -i regex-log -i log-summary-date-ranges`` (needs the Harbor
  registry, GitHub and Docker Hub).
- ``--task-dir DIR``: a task folder or a folder of tasks (``-p DIR``).
- ``--registry-path FILE``: a local ``registry.json`` (``-d name@version --registry-path``); relative task paths in
  it are resolved against the registry's folder, so the file is rewritten with absolute paths into the run folder.
- ``--fixture``: the project's two offline tasks (``pilots/terminalbench/tasks``) through the bundled local registry
  ``eagle-local-sample@1.0``.
``--tasks a,b`` filters by task name (Harbor's ``-i``, globs allowed).
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel

from harness.core.errors import DataError, MissingFileError, UsageError

PUBLISHED_DATASET = "terminal-bench-sample@2.0"
PUBLISHED_TASKS: tuple[str, ...] = ("regex-log", "log-summary-date-ranges")
FIXTURE_DIR = Path(__file__).resolve().parent / "tasks"
FIXTURE_REGISTRY = FIXTURE_DIR / "registry.json"
FIXTURE_DATASET = "eagle-local-sample@1.0"
FIXTURE_TASKS: tuple[str, ...] = ("log-error-digest", "iso-date-extract")


class TaskSource(BaseModel):
    """Resolved task selection: the Harbor arguments plus a description for the manifest."""

    kind: str  # "registry" | "local_registry" | "task_dir"
    dataset: str | None = None
    registry_path: str | None = None
    task_dir: str | None = None
    tasks: list[str] = []
    offline: bool = False

    def harbor_args(self) -> list[str]:
        args: list[str] = []
        if self.kind == "task_dir":
            args += ["-p", str(self.task_dir)]
        else:
            args += ["-d", str(self.dataset)]
            if self.registry_path:
                args += ["--registry-path", str(self.registry_path)]
        for name in self.tasks:
            args += ["-i", name]
        return args


def localize_registry(src: Path, dest: Path) -> Path:
    """Copy a local registry to ``dest`` with every local task path made absolute (relative to ``src``'s folder)."""
    if not src.exists():
        raise MissingFileError(
            f"registry file {src} not found", fix="pass --registry-path of an existing registry.json"
        )
    path = src / "registry.json" if src.is_dir() else src
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise DataError(f"{path}: not JSON ({exc.msg})", fix="a registry is a JSON array of datasets") from None
    if not isinstance(data, list):
        raise DataError(f"{path}: expected a JSON array of datasets", fix="see Harbor's DatasetSpec format")
    for ds in data:
        for task in ds.get("tasks", []):
            if task.get("git_url") is None and "path" in task:
                p = Path(task["path"])
                if not p.is_absolute():
                    p = (path.parent / p).resolve()
                task["path"] = str(p)
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(json.dumps(data, indent=2) + "\n")
    return dest


def resolve_tasks(
    *,
    fixture: bool,
    task_dir: Path | None,
    registry_path: Path | None,
    dataset: str | None,
    tasks: list[str] | None,
    work_dir: Path,
) -> TaskSource:
    """The task selection for one run (``work_dir`` receives the localized registry)."""
    if task_dir is not None and registry_path is not None:
        raise UsageError("--task-dir and --registry-path are exclusive", fix="pass one of them")
    if task_dir is not None:
        if not Path(task_dir).exists():
            raise MissingFileError(
                f"task folder {task_dir} not found", fix="pass a Harbor task folder or a folder of tasks"
            )
        return TaskSource(
            kind="task_dir", task_dir=str(Path(task_dir).resolve()), tasks=list(tasks or []), offline=True
        )
    if registry_path is not None or fixture:
        src = Path(registry_path) if registry_path is not None else FIXTURE_REGISTRY
        local = localize_registry(src, work_dir / "registry.json")
        default_ds = FIXTURE_DATASET if registry_path is None else (dataset or PUBLISHED_DATASET)
        default_tasks = list(FIXTURE_TASKS) if registry_path is None else list(PUBLISHED_TASKS)
        return TaskSource(
            kind="local_registry",
            dataset=dataset or default_ds,
            registry_path=str(local),
            tasks=list(tasks) if tasks else default_tasks,
            offline=True,
        )
    return TaskSource(
        kind="registry",
        dataset=dataset or PUBLISHED_DATASET,
        tasks=list(tasks) if tasks else list(PUBLISHED_TASKS),
        offline=False,
    )
