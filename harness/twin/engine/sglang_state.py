"""The sglang API's JSON shapes per emulated version (0.5.2, 0.5.23): ``meta_info``, server args, server info."""

from __future__ import annotations

import os
import sys
from typing import Any

from harness.engine.sglang_argv import DISABLE_OVERLAP, overlap_scheduled
from harness.twin.engine.request import EngineRequest
from harness.twin.engine.scheduler import TwinEngine


def meta_info(
    eng: TwinEngine, req: EngineRequest, final: bool, completion: int | None = None, first: bool = False
) -> dict[str, Any]:
    """A request's ``meta_info`` as the emulated sglang version writes it (``completion``: tokens so far; ``first``:
    the first chunk of a stream). 0.5.23's timestamps (``--enable-metrics``) are epoch seconds of the twin clock."""
    sim = req.sim
    completion = req.visible if completion is None else completion
    meta: dict[str, Any] = {
        "id": sim.rid,
        "finish_reason": (sim.finish_reason if final else None),
        "prompt_tokens": sim.prompt_tokens,
        "completion_tokens": completion,
        "cached_tokens": 0,
        "weight_version": "default",
    }
    v523 = eng.version == "0.5.23"
    metrics = v523 and eng.args.enable_metrics
    if v523:
        meta["reasoning_tokens"] = 0
        meta["num_retractions"] = 0
        meta["cached_tokens_details"] = None  # sglang: an object only when the radix cache served some tokens
        meta["dp_rank"] = None
        if metrics:
            meta.update(_scheduler_stamps(req))
        if final:
            meta["weight_versions"] = [{"version": "default", "start": 0, "end": completion}]
        if metrics and first and not final and sim.first_token_ns is not None:
            meta["response_sent_to_client_ts"] = sim.first_token_ns / 1e9
    if final:
        if sim.finish_ns is not None:
            meta["e2e_latency"] = (sim.finish_ns - req.received_ns) / 1e9
            # twin extras: device-clock ns of receipt and finish (wall = anchor + (ns - anchor) / scale)
            meta["twin_received_ns"], meta["twin_finish_ns"] = req.received_ns, sim.finish_ns
            meta["twin_first_token_ns"] = sim.first_token_ns  # for steady-state windows (harness.telemetry.steady)
        if not eng.cfg.is_baseline:
            if eng.version == "0.5.2":
                meta["spec_verify_ct"] = sim.verify_ct
            elif sim.verify_ct > 0:
                proposed = sim.verify_ct * (eng.cfg.draft_tokens - 1)
                meta.update(
                    {
                        "spec_accept_rate": sim.correct_drafts / proposed if proposed else 0.0,
                        "spec_accept_length": completion / sim.verify_ct,
                        "spec_num_correct_drafts": sim.correct_drafts,
                        "spec_num_proposed_drafts": proposed,
                        "spec_verify_ct": sim.verify_ct,
                        "spec_correct_drafts_histogram": list(sim.histogram),
                    }
                )
        if metrics and sim.finish_ns is not None:
            meta.update(_request_stamps(req, completion))
    return meta


def _scheduler_stamps(req: EngineRequest) -> dict[str, Any]:
    """0.5.23's scheduler-side time stats of every chunk (``--enable-metrics``): storage waits (no hierarchical
    cache: 0), entry into the forward batch, end of prefill, and the queue time between arrival and that entry."""
    sim = req.sim
    out: dict[str, Any] = {"storage_prefetch_wait": 0.0, "storage_staging_wait": 0.0}
    if req.forward_entry_ns is not None:
        out["forward_entry_time"] = req.forward_entry_ns / 1e9
    if sim.first_token_ns is not None:
        out["prefill_finished_time"] = sim.first_token_ns / 1e9
    entry = req.forward_entry_ns if req.forward_entry_ns is not None else sim.first_token_ns
    if entry is not None:
        out["queue_time"] = max(0.0, (entry - sim.arrival_ns) / 1e9)
    return out


def _request_stamps(req: EngineRequest, completion: int) -> dict[str, Any]:
    """0.5.23's request time stats of the final chunk (``--enable-metrics``), in epoch seconds of the twin clock:
    receipt, first-token latency, dispatch, first answer sent, finish, and decode throughput (tokens after the
    first over the decode time, only with two or more tokens)."""
    sim = req.sim
    assert sim.finish_ns is not None
    first_ns = sim.first_token_ns or sim.finish_ns
    out: dict[str, Any] = {"request_received_ts": req.received_ns / 1e9}
    if first_ns > req.received_ns:
        out["first_token_latency"] = (first_ns - req.received_ns) / 1e9
    out["api_server_dispatch_finish_ts"] = req.received_ns / 1e9
    out["response_sent_to_client_ts"] = (first_ns if req.streaming else sim.finish_ns) / 1e9
    out["request_finished_ts"] = sim.finish_ns / 1e9
    if completion > 1 and sim.finish_ns > first_ns:
        out["decode_throughput"] = (completion - 1) / ((sim.finish_ns - first_ns) / 1e9)
    return out


def server_args(eng: TwinEngine) -> dict[str, Any]:
    """The launch arguments as sglang reports them (resolved spec, backend, limits, tokenizer path; 0.5.23 also the
    chunked-prefill size and the random seed it resolves)."""
    a = eng.args
    d = {
        k: v
        for k, v in vars(a).items()
        if not k.startswith("twin") and k not in ("emulate_version", "resolved_attention_backend", "vllm_version")
    }
    d.update(
        {
            "tokenizer_path": a.tokenizer_path or a.model_path,
            "speculative_num_steps": None if eng.cfg.is_baseline else eng.cfg.steps,
            "speculative_eagle_topk": None if eng.cfg.is_baseline else eng.cfg.topk,
            "speculative_num_draft_tokens": None if eng.cfg.is_baseline else eng.cfg.draft_tokens,
            "max_running_requests": eng.max_running,
            "mem_fraction_static": eng.memory.get("mem_fraction"),
            "attention_backend": a.resolved_attention_backend,
            "served_model_name": eng.model_id,
            # resolved as the emulated version resolves it (sglang reports the value after its own rules)
            "disable_overlap_schedule": not overlap_scheduled(
                eng.version, eng.cfg, [DISABLE_OVERLAP] if a.disable_overlap_schedule else [], os.environ
            ),
        }
    )
    if eng.version == "0.5.23":
        d["chunked_prefill_size"] = a.chunked_prefill_size or _chunked_prefill_default(
            eng.profile.device.memory_total_mb
        )
        d["random_seed"] = a.random_seed if a.random_seed is not None else eng.seed
    return d


def _chunked_prefill_default(gpu_mem_mb: float) -> int:
    """0.5.23's chunked-prefill size for a GPU of this much memory (``arg_groups/memory_hook.py``)."""
    for limit_gb, size in ((20, 2048), (60, 4096), (160, 8192)):
        if gpu_mem_mb < limit_gb * 1024:
            return size
    return 16384


def _graph_split(total: float) -> dict[str, float]:
    """0.5.23's per-graph breakdown (memory or capture seconds); the twin does not split, so all of it is decode."""
    graphs = ("prefill", "decode", "target_verify", "draft_prefill", "draft_decode", "draft_extend")
    return {g: total if g == "decode" else 0.0 for g in graphs}


def _internal_state(eng: TwinEngine) -> dict[str, Any]:
    """``internal_states[0]``: the server args plus the scheduler's state of the emulated version."""
    graph_gb = round(eng.memory.get("extra_mb", 0) / 1024, 2)
    memory: dict[str, Any] = {
        "weight": round(eng.profile.memory.weights_mb / 1024, 2),
        "kvcache": round(eng.memory.get("kv_cache_mb", 0) / 1024, 2),
        "token_capacity": eng.max_total_tokens(),
        "graph": graph_gb,
    }
    state: dict[str, Any] = {**server_args(eng), "last_gen_throughput": eng.last_gen_throughput}
    if eng.version == "0.5.23":
        free_gb = round(eng.profile.device.memory_total_mb / 1024, 3)  # the whole (twin) GPU is free at start-up
        memory.update(startup_available=free_gb, token_capacity_swa=None, graph=_graph_split(graph_gb))
        graph_bs = [] if eng.args.disable_cuda_graph else [b for b in (1, 2, 4, *range(8, 513, 8)) if b <= eng.graph_bs]
        state.update(
            memory_usage=memory,
            effective_max_running_requests_per_dp=eng.max_running,
            decode_cuda_graph_bs=graph_bs,
            decode_cuda_graph_memory_gb=graph_gb,
            world_size=1,
        )
    else:
        state.update(memory_usage=memory, load=len(eng.decoder.running) + len(eng.decoder.waiting))
    acc = eng.decoder.accept_length()
    if acc is not None:
        state["avg_spec_accept_length"] = acc
    if eng.record_step_time:
        state["step_time_dict"] = {k: list(v) for k, v in eng.decoder.step_time_dict.items()}
    return state


def server_info(eng: TwinEngine) -> dict[str, Any]:
    """``/get_server_info`` of the emulated version, with the twin's extras (``twin_*``)."""
    with eng.lock:
        state = _internal_state(eng)
    info = {
        **server_args(eng),
        "status": "ready" if eng.version == "0.5.23" else eng.status,  # 0.5.23: the scheduler's handshake status
        "max_total_num_tokens": eng.max_total_tokens(),
        "max_req_input_len": eng.context_length() - 5,
        "internal_states": [state],
        "version": eng.version,
        "twin": True,
        "engine": "twin",
        "hardware": eng.profile.hardware,
        "twin_seed": eng.seed,
        "twin_launch_s": round(eng.launch_s, 3),
        "twin_lead_ms": round(eng.lead_ns / eng.clock.scale / 1e6, 3),
        "twin_late_requests": eng.loops.late_requests,
    }
    if eng.version == "0.5.2":  # the top level echoes the launch flag; the scheduler's state has the resolved one
        info["attention_backend"] = eng.args.attention_backend
    if eng.version == "0.5.23":
        phases = eng.launch_phases
        info["launch_command"] = "harness twin engine " + " ".join(sys.argv[1:])
        info["startup_time"] = {
            "load_weight": round(phases.get("weights", 0.0), 3),
            "kv_cache_allocation": 0.0,
            "scheduler_e2e": round(sum(phases.values()), 3),
            "cuda_graph": _graph_split(round(phases.get("cuda_graphs", 0.0), 3)),
            "tokenizer_e2e": round(eng.launch_s, 3),
        }
        info["frontend"] = "twin"
        info["kv_events"] = None
        info["custom_sigquit_handler"] = None
        info["hicache_object_layout"] = {
            "enabled": False,
            "backend": None,
            "page_size": 1,
            "hicache_object_layout": {"pools": []},
            "reason": "Hierarchical cache is disabled",
        }
    return info
