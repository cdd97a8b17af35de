"""Optional grading with ``swebench.harness.run_evaluation`` (swebench 5.x, Docker, per-instance images).

Grading comes from the report's id lists (``resolved_ids``, ``completed_ids``, ``error_ids``, ...), never from the
exit code: run_evaluation exits 0 even when every image pull failed. When anything it needs is missing the step is
skipped with a reason (``not evaluated: ...``) that lands in the summary and in each merged record.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Sequence

from pilots.swebench.instances import Instance

REPORT_ID_LISTS = ("submitted_ids", "completed_ids", "resolved_ids", "unresolved_ids", "empty_patch_ids",
                   "error_ids", "infra_failure_ids", "incomplete_ids", "ambiguous_failure_ids")


def _run(argv: Sequence[str], timeout: float = 30.0, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, cwd=cwd)


def availability(instances: Sequence[Instance], evaluator_python: str | None = None, *,
                 runner: Callable[..., subprocess.CompletedProcess[str]] = _run) -> tuple[bool, str]:
    """(True, "") when grading can run; else (False, why) naming the first missing piece."""
    py = evaluator_python or sys.executable
    try:
        probe = runner([py, "-c", "import swebench, sys; sys.stdout.write(swebench.__version__)"])
    except (OSError, subprocess.SubprocessError) as exc:
        return False, f"evaluator python {py} cannot run ({exc})"
    if probe.returncode != 0:
        return False, f"swebench is not installed for {py} (pip install swebench==5.0.2 there, or --evaluator-python)"
    missing = [i.instance_id for i in instances if not (i.image and i.eval_script)]
    if missing:
        return False, ("instances lack the swebench 5.x fields image/eval_script (" + ", ".join(missing)
                       + "); project fixtures are never gradable")
    if shutil.which("docker") is None:
        return False, "docker CLI not found"
    try:
        info = runner(["docker", "info", "--format", "{{.ServerVersion}}"])
    except (OSError, subprocess.SubprocessError) as exc:
        return False, f"docker daemon not reachable ({exc})"
    if info.returncode != 0:
        return False, "docker daemon not reachable: " + (info.stderr or info.stdout).strip()[:200]
    for inst in instances:
        img = runner(["docker", "image", "inspect", str(inst.image)])
        if img.returncode != 0:
            return False, f"image {inst.image} is not present locally (docker pull {inst.image} first)"
    return True, ""


def parse_report(report: dict[str, Any], instance_ids: Sequence[str], report_path: str | None = None) -> dict[str, dict[str, Any]]:
    """Per-instance grades from a swebench 5.x run report's id lists."""
    lists = {k: set(report.get(k) or []) for k in REPORT_ID_LISTS}
    out: dict[str, dict[str, Any]] = {}
    for iid in instance_ids:
        resolved = iid in lists["resolved_ids"]
        completed = iid in lists["completed_ids"]
        infra = iid in lists["infra_failure_ids"] or iid in lists["error_ids"]
        empty = iid in lists["empty_patch_ids"]
        if resolved:
            status = "resolved"
        elif infra:
            status = "infra_failure"
        elif empty:
            status = "empty_patch"
        elif completed:
            status = "unresolved"
        elif iid in lists["submitted_ids"]:
            status = "not_completed"
        else:
            status = "not_submitted"
        out[iid] = {
            "status": status, "resolved": resolved, "evaluation_completed": completed, "infra_failure": infra,
            "empty_patch": empty, "evaluation_report_path": report_path,
        }
    return out


def find_report(search_dirs: Sequence[Path], run_id: str) -> Path | None:
    """The run report: a JSON file under ``search_dirs`` with ``resolved_ids`` whose name or content has ``run_id``."""
    for d in search_dirs:
        if not d.exists():
            continue
        for p in sorted(d.rglob("*.json")):
            try:
                data = json.loads(p.read_text())
            except (OSError, json.JSONDecodeError, UnicodeDecodeError):
                continue
            if isinstance(data, dict) and "resolved_ids" in data and (run_id in p.name or data.get("run_id") == run_id):
                return p
    return None


def evaluate_config(*, run_dir: Path, config_name: str, run_id: str, predictions_path: Path,
                    instances: Sequence[Instance], evaluator_python: str | None, timeout_s: float = 7200.0) -> dict[str, dict[str, Any]]:
    """Run swebench on one config's predictions; grade each instance from the report (or say why it could not)."""
    eval_dir = run_dir / "eval"
    eval_dir.mkdir(parents=True, exist_ok=True)
    dataset_file = eval_dir / "instances.jsonl"
    with open(dataset_file, "w") as f:
        for inst in instances:
            f.write(json.dumps(inst.model_dump(mode="json")) + "\n")
    rid = f"{run_id}_{config_name}"
    argv = [evaluator_python or sys.executable, "-m", "swebench.harness.run_evaluation",
            "--dataset_name", str(dataset_file), "--split", "test", "--predictions_path", str(predictions_path),
            "--instance_ids", *[i.instance_id for i in instances], "--max_workers", "1", "--run_id", rid,
            "--report_dir", str(eval_dir / config_name)]
    log = run_dir / "logs" / f"eval-{config_name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    ids = [i.instance_id for i in instances]
    try:
        proc = _run(argv, timeout=timeout_s, cwd=eval_dir)
        log.write_text(f"$ {' '.join(argv)}\n# exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    except (OSError, subprocess.SubprocessError) as exc:
        return {i: {"status": "not_evaluated", "reason": f"run_evaluation failed to run: {exc}"} for i in ids}
    report = find_report([eval_dir / config_name, eval_dir], rid)
    if report is None:
        return {i: {"status": "not_evaluated", "reason": f"no run report found (exit {proc.returncode}; see {log})"} for i in ids}
    return parse_report(json.loads(report.read_text()), ids, str(report))


def not_evaluated(instance_ids: Sequence[str], reason: str) -> dict[str, dict[str, Any]]:
    return {i: {"status": "not_evaluated", "reason": reason, "resolved": None} for i in instance_ids}
