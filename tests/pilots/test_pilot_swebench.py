"""SWE-bench pilot: instances, prompt building (golden + truncation), patches, predictions, grading, skip path."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.core.errors import MissingFileError, UsageError
from harness.core.jsonl import read_jsonl
from harness.grid import SpecConfig
from pilots.swebench import evaluate as ev
from pilots.swebench.checkout import build_fixture_repo, find_checkout
from pilots.swebench.instances import Instance, fixture_path, load_file, select
from pilots.swebench.patches import extract_patch, model_name, prediction
from pilots.swebench.prompt import (
    PromptSettings,
    apply_chat_template,
    build_prompt,
    estimate_tokens,
    head_tail_cut,
)

DATA = Path(__file__).parent / "test_pilot_swebench_data"
SEPARABLE_FIX = """diff --git a/astropy/modeling/separable.py b/astropy/modeling/separable.py
--- a/astropy/modeling/separable.py
+++ b/astropy/modeling/separable.py
@@ -38,7 +38,7 @@ def _stack(left: np.ndarray | Model, right: np.ndarray | Model, n_out: int, n_in
     mat[:lo, :li] = lmat
     if isinstance(right, np.ndarray):
         # a nested compound model on the right-hand side
-        mat[lo:, li:] = True
+        mat[lo:, li:] = right
     else:
         mat[lo:, li:] = _leaf_matrix(right)
     return mat
"""


@pytest.fixture(scope="module")
def fixture_instances() -> list[Instance]:
    return load_file(fixture_path())


@pytest.fixture(scope="module")
def repos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("repos")
    build_fixture_repo(d)
    return d


def test_fixture_has_swebench_fields_and_is_marked_unofficial(fixture_instances: list[Instance]) -> None:
    raw = [json.loads(line) for line in fixture_path().read_text().splitlines()]
    for rec in raw:
        for key in (
            "repo",
            "instance_id",
            "base_commit",
            "problem_statement",
            "hints_text",
            "version",
            "FAIL_TO_PASS",
            "PASS_TO_PASS",
            "environment_setup_commit",
            "patch",
            "test_patch",
        ):
            assert key in rec
        assert rec["fixture_kind"] == "project_written_offline" and rec["official_text"] is False
        assert rec["patch"] is None and rec["eval_script"] is None  # nothing we cannot reproduce honestly
    chosen = select(fixture_instances)
    assert [i.instance_id for i in chosen] == ["astropy__astropy-12907", "astropy__astropy-14182"]
    assert [i.instance_id for i in select(fixture_instances, instance_ids=["astropy__astropy-14182"])] == [
        "astropy__astropy-14182"
    ]
    with pytest.raises(UsageError, match="unknown instance ids: nope"):
        select(fixture_instances, instance_ids=["nope"])
    with pytest.raises(UsageError, match="no repository has 3"):
        select(fixture_instances, limit=3)


def test_instances_from_json_jsonl_parquet(tmp_path: Path, fixture_instances: list[Instance]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    recs = [i.model_dump(mode="json") for i in fixture_instances]
    (tmp_path / "a.json").write_text(json.dumps(recs))
    (tmp_path / "b.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    for r in recs:  # parquet needs one type per column
        r["FAIL_TO_PASS"] = json.dumps(r["FAIL_TO_PASS"])
        r["PASS_TO_PASS"] = json.dumps(r["PASS_TO_PASS"])
    pq.write_table(pa.Table.from_pylist(recs), tmp_path / "c.parquet")
    for name in ("a.json", "b.jsonl", "c.parquet"):
        got = load_file(tmp_path / name)
        assert [i.instance_id for i in got] == [i.instance_id for i in fixture_instances]
        assert got[0].problem_statement == fixture_instances[0].problem_statement
    with pytest.raises(MissingFileError):
        load_file(tmp_path / "missing.jsonl")


def test_prompt_golden_with_truncation(fixture_instances: list[Instance], repos: Path) -> None:
    inst = fixture_instances[0]
    checkout, why = find_checkout(repos, inst)
    assert checkout is not None and checkout.rev == "HEAD" and "fixture" in checkout.note
    settings = PromptSettings(context_token_budget=1600, tree_token_budget=60, max_file_tokens=700)
    built = build_prompt(inst, checkout, settings)
    golden = DATA / "golden_prompt_astropy__astropy-12907.txt"
    if os.environ.get("UPDATE_GOLDEN"):
        golden.write_text(built.text)
    assert built.text == golden.read_text()
    t = built.truncation
    assert built.source == "builder" and t["applied"] is True
    assert t["files_included"][:3] == [
        "astropy/modeling/__init__.py",
        "astropy/modeling/separable.py",
        "astropy/modeling/core.py",
    ]
    assert t["tree_paths_shown"] < t["tree_paths_total"] == 127
    assert "astropy/modeling/core.py" in t["files_cut"] and t["files_dropped"]
    assert t["context_tokens_used"] <= 1600
    assert "more paths" in built.text and "cut after" in built.text
    # deterministic: the same input builds the same prompt
    assert build_prompt(inst, checkout, settings).text == built.text
    # default budgets: a long context (well past the draft head's 2048-token training context)
    full = build_prompt(inst, checkout)
    assert full.tokens_estimate > 3000 and full.truncation["prompt_cut"] is None


def test_text_field_verbatim_and_head_tail_rule(fixture_instances: list[Instance]) -> None:
    inst = fixture_instances[1].model_copy(update={"text": "SYSTEM LINE\nfix the bug please\n"})
    built = build_prompt(inst, None)
    assert built.source == "text_field" and built.text == inst.text and built.truncation["applied"] is False

    long_text = "HEAD " + " ".join(f"w{i}" for i in range(2000)) + " TAIL"
    cut, info = head_tail_cut(long_text, 400)
    assert (
        info is not None and info["rule"] == "head75_tail25" and info["original_tokens"] == estimate_tokens(long_text)
    )
    assert cut.startswith("HEAD ") and cut.endswith(" TAIL") and "tokens removed here" in cut
    assert estimate_tokens(cut) <= 400
    assert (
        info["kept_head_tokens"] == 3 * info["kept_tail_tokens"]
        or abs(info["kept_head_tokens"] - 3 * info["kept_tail_tokens"]) <= 3
    )
    built = build_prompt(
        fixture_instances[1].model_copy(update={"text": long_text}), None, PromptSettings(max_prompt_tokens=400)
    )
    assert built.truncation["applied"] is True and built.truncation["prompt_cut"]["removed_tokens"] > 0
    assert apply_chat_template("hi", "llama3").startswith(
        "<|start_header_id|>user"
    )  # no <|begin_of_text|>: no double BOS
    assert "<|begin_of_text|>" not in apply_chat_template("hi", "llama3")


def test_builder_without_checkout_uses_issue_only(fixture_instances: list[Instance], tmp_path: Path) -> None:
    checkout, why = find_checkout(tmp_path, fixture_instances[0])
    assert checkout is None and "no git repository" in why
    built = build_prompt(fixture_instances[0], None)
    assert built.source == "builder_no_checkout" and "<code>" not in built.text and "<issue>" in built.text


@pytest.mark.parametrize(
    "answer, expect",
    [
        ("Here is the fix:\n```diff\n" + SEPARABLE_FIX + "```\nThis copies the matrix.", SEPARABLE_FIX),
        ("<patch>\n" + SEPARABLE_FIX + "</patch>", SEPARABLE_FIX),
        (SEPARABLE_FIX + "<|eot_id|>", SEPARABLE_FIX),
        ("Sure.\n\n" + SEPARABLE_FIX.split("\n", 1)[1], SEPARABLE_FIX.split("\n", 1)[1]),  # raw, starting at --- a/
        ("```python\nprint('no diff here')\n```\nThe fix is to copy the sub-matrix instead of True.", None),
        ("I would change separable.py so that nested models keep their matrix.", None),
        ("--- a/x.py\n+++ b/x.py\nno hunk header at all\n", None),
        ("", None),
    ],
)
def test_extract_patch(answer: str, expect: str | None) -> None:
    assert extract_patch(answer) == expect


def test_git_apply_check_against_the_fixture_checkout(fixture_instances: list[Instance], repos: Path) -> None:
    checkout, _ = find_checkout(repos, fixture_instances[0])
    assert checkout is not None
    ok, msg = checkout.apply_check(SEPARABLE_FIX)
    assert ok, msg
    bad = SEPARABLE_FIX.replace("-        mat[lo:, li:] = True", "-        mat[lo:, li:] = False")
    ok, msg = checkout.apply_check(bad)
    assert not ok and "patch does not apply" in msg
    # the work tree is untouched by the check
    assert "= True" in (checkout.path / "astropy/modeling/separable.py").read_text()


def test_predictions_format() -> None:
    p = prediction("astropy__astropy-12907", "chosen", SpecConfig(3, 4, 8), SEPARABLE_FIX)
    assert p == {
        "instance_id": "astropy__astropy-12907",
        "model_name_or_path": "energy-llms-swebench-chosen-3-4-8",
        "model_patch": SEPARABLE_FIX,
    }
    assert prediction("x", "no_spec", SpecConfig(0, 0, 0), None)["model_patch"] == ""
    assert model_name("no_spec", SpecConfig(0, 0, 0)) == "energy-llms-swebench-no-spec"
    assert model_name("chosen_bs16", SpecConfig(3, 2, 4)) == "energy-llms-swebench-chosen-bs16-3-2-4"


def test_parse_canned_swebench_5x_report(tmp_path: Path) -> None:
    src = DATA / "report_5x.json"
    report = json.loads(src.read_text())
    ids = ["astropy__astropy-12907", "astropy__astropy-14182", "django__django-11099", "sympy__sympy-20590"]
    graded = ev.parse_report(report, ids + ["pydata__xarray-4094", "pytest-dev__pytest-5692"], str(src))
    assert (
        graded["astropy__astropy-12907"]["status"] == "resolved"
        and graded["astropy__astropy-12907"]["resolved"] is True
    )
    assert (
        graded["astropy__astropy-14182"]["status"] == "unresolved"
        and graded["astropy__astropy-14182"]["evaluation_completed"]
    )
    assert (
        graded["django__django-11099"]["status"] == "infra_failure"
        and graded["django__django-11099"]["resolved"] is False
    )
    assert (
        graded["django__django-11099"]["failure_kind"] == "infrastructure"
        and graded["django__django-11099"]["failure_reason"]
    )
    assert graded["astropy__astropy-14182"]["failure_kind"] == "model"
    assert graded["sympy__sympy-20590"]["status"] == "empty_patch"
    # error_ids alone: neither infrastructure nor the model, as far as the report tells
    for iid in ("pydata__xarray-4094", "pytest-dev__pytest-5692"):
        assert graded[iid]["status"] == "evaluation_error" and graded[iid]["failure_kind"] == "unclassified"
    # swebench's apply-failure marker in the instance log makes it the model's failure, even when the daemon's
    # clean-up error landed in the same log and swebench listed it as an infrastructure failure
    logs = tmp_path / "logs" / "run_evaluation"
    for iid, text in (
        ("pydata__xarray-4094", ">>>>> Patch Apply Failed:\nerror: patch failed\n"),
        ("django__django-11099", ">>>>> Patch Apply Failed:\nx\nError response from daemon: gone\n"),
    ):
        (logs / "r1_chosen" / "energy-llms-swebench-chosen-3-4-8" / iid).mkdir(parents=True)
        (logs / "r1_chosen" / "energy-llms-swebench-chosen-3-4-8" / iid / "run_instance.log").write_text(text)
    (logs / "r1_chosen_bs16" / "m" / "pytest-dev__pytest-5692").mkdir(parents=True)  # another run's log: not read
    (logs / "r1_chosen_bs16" / "m" / "pytest-dev__pytest-5692" / "run_instance.log").write_text(
        ">>>>> Patch Apply Failed\n"
    )
    graded = ev.parse_report(
        report,
        ids + ["pydata__xarray-4094", "pytest-dev__pytest-5692"],
        str(src),
        run_id="r1_chosen",
        log_root=tmp_path,
    )
    assert (
        graded["pydata__xarray-4094"]["status"] == "patch_apply_failed"
        and not graded["pydata__xarray-4094"]["infra_failure"]
    )
    assert graded["django__django-11099"]["status"] == "patch_apply_failed"
    assert graded["pytest-dev__pytest-5692"]["status"] == "evaluation_error"
    assert graded["astropy__astropy-12907"]["status"] == "resolved"
    # the report is found by run id wherever swebench put it, never by exit code
    nested = tmp_path / "eval" / "chosen" / "deep"
    nested.mkdir(parents=True)
    (nested / "energy-llms-swebench-chosen-3-4-8.r1_chosen.json").write_text(src.read_text())
    (tmp_path / "eval" / "other.json").write_text(json.dumps({"something": 1}))
    assert (
        ev.find_report([tmp_path / "eval"], "r1_chosen") == nested / "energy-llms-swebench-chosen-3-4-8.r1_chosen.json"
    )
    assert ev.find_report([tmp_path / "eval"], "r2_chosen") is None


def test_evaluation_skip_path(fixture_instances: list[Instance]) -> None:
    # this venv has no swebench: the real probe says so
    ok, why = ev.availability(fixture_instances, sys.executable)
    assert not ok and "swebench is not installed" in why

    def swebench_present(argv: list[str], **_: object) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(argv, 0, "5.0.2", "")

    ok, why = ev.availability(fixture_instances, sys.executable, runner=swebench_present)
    assert not ok and "lack the swebench 5.x fields image/eval_script" in why and "never gradable" in why
    graded = ev.not_evaluated(["a"], "not evaluated: " + why)
    assert graded["a"]["status"] == "not_evaluated" and graded["a"]["resolved"] is None


def test_hf_dataset_offline_fails_with_a_fix() -> None:
    from harness.core.errors import DataError
    from pilots.swebench.instances import load_hf

    with pytest.raises(DataError) as info:
        load_hf("SWE-bench/SWE-bench_Lite", "test")  # the suite runs offline (HF_DATASETS_OFFLINE=1)
    assert "--instances FILE" in (info.value.fix or "") and "--fixture" in (info.value.fix or "")


def test_checkout_at_a_real_base_commit_and_missing_commit(fixture_instances: list[Instance], repos: Path) -> None:
    head = subprocess.run(
        ["git", "-C", str(repos / "astropy__astropy"), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    real = fixture_instances[0].model_copy(update={"base_commit": head, "fixture_kind": None})
    checkout, why = find_checkout(repos, real)
    assert checkout is not None and checkout.rev == head and why == "base_commit found"
    missing = fixture_instances[0].model_copy(update={"fixture_kind": None})
    checkout, why = find_checkout(repos, missing)
    assert checkout is None and "not in" in why and "git fetch origin" in why


def test_hints_only_when_asked(fixture_instances: list[Instance]) -> None:
    inst = fixture_instances[0].model_copy(update={"hints_text": "Look at _stack."})
    assert "<hints>" not in build_prompt(inst, None).text
    assert "<hints>\nLook at _stack.\n</hints>" in build_prompt(inst, None, PromptSettings(include_hints=True)).text


STANDIN_RUN_EVALUATION = '''
"""Stand-in for swebench.harness.run_evaluation 5.0.2 (test only; no Docker, no images). Per prediction, as the real
run_instance/make_run_report do: an empty patch is skipped (empty_patch_ids); an image not named in STANDIN_IMAGES
fails to pull (the daemon's message in run_instance.log, no report.json); a patch that `git apply --check` rejects in
STANDIN_REPO logs ">>>>> Patch Apply Failed" (no report.json); otherwise report.json says resolved when the patch is
the instance's gold patch (the stand-in's substitute for running the tests). The run report follows make_run_report:
error_ids = no report.json, infra_failure_ids = those whose log has an environment-tier signature. Exits 0."""
import argparse, json, os, pathlib, re, subprocess
p = argparse.ArgumentParser()
for a in ("--dataset_name", "--split", "--predictions_path", "--run_id", "--report_dir", "--max_workers"):
    p.add_argument(a)
p.add_argument("--instance_ids", nargs="+")
a = p.parse_args()
insts = {i["instance_id"]: i for i in map(json.loads, open(a.dataset_name)) if i}
preds = [json.loads(l) for l in open(a.predictions_path) if l.strip()]
images = set(filter(None, os.environ.get("STANDIN_IMAGES", "").split(",")))
lists = {k: set() for k in ("completed", "resolved", "unresolved", "empty_patch", "error", "infra_failure")}
reasons = {}
for x in preds:
    iid = x["instance_id"]
    if not x["model_patch"]:
        lists["empty_patch"].add(iid)
        continue
    d = pathlib.Path("logs/run_evaluation") / a.run_id / x["model_name_or_path"].replace("/", "__") / iid
    d.mkdir(parents=True, exist_ok=True)
    log = d / "run_instance.log"
    if insts[iid]["image"] not in images:
        log.write_text("Error response from daemon: pull access denied for " + str(insts[iid]["image"]) + "\\n")
    elif subprocess.run(["git", "-C", os.environ["STANDIN_REPO"], "apply", "--check", "-"],
                        input=x["model_patch"].encode(), capture_output=True).returncode != 0:
        log.write_text("Failed to apply patch to container: git apply --verbose\\n>>>>> Patch Apply Failed:\\nerror\\n")
    else:
        ok = x["model_patch"] == insts[iid].get("patch")
        (d / "report.json").write_text(json.dumps({iid: {"resolved": ok}}))
        lists["completed"].add(iid)
        lists["resolved" if ok else "unresolved"].add(iid)
        continue
    lists["error"].add(iid)
    if re.search("Error response from daemon|Could not resolve host", log.read_text()):
        lists["infra_failure"].add(iid)
        reasons[iid] = "container_unavailable"
report = {k + "_ids": sorted(v) for k, v in lists.items()}
report.update(submitted_ids=sorted(x["instance_id"] for x in preds), ambiguous_failure_ids=[], incomplete_ids=[],
              failure_reasons=reasons, schema_version=2)
out = pathlib.Path(a.report_dir)
out.mkdir(parents=True, exist_ok=True)
(out / f"{preds[0]['model_name_or_path']}.{a.run_id}.json").write_text(json.dumps(report))
'''


def standin_evaluator(tmp_path: Path, images: tuple[str, ...] = (), repo: Path | None = None) -> Path:
    """An evaluator interpreter whose ``swebench`` package is the stand-in above (no Docker): ``images`` are the ones
    it treats as present, ``repo`` the checkout its ``git apply --check`` runs in."""
    pkg = tmp_path / "standin" / "swebench"
    (pkg / "harness").mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text('__version__ = "5.0.2-standin"\n')
    (pkg / "harness" / "__init__.py").write_text("")
    (pkg / "harness" / "run_evaluation.py").write_text(STANDIN_RUN_EVALUATION)
    evaluator = tmp_path / "evaluator-python"
    evaluator.write_text(
        f"#!/bin/sh\nSTANDIN_IMAGES='{','.join(images)}' STANDIN_REPO='{repo or tmp_path}' "
        f'PYTHONPATH={tmp_path / "standin"} exec {sys.executable} "$@"\n'
    )
    evaluator.chmod(0o755)
    return evaluator


def _gradable(instances: list[Instance]) -> list[Instance]:
    return [
        i.model_copy(
            update={
                "image": f"swebench/sweb.eval.x86_64.{i.instance_id}:latest",
                "eval_script": "#!/bin/bash\n",
                "patch": SEPARABLE_FIX,
            }
        )
        for i in instances
    ]


def _grade(
    rd: Path, evaluator: Path, config: str, spec: SpecConfig, insts: list[Instance], patches: list[str | None]
) -> dict[str, dict]:
    preds = rd / "predictions" / f"{config}.jsonl"
    preds.parent.mkdir(parents=True, exist_ok=True)
    preds.write_text(
        "".join(json.dumps(prediction(i.instance_id, config, spec, p)) + "\n" for i, p in zip(insts, patches))
    )
    return ev.evaluate_config(
        run_dir=rd,
        config_name=config,
        run_id="r1",
        predictions_path=preds,
        instances=insts,
        evaluator_python=str(evaluator),
        timeout_s=60,
    )


def test_evaluation_grades_from_id_lists_not_exit_code(
    fixture_instances: list[Instance], repos: Path, tmp_path: Path
) -> None:
    insts = _gradable(fixture_instances)
    a, b = (i.instance_id for i in insts)
    evaluator = standin_evaluator(tmp_path, images=(str(insts[0].image),), repo=repos / "astropy__astropy")
    rd = tmp_path / "run"
    not_applying = SEPARABLE_FIX.replace("mat[lo:, li:] = True", "mat[lo:, li:] = Maybe")
    graded = _grade(rd, evaluator, "chosen", SpecConfig(3, 4, 8), insts, [not_applying, SEPARABLE_FIX])
    # both are in error_ids of an exit-0 run: a rejected patch is the model's failure, a missing image is not
    assert graded[a]["status"] == "patch_apply_failed" and graded[a]["failure_kind"] == "model"
    assert graded[a]["infra_failure"] is False and graded[a]["resolved"] is False
    assert graded[b]["status"] == "infra_failure" and graded[b]["failure_kind"] == "infrastructure"
    assert graded[b]["failure_reason"] == "container_unavailable" and graded[b]["resolved"] is False
    assert graded[a]["evaluation_report_path"].endswith("energy-llms-swebench-chosen-3-4-8.r1_chosen.json")
    report = json.loads(Path(graded[a]["evaluation_report_path"]).read_text())
    assert report["error_ids"] == sorted([a, b]) and report["infra_failure_ids"] == [b]
    assert "exit 0" in (rd / "logs" / "eval-chosen.log").read_text()
    # another config of the same run: its own report, never one whose run id merely starts the same
    bs16 = _grade(rd, evaluator, "chosen_bs16", SpecConfig(3, 2, 4), insts, [SEPARABLE_FIX, None])
    assert bs16[a]["status"] == "resolved" and bs16[a]["failure_kind"] is None
    assert bs16[b]["status"] == "empty_patch" and bs16[b]["failure_kind"] == "model"
    assert bs16[a]["evaluation_report_path"].endswith("energy-llms-swebench-chosen-bs16-3-2-4.r1_chosen_bs16.json")
    # without its own report, `chosen` finds none: not bs16's, whose run id merely starts with `r1_chosen`
    (rd / "eval" / "chosen" / "energy-llms-swebench-chosen-3-4-8.r1_chosen.json").unlink()
    assert (
        ev.find_report([rd / "eval" / "chosen", rd / "eval"], "r1_chosen", ["energy-llms-swebench-chosen-3-4-8"])
        is None
    )
    assert ev.find_report([rd / "eval"], "r1_chosen") is None
    assert ev.find_report([rd / "eval"], "r1_chosen_bs16") == Path(bs16[a]["evaluation_report_path"])
    ok, why = ev.availability(
        insts,
        str(evaluator),
        runner=lambda argv, **_: (
            subprocess.CompletedProcess(argv, 1, "", "no daemon")
            if argv[0] == "docker"
            else subprocess.run(argv, capture_output=True, text=True)
        ),
    )
    assert not ok and ("docker daemon not reachable: no daemon" in why or why == "docker CLI not found")


def test_gold_smoke_failure_blocks_grading(fixture_instances: list[Instance], tmp_path: Path) -> None:
    from pilots.options import PilotOptions
    from pilots.swebench.runner import SwebenchOptions, _gold_smoke

    evaluator = standin_evaluator(tmp_path)
    options = PilotOptions(suite="swebench", out=tmp_path / "run")
    sw = SwebenchOptions(evaluator_python=str(evaluator))
    ok, why = _gold_smoke(tmp_path / "run", fixture_instances, options, sw)
    assert ok and "no gold patch" in why
    with_gold = [i.model_copy(update={"patch": SEPARABLE_FIX}) for i in fixture_instances]
    ok, why = _gold_smoke(tmp_path / "run", with_gold, options, sw)
    assert not ok and why.startswith("gold smoke run did not resolve astropy__astropy-12907 (infra_failure)")
    gold = read_jsonl(tmp_path / "run" / "predictions" / "gold.jsonl")
    assert [g["model_name_or_path"] for g in gold] == ["gold", "gold"] and gold[0]["model_patch"] == SEPARABLE_FIX
