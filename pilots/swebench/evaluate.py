"""Optional grading with ``swebench.harness.run_evaluation`` (swebench 5.x, Docker, per-instance images).

Grading comes from the report's id lists (``resolved_ids``, ``completed_ids``, ``error_ids``, ...), never from the
exit code: run_evaluation exits 0 even when every image pull failed. When anything it needs is missing the step is
skipped with a reason (``not evaluated: ...``) that lands in the summary and in each merged record.

What the lists mean in swebench 5.0.2 (``harness/reporting.py:make_run_report``, ``harness/run_evaluation.py``,
``harness/infra_failure.py``): ``error_ids`` holds every submitted instance that ended without a per-instance
``report.json`` (the run raised: a patch ``git apply`` rejected, an image pull or container error, a test timeout);
``infra_failure_ids`` / ``ambiguous_failure_ids`` are an advisory classification of ``unresolved_ids | error_ids``
from log signatures (environment tier vs. ambiguous). So an ``error_ids`` entry is not by itself an infrastructure
failure: a patch that does not apply (``>>>>> Patch Apply Failed`` in the instance's ``run_instance.log``) is the
model's failure. Each grade carries ``status`` and ``failure_kind`` (``model`` | ``infrastructure`` | ``ambiguous``
| ``unclassified`` | ``not_run`` | None when resolved).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Sequence

from pilots.swebench.instances import Instance

REPORT_ID_LISTS = (
    "submitted_ids",
    "completed_ids",
    "resolved_ids",
    "unresolved_ids",
    "empty_patch_ids",
    "error_ids",
    "infra_failure_ids",
    "incomplete_ids",
    "ambiguous_failure_ids",
)


def _run(argv: Sequence[str], timeout: float = 30.0, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, cwd=cwd)


def availability(
    instances: Sequence[Instance],
    evaluator_python: str | None = None,
    *,
    runner: Callable[..., subprocess.CompletedProcess[str]] = _run,
) -> tuple[bool, str]:
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
        return False, (
            "instances lack the swebench 5.x fields image/eval_script ("
            + ", ".join(missing)
            + "); project fixtures are never gradable"
        )
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


# swebench's own marker (harness/constants: APPLY_PATCH_FAIL), written to run_instance.log when no git apply variant
# took the patch
APPLY_PATCH_FAIL = ">>>>> Patch Apply Failed"
INSTANCE_LOG = "run_instance.log"

# status -> failure_kind (who failed); ``_status`` picks the status, the first of its checks that holds wins
FAILURE_KIND = {
    "resolved": None,
    "patch_apply_failed": "model",  # error_ids + the apply-failure marker: the patch itself was bad
    "infra_failure": "infrastructure",  # infra_failure_ids: an environment-tier log signature
    "ambiguous_failure": "ambiguous",  # ambiguous_failure_ids: environment or patch, swebench cannot tell
    "evaluation_error": "unclassified",  # error_ids with neither: the run raised for a reason nobody classified
    "empty_patch": "model",  # nothing to apply: swebench skips it
    "unresolved": "model",  # tests ran, the patch did not fix them
    "not_completed": "not_run",
    "not_submitted": "not_run",
}


def instance_log(log_root: Path | None, run_id: str, instance_id: str) -> Path | None:
    """swebench's ``run_instance.log`` of one instance in run ``run_id`` under ``log_root`` (its working directory).

    5.0.2 writes ``logs/run_evaluation/<run_id>/<model>/<id>/``; newer releases move it, so the run id and instance id
    are matched as exact path components rather than by a hard-coded layout.
    """
    if log_root is None or not log_root.exists():
        return None
    for p in sorted(log_root.rglob(INSTANCE_LOG)):
        if p.parent.name == instance_id and run_id in p.parts[:-2]:
            return p
    return None


def _patch_apply_failed(log_root: Path | None, run_id: str | None, instance_id: str) -> bool:
    log = instance_log(log_root, run_id, instance_id) if run_id else None
    try:
        return log is not None and APPLY_PATCH_FAIL in log.read_text(errors="replace")
    except OSError:
        return False


def _status(iid: str, lists: dict[str, set[str]], apply_failed: bool) -> str:
    if iid in lists["resolved_ids"]:
        return "resolved"
    if iid in lists["error_ids"] and apply_failed:  # before infra: a cleanup error may add a daemon signature later
        return "patch_apply_failed"
    if iid in lists["infra_failure_ids"]:
        return "infra_failure"
    if iid in lists["ambiguous_failure_ids"]:
        return "ambiguous_failure"
    if iid in lists["error_ids"]:
        return "evaluation_error"
    if iid in lists["empty_patch_ids"]:
        return "empty_patch"
    if iid in lists["completed_ids"]:
        return "unresolved"
    return "not_completed" if iid in lists["submitted_ids"] else "not_submitted"


def parse_report(
    report: dict[str, Any],
    instance_ids: Sequence[str],
    report_path: str | None = None,
    *,
    run_id: str | None = None,
    log_root: Path | None = None,
) -> dict[str, dict[str, Any]]:
    """Per-instance grades from a swebench 5.x run report's id lists (+ the instance logs under ``log_root``)."""
    lists = {k: set(report.get(k) or []) for k in REPORT_ID_LISTS}
    reasons = report.get("failure_reasons") or {}
    out: dict[str, dict[str, Any]] = {}
    for iid in instance_ids:
        status = _status(iid, lists, _patch_apply_failed(log_root, run_id, iid))
        out[iid] = {
            "status": status,
            "failure_kind": FAILURE_KIND[status],
            "resolved": status == "resolved",
            "evaluation_completed": iid in lists["completed_ids"],
            "infra_failure": status == "infra_failure",
            "empty_patch": status == "empty_patch",
            "failure_reason": reasons.get(iid),
            "evaluation_report_path": report_path,
        }
    return out


def find_report(search_dirs: Sequence[Path], run_id: str, model_names: Sequence[str] = ()) -> Path | None:
    """The run report of exactly ``run_id`` under ``search_dirs``: a JSON file with ``resolved_ids`` named
    ``<model>.<run_id>.json`` (swebench 5.0.2; ``/`` in the model becomes ``__``), or ``<run_id>/results.json``, or
    whose ``run_id`` field equals it. Never a substring match: ``r1_chosen`` must not find ``r1_chosen_bs16``'s report.
    """
    names = {f"{m.replace('/', '__')}.{run_id}.json" for m in model_names}
    for d in search_dirs:
        if not d.exists():
            continue
        for p in sorted(d.rglob("*.json")):
            try:
                data = json.loads(p.read_text())
            except (OSError, json.JSONDecodeError, UnicodeDecodeError):
                continue
            if not (isinstance(data, dict) and "resolved_ids" in data):
                continue
            named = p.name in names if names else p.name.endswith(f".{run_id}.json")
            if named or (p.name == "results.json" and p.parent.name == run_id) or data.get("run_id") == run_id:
                return p
    return None


def evaluate_config(
    *,
    run_dir: Path,
    config_name: str,
    run_id: str,
    predictions_path: Path,
    instances: Sequence[Instance],
    evaluator_python: str | None,
    timeout_s: float = 7200.0,
) -> dict[str, dict[str, Any]]:
    """Run swebench on one config's predictions; grade each instance from the report (or say why it could not)."""
    eval_dir = run_dir / "eval"
    eval_dir.mkdir(parents=True, exist_ok=True)
    dataset_file = eval_dir / "instances.jsonl"
    with open(dataset_file, "w") as f:
        for inst in instances:
            f.write(json.dumps(inst.model_dump(mode="json")) + "\n")
    rid = f"{run_id}_{config_name}"
    argv = [
        evaluator_python or sys.executable,
        "-m",
        "swebench.harness.run_evaluation",
        "--dataset_name",
        str(dataset_file),
        "--split",
        "test",
        "--predictions_path",
        str(predictions_path),
        "--instance_ids",
        *[i.instance_id for i in instances],
        "--max_workers",
        "1",
        "--run_id",
        rid,
        "--report_dir",
        str(eval_dir / config_name),
    ]
    log = run_dir / "logs" / f"eval-{config_name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    ids = [i.instance_id for i in instances]
    try:
        proc = _run(argv, timeout=timeout_s, cwd=eval_dir)
        log.write_text(f"$ {' '.join(argv)}\n# exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    except (OSError, subprocess.SubprocessError) as exc:
        return {i: {"status": "not_evaluated", "reason": f"run_evaluation failed to run: {exc}"} for i in ids}
    models = sorted(
        {json.loads(line)["model_name_or_path"] for line in predictions_path.read_text().splitlines() if line.strip()}
    )
    report = find_report([eval_dir / config_name, eval_dir], rid, models)
    if report is None:
        return {
            i: {"status": "not_evaluated", "reason": f"no run report found (exit {proc.returncode}; see {log})"}
            for i in ids
        }
    return parse_report(json.loads(report.read_text()), ids, str(report), run_id=rid, log_root=eval_dir)


def not_evaluated(instance_ids: Sequence[str], reason: str) -> dict[str, dict[str, Any]]:
    return {i: {"status": "not_evaluated", "reason": reason, "resolved": None} for i in instance_ids}
