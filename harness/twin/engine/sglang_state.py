"""The sglang API's JSON shapes per emulated version (0.5.2, 0.5.23): ``meta_info``, server args, server info."""

from __future__ import annotations

import sys
from typing import Any

from harness.twin.engine.request import EngineRequest
from harness.twin.engine.scheduler import TwinEngine


def meta_info(eng: TwinEngine, req: EngineRequest, final: bool, completion: int | None = None) -> dict[str, Any]:
    """A request's ``meta_info`` as the emulated sglang version writes it (``completion``: tokens so far)."""
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
    if eng.version == "0.5.23":
        meta["reasoning_tokens"] = 0
        meta["num_retractions"] = 0
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
        if eng.version == "0.5.23" and eng.args.enable_metrics and sim.finish_ns is not None:
            meta["queue_time"] = max(0.0, ((sim.first_token_ns or sim.finish_ns) - sim.arrival_ns) / 1e9)
            meta["first_token_latency"] = ((sim.first_token_ns or sim.finish_ns) - req.received_ns) / 1e9
            meta["decode_throughput"] = completion / max(
                (sim.finish_ns - (sim.first_token_ns or req.received_ns)) / 1e9, 1e-9
            )
    return meta


def server_args(eng: TwinEngine) -> dict[str, Any]:
    """The launch arguments as sglang reports them (resolved spec, backend and limits)."""
    a = eng.args
    d = {
        k: v
        for k, v in vars(a).items()
        if not k.startswith("twin") and k not in ("emulate_version", "resolved_attention_backend")
    }
    d.update(
        {
            "speculative_num_steps": None if eng.cfg.is_baseline else eng.cfg.steps,
            "speculative_eagle_topk": None if eng.cfg.is_baseline else eng.cfg.topk,
            "speculative_num_draft_tokens": None if eng.cfg.is_baseline else eng.cfg.draft_tokens,
            "max_running_requests": eng.max_running,
            "mem_fraction_static": eng.memory.get("mem_fraction"),
            "attention_backend": a.resolved_attention_backend,
            "served_model_name": eng.model_id,
        }
    )
    return d


def server_info(eng: TwinEngine) -> dict[str, Any]:
    """``/get_server_info`` of the emulated version, with the twin's extras (``twin_*``)."""
    with eng.lock:
        state = {
            **server_args(eng),
            "last_gen_throughput": eng.last_gen_throughput,
            "memory_usage": {
                "weight": round(eng.profile.memory.weights_mb / 1024, 2),
                "kvcache": round(eng.memory.get("kv_cache_mb", 0) / 1024, 2),
                "token_capacity": eng.max_total_tokens(),
                "graph": round(eng.memory.get("extra_mb", 0) / 1024, 2),
            },
            "load": len(eng.decoder.running) + len(eng.decoder.waiting),
        }
        acc = eng.decoder.accept_length()
        if acc is not None:
            state["avg_spec_accept_length"] = acc
        if eng.record_step_time:
            state["step_time_dict"] = {k: list(v) for k, v in eng.decoder.step_time_dict.items()}
    info = {
        **server_args(eng),
        "status": eng.status,
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
        info["launch_command"] = "harness twin engine " + " ".join(sys.argv[1:])
        info["startup_time"] = round(eng.launch_s, 3)
        info["frontend"] = "twin"
        info["kv_events"] = None
    return info
