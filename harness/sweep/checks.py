"""The checks of a sweep's options that need no service and span several values (each value's own check is its type,
``harness.core.option_values``): the plan, prompts, engine versions, power caps, twin faults, the energy window, the
attention backend, the executor and the active strategy. ``harness sweep`` runs
them before any run folder exists (a usage error leaves nothing behind), and ``--resume`` runs them on the saved
options."""

from __future__ import annotations

from harness.core.errors import UsageError
from harness.runs.options import SweepOptions
from harness.runs.plan import measured_requests, plan_cells
from harness.world.bench import load_prompts


def check_options(opts: SweepOptions) -> None:
    """Every check of the options that needs no service: plan, prompts, settle, URLs, engine, caps, twin faults."""
    plan_cells(opts)
    if opts.prompts_file:
        load_prompts(opts.prompts_file)
    if opts.sglang_version != "auto" and opts.engine != "vllm":
        from harness.engine.version import check_supported

        check_supported(opts.sglang_version, engine=opts.engine)
    if opts.vllm_version != "auto" and opts.api == "vllm":
        from harness.engine.version import check_vllm_supported

        check_vllm_supported(opts.vllm_version, twin=opts.engine == "twin")
    if opts.engine != "twin" and opts.twin_emulate != "sglang":
        raise UsageError(
            "--twin-emulate only applies to --engine twin",
            fix=f"use --engine twin --twin-emulate {opts.twin_emulate} or drop it",
        )
    if opts.api == "vllm" and not opts.spec_configs:
        raise UsageError(
            "none of the configs has a vLLM equivalent (vLLM's EAGLE3 drafts chains, not trees)",
            fix="add the baseline or chains, e.g. --configs 0:0:0,1:1:2,3:1:4,5:1:6",
        )
    if opts.engine != "twin" and (opts.twin_gpu_url or opts.twin_faults):
        raise UsageError(
            "--twin-gpu and --twin-fault only apply to --engine twin", fix="drop them or use --engine twin"
        )
    from harness.world.world import check_twin_profile_use

    check_twin_profile_use(opts)
    if opts.power_cap_mode == "record" and opts.power_caps:
        raise UsageError(
            "--power-cap-mode record never sets a cap, so it cannot sweep --power-caps",
            fix="drop --power-caps (set the limit beforehand with sudo nvidia-smi -pl WATTS), or run as "
            "root with --power-cap-mode set",
        )
    if opts.gpu_settings_url:
        check_settings_agent(opts.engine, opts.gpu_settings_url)
    if opts.power_caps == ["auto"] and opts.probe == "off":
        raise UsageError(
            "--power-caps auto chooses caps from the band probe's draws, and --probe off skips the probe",
            fix="drop --probe off, or give the caps in watts (e.g. --power-caps 250,300)",
        )
    if opts.twin_faults:
        from harness.engine.sglang_argv import parse_twin_fault

        for item in opts.twin_faults:
            parse_twin_fault(item)
    check_energy_window(opts)
    check_attention_backend(opts.attention_backend)
    check_engine_device(opts)
    from harness.sweep.executors import check_executor_options

    check_executor_options(opts)
    if opts.strategy == "active" or opts.budget is not None or opts.budget_s is not None:
        from harness.sweep.active.options import check_active_options

        check_active_options(opts)


def check_settings_agent(engine: str, url: str) -> None:
    """``--gpu-settings-url`` sets a real GPU's caps and clocks (the twin GPU sets its own) and needs the agent's key."""
    from harness.gpu.device import client_key

    if engine == "twin":
        raise UsageError(
            "--gpu-settings-url sets a real GPU's caps and clocks; the twin GPU takes its settings itself",
            fix="drop --gpu-settings-url, or use --engine sglang or vllm",
        )
    client_key(url)  # refuses a missing key now, before any folder exists


def check_attention_backend(backend: str | None) -> None:
    """A backend name some supported sglang knows (a typo would otherwise make every cell a launch-error row)."""
    from harness.twin.engine.sglang_args import ATTENTION_BACKENDS

    known = sorted({b for names in ATTENTION_BACKENDS.values() for b in names})
    if backend is not None and backend not in known:
        raise UsageError(
            f"--attention-backend {backend!r} is not a backend of sglang 0.5.2-0.5.23",
            fix="use flashinfer (default), auto, or one of: " + ", ".join(known),
        )


def check_engine_device(opts: SweepOptions) -> None:
    """``--engine-device cpu`` runs real sglang or vLLM on this host's CPU: no twin, no GPU settings, no Ray GPUs."""
    if opts.engine_device != "cpu":
        return
    if opts.engine == "twin":
        raise UsageError(
            "--engine-device cpu runs a real engine's CPU build, not --engine twin",
            fix="use --engine sglang or vllm (the twin is GPU-free already; docs/engines.md)",
        )
    if opts.power_caps or opts.sm_clocks or opts.executor != "local":
        flag = "--power-caps" if opts.power_caps else "--sm-clocks" if opts.sm_clocks else "--executor ray"
        raise UsageError(f"{flag} needs GPUs; --engine-device cpu has none", fix=f"drop {flag}")


def check_energy_window(opts: SweepOptions) -> None:
    """``--energy-window steady`` needs a non-empty steady-state window at every batch size (N > 2B requests)."""
    if opts.energy_window != "steady":
        return
    from harness.telemetry.steady import min_requests

    short = [bs for bs in opts.batch_sizes if measured_requests(bs, opts.num_prompts) < min_requests(bs)]
    if short:
        need = max(min_requests(bs) for bs in short)
        raise UsageError(
            f"--energy-window steady needs more than 2 x batch size requests per cell; batch size(s) "
            f"{', '.join(map(str, short))} would have an empty steady-state window",
            fix=f"pass --num-prompts {need} (or more), or use --energy-window measured",
        )
