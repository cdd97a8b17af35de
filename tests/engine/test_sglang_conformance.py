"""Conformance against the real sglang 0.5.2 and 0.5.23 wheels (cached venvs, no CUDA; see tests/_sglang_helpers.py).

Every argv the harness generates (19 configs x bs 1,4,8,16 x both mem fractions, with and without --enable-metrics)
goes through sglang's own ``prepare_server_args`` (argparse + ``ServerArgs`` validation in 0.5.2; argparse in 0.5.23,
see probe.py); a flag renamed or removed in sglang fails here. The twin's parser must accept and reject the same
argv as the real parser for the flags the harness uses.
"""

from __future__ import annotations

import argparse
import contextlib
import io

import pytest
from _sglang_helpers import conformance_python, real_parse

from harness.engine.sglang_argv import build_argv
from harness.engine.spec import EngineSpec
from harness.engine.version import detect_installed, resolve_version
from harness.grid import ACTIONS, PUBLISHED_BATCH_SIZES, SpecConfig
from harness.twin.engine import sglang_args as ea

VERSIONS = ("0.5.2", "0.5.23")
MEM_FRACTIONS = (0.65, 0.55)
TWIN_PROFILE_CC = (8, 9)  # the default twin profile's GPU (Ada), what the 0.5.2 hardware checks see in the twin


def generated(version: str) -> list[tuple[SpecConfig, int, float, list[str]]]:
    """(config, bs, mem fraction, flags) of every launch a full sweep makes, as ``build_argv`` writes them."""
    out = []
    for metrics in (False, True):
        spec = EngineSpec(kind="sglang", sglang_version=version, enable_metrics=metrics)
        for cfg in ACTIONS:
            for bs in PUBLISHED_BATCH_SIZES:
                for mf in MEM_FRACTIONS:
                    argv = build_argv(spec, cfg, bs, mf, 30000)
                    assert argv[1:3] == ["-m", "sglang.launch_server"]
                    out.append((cfg, bs, mf, argv[3:]))
    return out


@pytest.fixture(scope="module", params=VERSIONS)
def real(request, tmp_path_factory):
    """(version, cases, sglang's verdicts) for every generated argv plus the variants of ``variants()``."""
    version = request.param
    # the chain `--sglang-version auto` runs: detect in the server's interpreter, then build that version's argv
    assert resolve_version("auto", "sglang", str(conformance_python(version))) == version
    cases = generated(version)
    variants = variants_of(version)
    out = real_parse(
        version, [c[3] for c in cases] + [v for _, v in variants], tmp_path_factory.mktemp(f"sglang-{version}")
    )
    assert out["version"] == version
    n = len(cases)
    return version, cases, out["results"][:n], variants, out["results"][n:], out["options"]


def test_every_generated_argv_is_accepted_by_real_sglang(real):
    version, cases, results, *_ = real
    assert len(cases) == 2 * 19 * 4 * 2
    for (cfg, bs, mf, argv), res in zip(cases, results):
        assert res["ok"], f"sglang {version} rejects {' '.join(argv)}: {res.get('error')}\n{res.get('trace', '')}"
        got = res["args"]
        graph_bs = got.get("cuda_graph_max_bs_decode", got.get("cuda_graph_max_bs"))
        assert (graph_bs, got["max_running_requests"], got["mem_fraction_static"]) == (bs, bs, mf)
        assert got["attention_backend"] == "flashinfer" and got["dtype"] == "float16"
        if cfg.is_baseline:
            assert got["speculative_algorithm"] is None
        else:
            assert str(got["speculative_algorithm"]).upper().endswith("EAGLE3")
            triple = (got["speculative_num_steps"], got["speculative_eagle_topk"], got["speculative_num_draft_tokens"])
            if res.get("resolved") and version == "0.5.2":
                assert triple == cfg.as_tuple()  # after sglang's own topk == 1 rewrite: the grid already has it
            else:
                assert triple[:2] == cfg.as_tuple()[:2]


def test_the_other_versions_flags_are_refused(real):
    """What a wrong --sglang-version did before auto-detection: each version refuses the other's graph flag."""
    version, _, _, variants, verdicts, _ = real
    by_name = dict(zip([n for n, _ in variants], verdicts))
    if version == "0.5.2":
        assert "unrecognized arguments: --cuda-graph-max-bs-decode" in by_name["new graph flag"]["error"]
    else:
        assert "ambiguous option: --cuda-graph-max-bs could match" in by_name["old graph flag"]["error"]


def test_twin_choices_are_sglangs(real):
    version, *_, options = real
    parser = ea.build_parser(version)
    twin = {opt: sorted(a.choices) if a.choices else None for a in parser._actions for opt in a.option_strings}
    flags = {a for *_, argv in generated(version) for a in argv if a.startswith("--")}
    for flag in sorted(flags):
        assert flag in options, f"sglang {version} has no {flag}"
        assert twin.get(flag) == options[flag], f"{flag}: twin choices {twin.get(flag)} != sglang's {options[flag]}"
    for flag in ("--attention-backend", "--dtype", "--speculative-algorithm"):
        assert twin[flag] == options[flag], flag


def variants_of(version: str) -> list[tuple[str, list[str]]]:
    """Edits of a generated argv that probe the twin's parser where it used to differ from sglang."""
    spec = EngineSpec(kind="sglang", sglang_version=version)
    base = build_argv(spec, SpecConfig(3, 4, 8), 4, 0.65, 30000)[3:]

    def with_value(flag: str, value: str) -> list[str]:
        out = list(base)
        out[out.index(flag) + 1] = value
        return out

    graph = "--cuda-graph-max-bs-decode" if version != "0.5.2" else "--cuda-graph-max-bs"
    return [
        ("generated", base),
        ("lower-case algorithm", with_value("--speculative-algorithm", "eagle3")),
        ("NEXTN alias", with_value("--speculative-algorithm", "NEXTN")),
        ("unknown algorithm", with_value("--speculative-algorithm", "MEDUSA")),
        ("triton backend", with_value("--attention-backend", "triton")),
        ("unknown backend", with_value("--attention-backend", "flash")),
        ("bad dtype", with_value("--dtype", "bf16")),
        ("old graph flag", [a if a != graph else "--cuda-graph-max-bs" for a in base]),
        ("new graph flag", [a if a != graph else "--cuda-graph-max-bs-decode" for a in base]),
        ("tp alias", base + ["--tp", "1"]),
        ("tp-size", base + ["--tp-size", "1"]),
        ("model alias", ["--model", *base[1:]]),
        ("draft alias", [a if a != "--speculative-draft-model-path" else "--speculative-draft-model" for a in base]),
        ("trtllm_mha on this GPU", with_value("--attention-backend", "trtllm_mha")),
        ("non-integer bs", with_value(graph, "4.5")),
        ("unknown flag", base + ["--no-such-flag"]),
    ]


def twin_verdict(version: str, argv: list[str], full: bool) -> tuple[bool, str]:
    """Does the twin engine accept ``argv`` (its argparse; with ``full`` also its launch-time rules)?"""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            args = ea.build_parser(version).parse_args([*argv, "--twin-gpu", "http://127.0.0.1:1"])
        if full:
            ea.resolve_spec(args)
            ea.check_backend_hardware(args.attention_backend, TWIN_PROFILE_CC)
    except SystemExit:
        return False, err.getvalue().strip().splitlines()[-1]
    except (ea.SpecRejected, argparse.ArgumentError) as exc:
        return False, str(exc)
    return True, ""


def test_twin_parser_accepts_exactly_what_sglang_accepts(real):
    version, _, _, variants, verdicts, _ = real
    disagree = []
    for (name, argv), res in zip(variants, verdicts):
        full = version == "0.5.2"  # 0.5.23: only argparse runs on the real side (probe.py), so compare argparse only
        twin_ok, twin_err = twin_verdict(version, argv, full)
        if twin_ok != res["ok"]:
            disagree.append(
                f"{name}: sglang {'accepts' if res['ok'] else 'rejects: ' + res['error']}, "
                f"twin {'accepts' if twin_ok else 'rejects: ' + twin_err}"
            )
    assert not disagree, f"sglang {version} vs twin:\n" + "\n".join(disagree)
    by_name = dict(zip([n for n, _ in variants], verdicts))
    assert by_name["generated"]["ok"] and not by_name["unknown flag"]["ok"]  # the comparison has teeth both ways


def test_auto_detection_reads_the_servers_interpreter(real):
    version = real[0]
    assert detect_installed(str(conformance_python(version))) == version
