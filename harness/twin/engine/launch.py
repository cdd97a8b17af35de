"""``harness twin engine``: sglang's launch, emulated on the twin clock, then serve until SIGTERM.

Launch: simulated imports and weight loading, a memory lease on the device (out of memory -> sglang-like error and
exit 1), CUDA-graph capture, HTTP bind, a warm-up generation, then ``/health`` turns 200. Every failure logs the line
sglang would and exits 1; flag errors exit 2 (argparse).
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
import uuid
from typing import Any

import httpx

from harness.core.clocks import ScaledClock
from harness.core.httpserve import make_server, serve_in_thread
from harness.core.stopflag import StopFlag
from harness.grid import SpecConfig
from harness.twin.engine import sglang_args as ea
from harness.twin.engine import vllm_args
from harness.twin.engine.device_link import DeviceLink
from harness.twin.engine.log import log
from harness.twin.engine.scheduler import TwinEngine
from harness.twin.engine.sglang_api import build_router
from harness.twin.engine.tokens import stable_hash
from harness.twin.model import launch_seconds, memory_footprint_mb
from harness.twin.profile import TwinProfile, profile_from_dict


def _sleep_twin(clock: ScaledClock, seconds: float, stop: StopFlag | None = None) -> None:
    wall = clock.wall_seconds(seconds)
    if stop is not None:
        stop.wait(wall)
    else:
        time.sleep(wall)


def _parse(argv: list[str]) -> tuple[argparse.Namespace, ea.SpecChoice, set[str], str] | int:
    """sglang's flags of the emulated version: (args, spec choice, faults, version), or the exit code (help: 0, a
    flag error: 2, a rejected speculative setup: 1). The vLLM mode's flags are translated first (``vllm_args``)."""
    api = vllm_args.emulated_api(argv)
    vllm_version = None
    if api == "vllm":
        translated = _from_vllm(argv)
        if isinstance(translated, int):
            return translated
        argv, vllm_version = translated
    version = ea.emulated_version(argv)
    try:
        parser = ea.build_parser(version)
    except SystemExit as exc:
        print(exc, file=sys.stderr)
        return 2
    if "-h" in argv or "--help" in argv:
        parser.print_help()
        return 0
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 2)
    try:
        choice = ea.resolve_spec(args)
        faults = ea.parse_faults(args, dict(os.environ))
    except ea.SpecRejected as exc:
        log(f"ValueError: {exc}", "ERROR")
        return 1
    for w in choice.warnings:
        log(w, "WARNING")
    args.twin_api, args.vllm_version = api, vllm_version
    emulated = f"vLLM {vllm_version}" if vllm_version else f"sglang {version}"
    log(
        f"server_args: model_path={args.model_path} speculative={choice.config} dtype={args.dtype} "
        f"mem_fraction_static={args.mem_fraction_static} max_running_requests={args.max_running_requests} (twin engine, {emulated})"
    )
    return args, choice, faults, version


def _from_vllm(argv: list[str]) -> tuple[list[str], str] | int:
    """vLLM flags -> (the twin's launch argv, the emulated vLLM version), or the exit code (help 0, flags 2, a
    rejected speculative config 1)."""
    parser = vllm_args.build_parser()
    if "-h" in argv or "--help" in argv:
        parser.print_help()
        return 0
    try:
        args = parser.parse_args(argv)
        return vllm_args.to_twin_argv(args), str(args.emulate_version)
    except SystemExit as exc:
        return int(exc.code or 2)
    except ea.SpecRejected as exc:
        log(f"ValueError: {exc}", "ERROR")
        return 1


def _connect(
    args: argparse.Namespace, cfg: SpecConfig, version: str
) -> tuple[DeviceLink, ScaledClock, TwinProfile, dict[str, Any]] | None:
    """Handshake with the twin GPU (clock, profile, info, power limit) and resolve the attention backend on its
    hardware; None (logged) when the device is unreachable or the backend does not run on it."""
    link = DeviceLink(args.twin_gpu, f"engine-{os.getpid()}-{uuid.uuid4().hex[:6]}")
    try:
        clock = ScaledClock.from_dict(link.get("/v1/clock"))
        profile = profile_from_dict(link.get("/v1/profile"))
        dev_info = link.get("/v1/info")
        if dev_info.get("power_limit_w") is not None:  # a power cap set on the device (harness sweep --power-caps)
            link.power_limit_w = float(dev_info["power_limit_w"])
        link.note_lock(
            dev_info.get("sm_clock_locked_mhz"), dev_info.get("max_sm_clock_mhz") or profile.device.max_sm_clock_mhz
        )
    except (httpx.HTTPError, ValueError, KeyError) as exc:
        log(f"cannot reach the twin GPU at {args.twin_gpu}: {exc}", "ERROR")
        return None
    cc = profile.device.compute_capability
    if version == "0.5.2":  # 0.5.2 validates the TensorRT-LLM backends against the GPU in ServerArgs.__post_init__
        try:
            ea.check_backend_hardware(args.attention_backend, cc)
        except ea.SpecRejected as exc:
            log(f"ValueError: {exc}", "ERROR")
            return None
    args.resolved_attention_backend = ea.resolved_attention_backend(args.attention_backend, cfg, cc, version)
    log(
        f"Attention backend {'pinned' if args.attention_backend else 'not explicitly specified. Use'} "
        f"{args.resolved_attention_backend}{'' if args.attention_backend else ' backend by default'}."
    )
    return link, clock, profile, dev_info


def main(argv: list[str]) -> int:
    """Parse sglang flags, launch on the twin GPU, serve until SIGTERM; returns the exit code."""
    sys.setswitchinterval(0.0005)  # hand the GIL over quickly: wall latency is multiplied by the time scale
    parsed = _parse(argv)
    if isinstance(parsed, int):
        return parsed
    args, choice, faults, version = parsed
    cfg = choice.config
    connected = _connect(args, cfg, version)
    if connected is None:
        return 1
    link, clock, profile, dev_info = connected

    graph_bs = ea.cuda_graph_max_bs(args) or min(args.max_running_requests or 16, 16)
    mem_fraction = args.mem_fraction_static if args.mem_fraction_static is not None else 0.65
    phases = launch_seconds(profile, cfg, graph_bs)
    scale = args.twin_launch_scale
    t_launch0 = clock.now_ns()
    stop = StopFlag().stop_on_signals()

    _sleep_twin(clock, phases["imports"] * scale, stop)  # sglang's imports come before its first weight line
    log(
        f"Load weight begin. avail mem={dev_info.get('memory_total_mb', 0) / 1024:.2f} GB (twin GPU {dev_info.get('name')})"
    )
    _sleep_twin(clock, phases["weights"] * scale, stop)
    if stop.is_set():
        return 0
    log(f"Load weight end. elapsed={_wall_s(clock, phases['weights'] * scale):.4f} s, type=LlamaForCausalLM (twin)")
    if not cfg.is_baseline and args.dtype == "auto":
        log(
            "Capture cuda graph failed: RuntimeError: expected mat1 and mat2 to have the same dtype, but got: "
            "c10::BFloat16 != c10::Half (the EAGLE3 draft ships float16, the target bfloat16; pass --dtype float16)",
            "ERROR",
        )
        return 1
    mem = memory_footprint_mb(profile, cfg, mem_fraction, graph_bs)
    if not mem["kv_ok"]:
        log(
            "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
            f"(static pool {mem['static_mb']:.0f} MB < weights {profile.memory.weights_mb:.0f} MB + minimum KV cache)",
            "ERROR",
        )
        return 1
    want = mem["total_mb"] if "oom" not in faults else profile.device.memory_total_mb * 2
    status, body = link.lease(want)
    if status != 200:
        free = body.get("error", {}).get("memory_free_mb", 0.0)
        log(
            "Capture cuda graph failed: torch.OutOfMemoryError: CUDA out of memory. "
            f"Tried to allocate {max(want - mem['static_mb'], 0):.0f} MiB. GPU 0 has a total capacity of "
            f"{profile.device.memory_total_mb / 1024:.2f} GiB of which {max(free - mem['static_mb'], 0):.0f} MiB is free "
            "after the static pool. "
            "Possible solutions: reduce --mem-fraction-static, --cuda-graph-max-bs or --max-running-requests (twin)",
            "ERROR",
        )
        return 1
    seed = (
        args.twin_seed
        if args.twin_seed is not None
        else stable_hash("launch", dev_info.get("seed", 0), body.get("launch_seq", 0)) % (2**31)
    )
    if mem["capture_mb"] > 0 and "oom" not in faults:
        link.lease(mem["steady_mb"])  # the capture workspace goes back after CUDA-graph capture
    link.start()
    try:
        log(
            f"Memory pool end. KV cache {mem['kv_cache_mb']:.0f} MB, buffers {mem['extra_mb']:.0f} MB, total {mem['total_mb']:.0f} MB"
        )
        if ea.oversized_tree(cfg):
            _sleep_twin(clock, 2.0 * scale, stop)
            log(
                f"Capture cuda graph failed: RuntimeError: selected index k out of range "
                f"(speculative_num_draft_tokens - 1 = {cfg.draft_tokens - 1} > tree candidates)",
                "ERROR",
            )
            return 1
        log(f"Capture cuda graph begin. This can take up to several minutes. bs up to {graph_bs} (twin)")
        _sleep_twin(clock, phases["cuda_graphs"] * scale, stop)
        if stop.is_set():
            return 0
        log(f"Capture cuda graph end. elapsed={_wall_s(clock, phases['cuda_graphs'] * scale):.4f} s (twin)")
        eng = TwinEngine(args, cfg, profile, clock, link, seed, faults, version, choice.warnings)
        eng.memory = {**mem, "mem_fraction": mem_fraction}
        eng.launch_phases = {k: v * scale for k, v in phases.items()}
        eng.graph_bs = graph_bs
        return _serve(eng, stop, t_launch0)
    finally:
        link.stop()
        link.release()


def _wall_s(clock: Any, world_s: float) -> float:
    """Wall seconds of ``world_s`` twin seconds: what sglang's ``elapsed=`` (a host perf counter) would print."""
    return world_s / max(float(getattr(clock, "scale", 1.0) or 1.0), 1e-9)


def _serve(eng: TwinEngine, stop: StopFlag, t_launch0: int) -> int:
    """Bind, start the scheduler, run the warm-up generation, turn healthy, serve until ``stop``; the exit code."""
    args = eng.args
    if args.twin_api == "vllm":
        from harness.twin.engine.vllm_api import build_vllm_router

        router, header = build_vllm_router(eng), "vllm-twin"
    else:
        router, header = build_router(eng), "sglang-twin"
    try:
        server = make_server(args.host, args.port, router, server_header=header)
    except OSError as exc:
        log(f"cannot bind {args.host}:{args.port}: {exc}", "ERROR")
        return 1
    sched = threading.Thread(target=eng.run_scheduler, name="scheduler", daemon=True)
    sched.start()
    serve_in_thread(server)
    log(f"Uvicorn running on http://{args.host}:{args.port} (twin)")
    warm = eng.new_request(
        "The capital city of France is", None, {"max_new_tokens": 8, "temperature": 0}, rid="twin-warmup"
    )
    eng.submit(warm)
    while not warm.done and not stop.is_set():
        warm.event.wait(0.05)
    eng.warmup_iters = eng.decoder.forward_ct
    eng.launch_s = (eng.clock.now_ns() - t_launch0) / 1e9
    eng.status = "Up"
    log(f"The server is fired up and ready to roll! (twin, launch {eng.launch_s:.1f} s on the twin clock)")
    while not stop.wait(0.2):
        if not sched.is_alive():
            log("scheduler thread died", "ERROR")
            return 1
    eng.status = "Stopping"
    eng.stop_event.set()
    server.shutdown()
    server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
