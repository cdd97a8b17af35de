"""The command line of one inference server: the published sglang flags per config and per sglang version.

Real sglang runs as ``python -m sglang.launch_server <flags>``; the twin runs as ``python -m harness twin engine
<the same flags> --twin-gpu URL --emulate-version V``. Version differences in flags live here only.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from harness.core.errors import UsageError
from harness.engine.spec import EngineSpec
from harness.engine.version import TWIN_VERSIONS, version_tuple
from harness.grid import SpecConfig

SUPPORTED_VERSIONS: tuple[str, ...] = TWIN_VERSIONS
"""The versions checked end to end (conformance test against the real wheels, twin emulation)."""
ENGINE_ENV: dict[str, str] = {"SGLANG_RECORD_STEP_TIME": "1", "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1"}
CPU_ENGINE_ENV: dict[str, str] = {"SGLANG_USE_CPU_ENGINE": "1"}
"""sglang's CPU engine is off without it (``is_cpu()`` reads it), whatever ``--device`` says."""
TWIN_FAULTS: tuple[str, ...] = ("oom", "crash", "runaway", "slow-health", "http500")


def cuda_graph_flag(version: str) -> str:
    """``--cuda-graph-max-bs`` up to 0.5.18 (an alias from 0.5.14), only ``--cuda-graph-max-bs-decode`` from 0.5.20."""
    return "--cuda-graph-max-bs-decode" if version_tuple(version) >= (0, 5, 20) else "--cuda-graph-max-bs"


FAULT_FIX = "--twin-fault NAME, NAME@BS or NAME@BS/s:k:d (BS an integer or *), NAME one of: " + ", ".join(TWIN_FAULTS)


def parse_twin_fault(item: str) -> tuple[str, int | None, SpecConfig | None]:
    """``"crash@16/3:4:8"`` -> ("crash", 16, SpecConfig(3, 4, 8)); a bad item is a UsageError naming --twin-fault."""
    from harness.grid import parse_config

    name, at, where = item.partition("@")
    if name not in TWIN_FAULTS:
        raise UsageError(f"--twin-fault {item!r}: unknown twin fault {name!r}", fix=FAULT_FIX)
    bs_text, _, cfg_text = where.partition("/")
    if at and not bs_text:
        raise UsageError(f"--twin-fault {item!r}: nothing after '@'", fix=FAULT_FIX)
    bs: int | None = None
    if bs_text and bs_text != "*":
        if not bs_text.isdigit() or int(bs_text) < 1:
            raise UsageError(
                f"--twin-fault {item!r}: batch size {bs_text!r} is not a positive integer or *", fix=FAULT_FIX
            )
        bs = int(bs_text)
    cfg = None
    if cfg_text:
        try:
            cfg = parse_config(cfg_text.replace(",", ":"))
        except UsageError as exc:
            raise UsageError(f"--twin-fault {item!r}: {exc.message}", fix=FAULT_FIX) from None
    return name, bs, cfg


def faults_for(spec: EngineSpec, config: SpecConfig, batch_size: int) -> list[str]:
    """The twin faults that apply to one (config, batch size) launch."""
    out: list[str] = []
    for item in spec.twin_faults:
        name, bs, cfg = parse_twin_fault(item)
        if bs is not None and bs != batch_size:
            continue
        if cfg is not None and cfg != config:
            continue
        if name not in out:
            out.append(name)
    return out


def build_argv(spec: EngineSpec, config: SpecConfig, batch_size: int, mem_fraction: float, port: int) -> list[str]:
    """The full argv of one server for ``config`` serving up to ``batch_size`` concurrent requests: sglang's
    ``launch_server``, ``vllm serve``, or the twin with the flags of the engine it emulates."""
    if batch_size < 1:
        raise UsageError(f"batch size must be >= 1, got {batch_size}", fix="use e.g. --batch-sizes 1,4,8,16")
    if not 0.0 < mem_fraction < 1.0:
        raise UsageError(
            f"mem fraction must be in (0, 1), got {mem_fraction}", fix="use e.g. --mem-fractions 0.65,0.55"
        )
    if spec.api == "vllm":
        from harness.engine.vllm_argv import serve_command, vllm_flags

        flags = vllm_flags(spec, config, batch_size, mem_fraction, port)
        if spec.kind == "vllm":
            return [spec.python, *serve_command(spec.device), *flags]
        return _twin_argv(
            spec, config, batch_size, flags, ["--emulate", "vllm", "--emulate-version", spec.vllm_version]
        )
    flags = sglang_flags(spec, config, batch_size, mem_fraction, port)
    if spec.kind == "sglang":
        return [spec.python, "-m", "sglang.launch_server", *flags]
    return _twin_argv(spec, config, batch_size, flags, ["--emulate-version", spec.sglang_version])


def _twin_argv(
    spec: EngineSpec, config: SpecConfig, batch_size: int, flags: list[str], emulate: list[str]
) -> list[str]:
    """``harness twin engine`` with the emulated engine's ``flags`` and the twin's own."""
    if not spec.twin_gpu_url:
        raise UsageError("the twin engine needs a twin GPU URL", fix="pass --twin-gpu URL or let the harness start one")
    argv = [spec.python, "-m", "harness", "twin", "engine", *flags, "--twin-gpu", spec.twin_gpu_url, *emulate]
    if spec.twin_seed is not None:
        argv += ["--twin-seed", str(spec.twin_seed)]
    faults = faults_for(spec, config, batch_size)
    if faults:
        argv += ["--twin-fault", ",".join(faults)]
    return argv


def sglang_flags(spec: EngineSpec, config: SpecConfig, batch_size: int, mem_fraction: float, port: int) -> list[str]:
    """sglang ``launch_server`` flags of one server (per sglang version)."""
    flags = [
        "--model-path",
        spec.model_path,
        "--host",
        spec.host,
        "--port",
        str(port),
        "--dtype",
        spec.dtype,
        "--mem-fraction-static",
        f"{mem_fraction:g}",
        cuda_graph_flag(spec.sglang_version),
        str(batch_size),
        "--max-running-requests",
        str(batch_size),
        "--log-level",
        spec.log_level,
    ]
    if spec.attention_backend:
        flags += ["--attention-backend", spec.attention_backend]
    if spec.device == "cpu":
        flags += ["--device", "cpu"]
    if spec.decode_log_interval is not None:
        flags += ["--decode-log-interval", str(spec.decode_log_interval)]
    if not config.is_baseline:
        flags += [
            "--speculative-algorithm",
            "EAGLE3",
            "--speculative-draft-model-path",
            spec.draft_model_path,
            "--speculative-num-steps",
            str(config.steps),
            "--speculative-eagle-topk",
            str(config.topk),
            "--speculative-num-draft-tokens",
            str(config.draft_tokens),
        ]
    if spec.enable_metrics:
        flags.append("--enable-metrics")
    return flags + list(spec.extra_args)


def engine_env(spec: EngineSpec, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a server process: ``base`` (default: none) plus the engine's variables (sglang: the
    published ones; vLLM: dev mode for the cache flush)."""
    env = dict(base or {})
    if spec.api == "vllm":
        from harness.engine.vllm_argv import VLLM_ENV

        env.update(VLLM_ENV)
    else:
        env.update(ENGINE_ENV)
        if spec.device == "cpu":
            env.update(CPU_ENGINE_ENV)
    return env


DISABLE_OVERLAP = "--disable-overlap-schedule"


def overlap_scheduled(version: str, config: SpecConfig, args: Sequence[str], env: Mapping[str, str]) -> bool:
    """Whether sglang ``version`` runs ``config`` with the overlap scheduler, by its own rules: without speculation,
    yes; with EAGLE, no up to 0.5.11 (spec v1, unless ``SGLANG_ENABLE_SPEC_V2=1``), for topk 1 only in 0.5.12-0.5.13
    ("spec v2 currently only supports topk = 1"), always from 0.5.14; never with ``--disable-overlap-schedule``.
    Step times of the two schedulers are not comparable, so every sglang row records which one it ran."""
    if DISABLE_OVERLAP in args:
        return False
    if config.is_baseline:
        return True
    v = version_tuple(version)
    if v < (0, 5, 12) and env.get("SGLANG_ENABLE_SPEC_V2", "").lower() not in ("1", "true"):
        return False
    return v >= (0, 5, 14) or config.topk == 1
