"""The same small cell measured on a twin world at time scale 1 and at 20 agrees within noise.

Every duration comes from the twin clock: step times and e2e latencies (engine) and the energy integral over the
window (device; wall-ns window edges map onto the device clock). The energy compared is the decoding energy (above
the loaded-idle floor): the client's own wall-clock gaps between requests last ``scale`` times longer in twin time,
so the idle floor over the window is not a property of the twin (see docs/twin.md, limits).
"""

from __future__ import annotations

import concurrent.futures as cf
import json
import statistics
import threading
import time

import httpx
import pytest
from _twin_helpers import twin_engine, twin_gpu

from harness.core.clocks import wall_ns
from harness.twin.fit.calibrate import PROMPTS_PATH
from harness.twin.model import base_power_w, percentile
from harness.twin.profile import load_profile

ARGS = [
    "--model-path",
    "unsloth/Llama-3.2-1B-Instruct",
    "--dtype",
    "float16",
    "--mem-fraction-static",
    "0.65",
    "--cuda-graph-max-bs",
    "4",
    "--max-running-requests",
    "4",
    "--speculative-algorithm",
    "EAGLE3",
    "--speculative-draft-model-path",
    "d",
    "--speculative-num-steps",
    "3",
    "--speculative-eagle-topk",
    "4",
    "--speculative-num-draft-tokens",
    "8",
    "--twin-seed",
    "3",
    "--twin-launch-scale",
    "0.02",
]


def measure_cell(scale: float, tmp_path) -> dict:
    prompts = json.loads(PROMPTS_PATH.read_text())["prompts"]
    d = tmp_path / f"s{scale:g}"
    d.mkdir()
    with twin_gpu(time_scale=scale, seed=2, log_dir=str(d)) as g, twin_engine(g.url, ARGS, log_dir=str(d)) as e:
        client = httpx.Client(timeout=120.0)

        barrier = threading.Barrier(4)

        def one(i: int) -> dict:
            body = {
                "text": prompts[i % 4],
                "sampling_params": {"max_new_tokens": 320, "temperature": 0, "ignore_eos": True},
            }
            barrier.wait()
            return client.post(e.url + "/generate", json=body).json()["meta_info"]

        with cf.ThreadPoolExecutor(4) as ex:
            list(ex.map(one, range(4)))  # warm-up wave
            t0 = wall_ns()
            metas = list(ex.map(one, range(4))) + list(ex.map(one, range(4, 8)))  # 8 requests in two waves of 4
            t1 = wall_ns()
        time.sleep(0.05)
        info = client.get(e.url + "/get_server_info").json()["internal_states"][0]
        truth = g.get("/truth/energy", params={"start_ns": t0, "end_ns": t1}).json()
        client.close()
    tokens = sum(m["completion_tokens"] for m in metas)
    steps = info["step_time_dict"]["4"]
    return {
        "speed": info["avg_spec_accept_length"] / percentile(steps, 20),
        "e2e": statistics.fmean(m["e2e_latency"] for m in metas),
        "jpt": (truth["energy_j"] - base_power_w(load_profile()) * truth["duration_s"]) / tokens,
        "twin_s": truth["duration_s"],
        "wall_s": (t1 - t0) / 1e9,
    }


def test_scale_1_and_20_agree(tmp_path):
    slow = measure_cell(1.0, tmp_path)
    fast = measure_cell(20.0, tmp_path)
    assert fast["wall_s"] < slow["wall_s"] / 5, (slow, fast)  # the fast world really runs faster on the wall clock
    assert fast["speed"] == pytest.approx(slow["speed"], rel=0.08), (slow, fast)
    assert fast["e2e"] == pytest.approx(slow["e2e"], rel=0.08), (slow, fast)
    assert fast["jpt"] == pytest.approx(slow["jpt"], rel=0.10), (slow, fast)
