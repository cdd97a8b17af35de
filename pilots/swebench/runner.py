"""``harness pilot --suite swebench``: one patch-generation request per instance per config, telemetry per request.

Outputs under RUN_DIR (besides the shared ones written by ``pilots.runner.PilotRunner``): ``prompts/<id>.txt`` and
``prompts/index.jsonl`` (source, token estimate, files, truncation), ``outputs/<config>/<id>.txt`` (raw answers),
``predictions/<config>.jsonl`` (swebench format), ``reports/summary.json`` and ``eval/`` when graded.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from harness.core.clocks import to_iso, wall_ns
from harness.core.errors import ServiceUnavailableError
from harness.core.jsonl import write_json_atomic, write_jsonl_atomic
from pilots.console import pilot_console, summary_table
from pilots.options import PilotOptions
from pilots.runner import ConfigRun, PilotResult, PilotRunner
from pilots.swebench import evaluate as ev
from pilots.swebench.checkout import Checkout, build_fixture_repo, find_checkout
from pilots.swebench.instances import (
    DEFAULT_DATASET,
    DEFAULT_LIMIT,
    DEFAULT_SPLIT,
    Instance,
    fixture_path,
    load_file,
    load_hf,
    select,
)
from pilots.swebench.patches import extract_patch, model_name, prediction
from pilots.swebench.prompt import BuiltPrompt, PromptSettings, apply_chat_template, build_prompt
from pilots.telemetry import energy_from_window, gpu_metrics
from pilots.trial import PilotTrial

SCHEMA_VERSION = "swebench-pilot-v2"
SPEED_LABEL = "end-to-end: completion tokens / request time (prefill, decode and HTTP included)"


class SwebenchOptions(BaseModel):
    """Suite flags of ``harness pilot --suite swebench`` (``--key value``; booleans as ``--flag``/``--no-flag``)."""

    model_config = ConfigDict(extra="forbid")

    instances: Path | None = Field(default=None, description="JSON/JSONL/parquet with SWE-bench fields (else HF)")
    dataset: str = Field(default=DEFAULT_DATASET, description="HF dataset when no --instances/--fixture")
    split: str = Field(default=DEFAULT_SPLIT, description="dataset split")
    limit: int | None = Field(default=DEFAULT_LIMIT, ge=1, description="instances (first repo with that many)")
    instance_ids: list[str] = Field(default_factory=list, description="exact instance ids (comma-separated)")
    repo: str | None = Field(default=None, description="restrict the default selection to one repo")
    repos_dir: Path | None = Field(default=None, description="checkouts as <dir>/<owner>__<name>")
    max_new_tokens: int = Field(default=768, ge=1, description="max new tokens per request (published 768)")
    context_token_budget: int = Field(default=6000, ge=0, description="tokens for the code section")
    max_prompt_tokens: int = Field(default=8192, ge=64, description="whole-prompt cap (head/tail rule)")
    max_file_tokens: int = Field(default=2500, ge=16, description="per-file cap in the code section")
    tree_token_budget: int = Field(default=1200, ge=0, description="tokens for the file tree")
    include_hints: bool = Field(default=False, description="add hints_text (the official text datasets omit it)")
    chat_template: Literal["llama3", "none"] = Field(default="llama3", description="prompt wrapping for /generate")
    evaluate: bool = Field(default=True, description="grade with swebench when Docker and images are available")
    evaluator_python: str | None = Field(default=None, description="python with swebench 5.x installed")
    gold_smoke: bool = Field(default=True, description="grade the gold patches first; skip grading if they fail")


SUITE_OPTIONS = SwebenchOptions


def load_instances(options: PilotOptions, sw: SwebenchOptions) -> list[Instance]:
    if sw.instances is not None:
        pool = load_file(sw.instances)
    elif options.fixture:
        pool = load_file(fixture_path())
    else:
        pool = load_hf(sw.dataset, sw.split)
    return select(pool, limit=sw.limit, instance_ids=sw.instance_ids or None, repo=sw.repo)


def prepare_prompts(
    run_dir: Path, instances: list[Instance], options: PilotOptions, sw: SwebenchOptions
) -> dict[str, tuple[BuiltPrompt, Checkout | None, str]]:
    """Build every instance's prompt once (prompts do not depend on the config) and write them under prompts/."""
    repos_dir = sw.repos_dir
    if repos_dir is None and options.fixture:
        repos_dir = run_dir / "repositories"
        build_fixture_repo(repos_dir)
    settings = PromptSettings(
        context_token_budget=sw.context_token_budget,
        max_prompt_tokens=sw.max_prompt_tokens,
        max_file_tokens=sw.max_file_tokens,
        tree_token_budget=sw.tree_token_budget,
        include_hints=sw.include_hints,
        chat_template=sw.chat_template,
    )
    out: dict[str, tuple[BuiltPrompt, Checkout | None, str]] = {}
    index = []
    for inst in instances:
        checkout, why = (None, "text field used verbatim") if inst.text else find_checkout(repos_dir, inst)
        built = build_prompt(inst, checkout, settings)
        out[inst.instance_id] = (built, checkout, why)
        p = run_dir / "prompts" / f"{inst.instance_id}.txt"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(built.text)
        index.append(
            {
                "instance_id": inst.instance_id,
                "source": built.source,
                "tokens_estimate": built.tokens_estimate,
                "checkout": str(checkout.path) if checkout else None,
                "checkout_rev": checkout.rev if checkout else None,
                "checkout_note": checkout.note if checkout else why,
                "files": built.files,
                "truncation": built.truncation,
                "settings": settings.model_dump(),
            }
        )
    write_jsonl_atomic(run_dir / "prompts" / "index.jsonl", index)
    return out


def _request_trial(
    run: ConfigRun, inst: Instance, built: BuiltPrompt, checkout: Checkout | None, why: str, sw: SwebenchOptions
) -> PilotTrial:
    o = run.options
    text = apply_chat_template(built.text, sw.chat_template)
    m = run.measure(
        lambda: run.server.client.generate(
            text,
            max_new_tokens=sw.max_new_tokens,
            temperature=0.0,
            ignore_eos=False,
            stream=True,
            rid=f"{inst.instance_id}-{run.name}",
            timeout=o.request_timeout,
        )
    )
    res = m.value
    energy, power = energy_from_window(m.window)
    status = "completed" if m.error is None and res is not None else "request_error"
    answer = res.text if res is not None else ""
    out_path = run.run_dir / "outputs" / run.name / f"{inst.instance_id}.txt"
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(answer)
    patch = extract_patch(answer)
    applied: bool | None = None
    patch_error = None
    if status != "completed":
        patch_status = "request_failed"
    elif patch is None:
        patch_status = "no_patch"
    elif checkout is None:
        patch_status = "model_unchecked"
    else:
        applied, patch_error = checkout.apply_check(patch)
        patch_status = "model_valid" if applied else "model_invalid"
    completion = res.completion_tokens if res is not None else None
    elapsed = m.elapsed_s
    before, after = gpu_metrics(m.before), gpu_metrics(m.after)
    record: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "run_id": o.run_id,
        "timestamp": to_iso(wall_ns()),
        "config": run.name,
        "steps": run.config.steps,
        "topk": run.config.topk,
        "num_draft_tokens": run.config.draft_tokens,
        "instance_id": inst.instance_id,
        "repo": inst.repo,
        "base_commit": inst.base_commit,
        "checkout_rev": checkout.rev if checkout else None,
        "checkout_note": checkout.note if checkout else why,
        "fixture_kind": inst.fixture_kind,
        "official_text": inst.official_text,
        "target_model": o.target_model,
        "draft_model": None if run.config.is_baseline else o.draft_model,
        "engine": o.engine,
        "sglang_version": o.sglang_version,
        "server_batch_size": o.server_batch_size,
        "effective_concurrency": 1,
        "temperature": 0.0,
        "top_p": 1.0,
        "max_new_tokens": sw.max_new_tokens,
        "chat_template": sw.chat_template,
        "status": status,
        "error_type": type(m.error).__name__ if m.error else None,
        "error": str(m.error) if m.error else None,
        "prompt_source": built.source,
        "prompt_tokens_estimate": built.tokens_estimate,
        "prompt_truncation": built.truncation,
        "prompt_tokens": res.prompt_tokens if res is not None else None,
        "completion_tokens": completion,
        "total_tokens": (res.prompt_tokens or 0) + completion if res is not None and completion is not None else None,
        "token_count_source": "server_meta_info" if res is not None else None,
        "model_elapsed_s": elapsed,
        "model_elapsed_ms": elapsed * 1000.0,
        "client_latency_s": res.client_latency_s if res is not None else None,
        "server_e2e_latency_s": res.e2e_latency_s if res is not None else None,
        "output_tokens_per_s": (completion / elapsed) if completion and elapsed else None,
        "output_tokens_per_s_meaning": SPEED_LABEL,
        "energy_joules": energy,
        "avg_power_watts": power,
        "joules_per_output_token": (energy / completion) if energy is not None and completion else None,
        "energy_source": m.window.energy_method if energy is not None else "unavailable",
        "window_start_ns": m.start_ns,
        "window_end_ns": m.end_ns,
        "window_valid": m.window.valid,
        "window_reasons": list(m.window.reasons),
        "window": m.window.model_dump(mode="json"),
        "gpu_metrics_before": before,
        "gpu_metrics_after": after,
        "per_request_accept_length": res.accept_length if res is not None else None,
        "spec_verify_ct": res.spec_verify_ct if res is not None else None,
        "finish_reason": res.finish_reason if res is not None else None,
        "answer_path": str(out_path.relative_to(run.run_dir)),
        "patch_generated": patch is not None,
        "patch_applied": applied,
        "patch_status": patch_status,
        "patch_error": patch_error,
        "model_patch": patch,
        "model_name_or_path": model_name(run.name, run.config),
        "tests_ran": False,
        "resolved": None,
    }
    return run.trial(
        inst.instance_id,
        status=status,
        success=None,
        start_ns=m.start_ns,
        end_ns=m.end_ns,
        elapsed_s=elapsed,
        prompt_tokens=record["prompt_tokens"],
        completion_tokens=completion,
        accept_length=res.accept_length if res is not None else None,
        accept_length_source="per_request" if res is not None and res.accept_length is not None else None,
        energy_joules=energy,
        avg_power_watts=power,
        window=m.window,
        before=m.before,
        after=m.after,
        telemetry_mode="snapshots",
        record=record,
        note=f"one patch-generation request ({built.source} prompt, ~{built.tokens_estimate} tokens); "
        "end-to-end request time, not controlled decode throughput",
    )


def run(options: PilotOptions, extra: SwebenchOptions | None = None) -> PilotResult:
    """Run the SWE-bench pilot; returns the result (outputs are under ``options.run_dir``)."""
    sw = extra if isinstance(extra, SwebenchOptions) else SwebenchOptions()
    console = pilot_console(stderr=True)
    run_dir = options.run_dir
    run_dir.mkdir(parents=True, exist_ok=True)
    instances = load_instances(options, sw)
    prompts = prepare_prompts(run_dir, instances, options, sw)
    console.print(
        f"[bold]swebench pilot[/]: {len(instances)} instances x {len(options.selected_configs())} configs -> {run_dir}"
    )

    def per_config(run: ConfigRun) -> list[PilotTrial]:
        trials = []
        for inst in instances:
            built, checkout, why = prompts[inst.instance_id]
            t = _request_trial(run, inst, built, checkout, why, sw)
            console.print(
                f"  {run.name} {inst.instance_id}: {t.status}, {t.completion_tokens} tokens, "
                f"{t.record['patch_status']}, window {'valid' if t.window_valid else 'INVALID'}"
            )
            trials.append(t)
        return trials

    suite_meta = {
        "schema_version": SCHEMA_VERSION,
        "suite_options": sw.model_dump(mode="json"),
        "instances": [i.manifest_entry() for i in instances],
        "instances_source": str(sw.instances)
        if sw.instances
        else ("fixture" if options.fixture else f"{sw.dataset}[{sw.split}]"),
        "fixture_note": "project-written offline instances and repository; not official SWE-bench text"
        if options.fixture
        else None,
        "speed_meaning": SPEED_LABEL,
    }
    runner = PilotRunner(options, suite_meta=suite_meta, console=console)
    result = runner.run(per_config, finalize=lambda r: _finalize(r, instances, options, sw))
    _print_summary(result, pilot_console())
    if result.trials and not any(t.status == "completed" for t in result.trials):
        raise ServiceUnavailableError(
            f"no SWE-bench request completed ({result.trials[0].record.get('error')})",
            fix=f"see the server logs under {run_dir / 'logs'}; every output so far is in {run_dir}",
        )
    return result


def _finalize(result: PilotResult, instances: list[Instance], options: PilotOptions, sw: SwebenchOptions) -> None:
    """Predictions per config, optional grading, the summary; runs before the shared reports are written."""
    rd = result.run_dir
    ids = [i.instance_id for i in instances]
    pred_paths: dict[str, Path] = {}
    for oc in result.outcomes:
        preds = [prediction(t.task_id, oc.name, oc.config, t.record.get("model_patch")) for t in oc.trials]
        pred_paths[oc.name] = rd / "predictions" / f"{oc.name}.jsonl"
        write_jsonl_atomic(pred_paths[oc.name], preds)
    if not sw.evaluate:
        ok, reason = False, "not evaluated: disabled with --no-evaluate"
    else:
        ok, why = ev.availability(instances, sw.evaluator_python)
        reason = "" if ok else f"not evaluated: {why}"
        if ok and sw.gold_smoke:
            ok, why = _gold_smoke(rd, instances, options, sw)
            reason = "" if ok else f"not evaluated: {why}"
            result.manifest.suite_meta["gold_smoke"] = why or "all gold patches resolved"
    grades: dict[str, dict[str, dict[str, Any]]] = {}
    for oc in result.outcomes:
        if ok and oc.trials:
            grades[oc.name] = ev.evaluate_config(
                run_dir=rd,
                config_name=oc.name,
                run_id=options.run_id,
                predictions_path=pred_paths[oc.name],
                instances=[i for i in instances if i.instance_id in {t.task_id for t in oc.trials}],
                evaluator_python=sw.evaluator_python,
            )
        else:
            grades[oc.name] = ev.not_evaluated(ids, reason or "not evaluated: no trials")
        for t in oc.trials:
            t.evaluation = grades[oc.name].get(t.task_id)
            resolved = (t.evaluation or {}).get("resolved")
            t.success = resolved if isinstance(resolved, bool) else None
            t.record["resolved"] = t.success
    for row in result.rows:  # the rows were built before grading: carry the verdict over
        key = (row.get("pilot_config_name"), row.get("pilot_task"))
        for oc in result.outcomes:
            for t in oc.trials:
                if (t.config_name, t.task_id) == key:
                    row["pilot_success"] = t.success
    configs: dict[str, Any] = {}
    for oc in result.outcomes:
        ts = oc.trials
        evaluated = [t for t in ts if (t.evaluation or {}).get("status") not in (None, "not_evaluated")]
        configs[oc.name] = {
            "config": oc.config.as_list(),
            "model_name_or_path": model_name(oc.name, oc.config),
            "server_status": oc.summary.get("status"),
            "server_error": oc.summary.get("error"),
            "instances": len(ts),
            "evaluated_instances": len(evaluated),
            "resolved": sum(1 for t in ts if t.success),
            "resolved_rate": (sum(1 for t in ts if t.success) / len(evaluated)) if evaluated else None,
            "evaluation": "graded from the swebench report id lists" if evaluated else (reason or "not evaluated"),
            "failures": {
                k: sum(1 for t in evaluated if (t.evaluation or {}).get("failure_kind") == k)
                for k in ("model", "infrastructure", "ambiguous", "unclassified")
            },
            "patch_status": {
                s: sum(1 for t in ts if t.record.get("patch_status") == s)
                for s in ("model_valid", "model_invalid", "model_unchecked", "no_patch", "request_failed")
            },
            "mean_output_tokens_per_s": oc.summary.get("mean_output_tokens_per_s"),
            "mean_energy_joules": oc.summary.get("mean_energy_joules"),
            "mean_avg_power_watts": oc.summary.get("mean_avg_power_watts"),
            "mean_accept_length": oc.summary.get("mean_accept_length"),
            "server_avg_spec_accept_length": oc.summary.get("avg_spec_accept_length"),
            "valid_windows": oc.summary.get("valid_windows"),
        }
    write_json_atomic(
        rd / "reports" / "summary.json",
        {
            "schema_version": SCHEMA_VERSION,
            "run_id": options.run_id,
            "suite": "swebench",
            "instances_source": result.manifest.suite_meta.get("instances_source"),
            "subset_size": len(instances),
            "evaluation": reason or "graded",
            "speed_meaning": SPEED_LABEL,
            "configs": configs,
        },
    )
    result.manifest.suite_meta["evaluation"] = reason or "graded"


def _gold_smoke(rd: Path, instances: list[Instance], options: PilotOptions, sw: SwebenchOptions) -> tuple[bool, str]:
    """Grade the instances' gold patches first (as the published pilot did); graded from the report's id lists."""
    if not all(i.patch for i in instances):
        return True, "gold smoke skipped: instances carry no gold patch"
    path = rd / "predictions" / "gold.jsonl"
    write_jsonl_atomic(
        path, [{"instance_id": i.instance_id, "model_name_or_path": "gold", "model_patch": i.patch} for i in instances]
    )
    grades = ev.evaluate_config(
        run_dir=rd,
        config_name="gold_smoke",
        run_id=options.run_id,
        predictions_path=path,
        instances=instances,
        evaluator_python=sw.evaluator_python,
    )
    bad = {iid: g.get("status") for iid, g in grades.items() if not g.get("resolved")}
    if bad:
        return False, "gold smoke run did not resolve " + ", ".join(f"{k} ({v})" for k, v in bad.items())
    return True, ""


def _print_summary(result: PilotResult, console: Any) -> None:
    rows = []
    for t in result.trials:
        e = t.evaluation or {}
        rows.append(
            [
                t.config_name,
                t.task_id,
                e.get("status"),
                t.record.get("patch_status"),
                t.output_tokens_per_s,
                t.completion_tokens,
                t.elapsed_s,
                t.accept_length,
                t.energy_joules,
                t.avg_power_watts,
                (t.gpu_metrics_after or {}).get("gpu_utilization_percent"),
                t.window_valid,
            ]
        )
    console.print(
        summary_table(
            "SWE-bench pilot (tok/s end to end; accept length per request where exposed)",
            [
                "config",
                "instance",
                "evaluation",
                "patch",
                "tok/s",
                "output tokens",
                "duration s",
                "accept len",
                "energy J",
                "avg power W",
                "GPU util %",
                "window ok",
            ],
            rows,
        )
    )
    for oc in result.outcomes:
        if oc.summary.get("status") == "server_start_error":
            console.print(f"[red]{oc.name}: server failed to start[/]: {oc.summary.get('error')}")
    reasons = {str((t.evaluation or {}).get("reason")) for t in result.trials if (t.evaluation or {}).get("reason")}
    for r in sorted(reasons):
        console.print(f"[yellow]{r}[/]")
    console.print(f"outputs: {result.run_dir}", markup=False)
