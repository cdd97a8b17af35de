"""SWE-bench pilot: instances, prompt building (golden + truncation), patches, predictions, grading, skip path."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.errors import MissingFileError, UsageError
from harness.jsonl import read_jsonl
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
        for key in ("repo", "instance_id", "base_commit", "problem_statement", "hints_text", "version",
                    "FAIL_TO_PASS", "PASS_TO_PASS", "environment_setup_commit", "patch", "test_patch"):
            assert key in rec
        assert rec["fixture_kind"] == "project_written_offline" and rec["official_text"] is False
        assert rec["patch"] is None and rec["eval_script"] is None  # nothing we cannot reproduce honestly
    chosen = select(fixture_instances)
    assert [i.instance_id for i in chosen] == ["astropy__astropy-12907", "astropy__astropy-14182"]
    assert [i.instance_id for i in select(fixture_instances, instance_ids=["astropy__astropy-14182"])] == ["astropy__astropy-14182"]
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
    assert t["files_included"][:3] == ["astropy/modeling/__init__.py", "astropy/modeling/separable.py", "astropy/modeling/core.py"]
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
    assert info is not None and info["rule"] == "head75_tail25" and info["original_tokens"] == estimate_tokens(long_text)
    assert cut.startswith("HEAD ") and cut.endswith(" TAIL") and "tokens removed here" in cut
    assert estimate_tokens(cut) <= 400
    assert info["kept_head_tokens"] == 3 * info["kept_tail_tokens"] or abs(info["kept_head_tokens"] - 3 * info["kept_tail_tokens"]) <= 3
    built = build_prompt(fixture_instances[1].model_copy(update={"text": long_text}), None, PromptSettings(max_prompt_tokens=400))
    assert built.truncation["applied"] is True and built.truncation["prompt_cut"]["removed_tokens"] > 0
    assert apply_chat_template("hi", "llama3").startswith("<|start_header_id|>user")  # no <|begin_of_text|>: no double BOS
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
    assert p == {"instance_id": "astropy__astropy-12907", "model_name_or_path": "energy-llms-swebench-chosen-3-4-8",
                 "model_patch": SEPARABLE_FIX}
    assert prediction("x", "no_spec", SpecConfig(0, 0, 0), None)["model_patch"] == ""
    assert model_name("no_spec", SpecConfig(0, 0, 0)) == "energy-llms-swebench-no-spec"
    assert model_name("chosen_bs16", SpecConfig(3, 2, 4)) == "energy-llms-swebench-chosen-bs16-3-2-4"


def test_parse_canned_swebench_5x_report(tmp_path: Path) -> None:
    src = DATA / "report_5x.json"
    report = json.loads(src.read_text())
    ids = ["astropy__astropy-12907", "astropy__astropy-14182", "django__django-11099", "sympy__sympy-20590"]
    graded = ev.parse_report(report, ids, str(src))
    assert graded["astropy__astropy-12907"]["status"] == "resolved" and graded["astropy__astropy-12907"]["resolved"] is True
    assert graded["astropy__astropy-14182"]["status"] == "unresolved" and graded["astropy__astropy-14182"]["evaluation_completed"]
    assert graded["django__django-11099"]["status"] == "infra_failure" and graded["django__django-11099"]["resolved"] is False
    assert graded["sympy__sympy-20590"]["status"] == "empty_patch"
    # the report is found by run id wherever swebench put it, never by exit code
    nested = tmp_path / "eval" / "chosen" / "deep"
    nested.mkdir(parents=True)
    (nested / "energy-llms-swebench-chosen-3-4-8.r1_chosen.json").write_text(src.read_text())
    (tmp_path / "eval" / "other.json").write_text(json.dumps({"something": 1}))
    assert ev.find_report([tmp_path / "eval"], "r1_chosen") == nested / "energy-llms-swebench-chosen-3-4-8.r1_chosen.json"
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
    from harness.errors import DataError
    from pilots.swebench.instances import load_hf

    with pytest.raises(DataError) as info:
        load_hf("SWE-bench/SWE-bench_Lite", "test")  # the suite runs offline (HF_DATASETS_OFFLINE=1)
    assert "--instances FILE" in (info.value.fix or "") and "--fixture" in (info.value.fix or "")


def test_checkout_at_a_real_base_commit_and_missing_commit(fixture_instances: list[Instance], repos: Path) -> None:
    head = subprocess.run(["git", "-C", str(repos / "astropy__astropy"), "rev-parse", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()
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
"""Stand-in for swebench.harness.run_evaluation (test only): writes a 5.x run report and exits 0 like the real one
does when image pulls fail. Empty patches go to empty_patch_ids, every other instance to error_ids."""
import argparse, json, pathlib
p = argparse.ArgumentParser()
for a in ("--dataset_name", "--split", "--predictions_path", "--run_id", "--report_dir", "--max_workers"):
    p.add_argument(a)
p.add_argument("--instance_ids", nargs="+")
a = p.parse_args()
preds = [json.loads(l) for l in open(a.predictions_path) if l.strip()]
empty = [x["instance_id"] for x in preds if not x["model_patch"]]
err = [x["instance_id"] for x in preds if x["model_patch"]]
report = {"submitted_ids": a.instance_ids, "completed_ids": [], "resolved_ids": [], "unresolved_ids": [],
          "empty_patch_ids": empty, "error_ids": err, "infra_failure_ids": err, "schema_version": 2}
out = pathlib.Path(a.report_dir)
out.mkdir(parents=True, exist_ok=True)
(out / f"{preds[0]['model_name_or_path']}.{a.run_id}.json").write_text(json.dumps(report))
'''


def standin_evaluator(tmp_path: Path) -> Path:
    """An evaluator interpreter whose ``swebench`` package is the stand-in above (no Docker, no images)."""
    pkg = tmp_path / "standin" / "swebench"
    (pkg / "harness").mkdir(parents=True)
    (pkg / "__init__.py").write_text('__version__ = "5.0.2-standin"\n')
    (pkg / "harness" / "__init__.py").write_text("")
    (pkg / "harness" / "run_evaluation.py").write_text(STANDIN_RUN_EVALUATION)
    evaluator = tmp_path / "evaluator-python"
    evaluator.write_text(f"#!/bin/sh\nPYTHONPATH={tmp_path / 'standin'} exec {sys.executable} \"$@\"\n")
    evaluator.chmod(0o755)
    return evaluator


def test_evaluation_grades_from_id_lists_not_exit_code(fixture_instances: list[Instance], tmp_path: Path) -> None:
    evaluator = standin_evaluator(tmp_path)
    insts = [i.model_copy(update={"image": f"swebench/sweb.eval.x86_64.{i.instance_id}:latest", "eval_script": "#!/bin/bash\n"})
             for i in fixture_instances]
    rd = tmp_path / "run"
    preds = rd / "predictions" / "chosen.jsonl"
    preds.parent.mkdir(parents=True)
    preds.write_text("".join(json.dumps(prediction(i.instance_id, "chosen", SpecConfig(3, 4, 8), SEPARABLE_FIX if n == 0 else None)) + "\n"
                             for n, i in enumerate(insts)))
    graded = ev.evaluate_config(run_dir=rd, config_name="chosen", run_id="r1", predictions_path=preds, instances=insts,
                                evaluator_python=str(evaluator), timeout_s=60)
    first, second = (graded[i.instance_id] for i in insts)
    assert first["status"] == "infra_failure" and first["resolved"] is False  # exit code 0, yet not graded as done
    assert second["status"] == "empty_patch"
    assert first["evaluation_report_path"].endswith("energy-llms-swebench-chosen-3-4-8.r1_chosen.json")
    assert "exit 0" in (rd / "logs" / "eval-chosen.log").read_text()
    ok, why = ev.availability(insts, str(evaluator), runner=lambda argv, **_: subprocess.CompletedProcess(argv, 1, "", "no daemon")
                              if argv[0] == "docker" else subprocess.run(argv, capture_output=True, text=True))
    assert not ok and ("docker daemon not reachable: no daemon" in why or why == "docker CLI not found")


def test_gold_smoke_failure_blocks_grading(fixture_instances: list[Instance], tmp_path: Path) -> None:
    from pilots.common import PilotOptions
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
