"""The sampler's loop, store and HTTP API: an in-process server on a scripted probe, then the real sidecar process
(`harness sampler serve --probe twin`) against a real twin GPU device process."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from _sampler_testbed import TwinLoad, start_sampler, start_twin_gpu
from _telemetry_helpers import ScriptedProbe, free_port
from prometheus_client.parser import text_string_to_metric_families

from harness.core.clocks import wall_ns
from harness.core.jsonl import read_jsonl
from harness.telemetry.client import TelemetryClient, TelemetrySource, measure_clock_offset
from harness.telemetry.sampler import InProcessSampler, SamplerCore
from harness.telemetry.server import start_server


@pytest.fixture
def scripted_server(tmp_path: Path):
    probe = ScriptedProbe()
    core = SamplerCore(probe, rate_hz=20.0, log_dir=tmp_path / "log").start()
    srv, _ = start_server(core, "127.0.0.1", 0)
    try:
        yield probe, core, f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()
        core.stop()


def test_loop_keeps_its_grid_and_contiguous_seq():
    probe = ScriptedProbe()
    with InProcessSampler(probe, rate_hz=50.0) as s:
        time.sleep(1.5)
        core = s.core
        recs = core.store.since(-1, 10_000)
    samples = [r for r in recs if r.kind == "sample"]
    assert [r.seq for r in recs] == list(range(recs[0].seq, recs[0].seq + len(recs)))
    assert recs[0].kind == "start"
    # No drift: first-to-last spacing is exactly (samples - 1 + skipped ticks) periods, up to scheduling jitter.
    span_ns = samples[-1].t_mono_ns - samples[0].t_mono_ns
    ticks = len(samples) - 1 + core.overruns_total
    assert abs(span_ns - ticks * 20_000_000) < 15_000_000, (span_ns, ticks)
    assert len(samples) >= 60


def test_slow_probe_skips_ticks_and_counts_overruns():
    probe = ScriptedProbe()
    probe.delay_s = 0.25
    with InProcessSampler(probe, rate_hz=10.0) as s:
        time.sleep(1.4)
        t1 = wall_ns()
        w = s.window(t1 - 900_000_000, t1)
        overruns = s.core.overruns_total
        lat = s.snapshot().probe_latency_ms
    assert overruns >= 3
    assert lat >= 250.0
    assert "slow_probe" in w.reasons and "coverage_below_95pct" in w.reasons and not w.valid


def test_http_api_in_process(scripted_server):
    probe, core, url = scripted_server
    with TelemetryClient(url, timeout_s=3.0) as c:
        c.wait_ready(5.0)
        assert isinstance(c, TelemetrySource)
        t0 = wall_ns()
        time.sleep(1.0)
        t1 = wall_ns()
        w = c.window(t0, t1)
        assert w.valid, w.reasons
        assert w.energy_j == pytest.approx(probe.truth_wall(t0, t1), rel=2e-3)
        assert w.sample_count >= 18 and w.coverage >= 0.95
        snap = c.snapshot()
        assert snap is not None and snap.uuid == "GPU-scripted-0" and snap.kind == "sample"
        ident = c.identity()
        assert ident["uuid"] == "GPU-scripted-0" and ident["probe"] == "scripted" and ident["rate_hz"] == 20.0
        mark = c.mark("trial-1-begin")
        assert mark is not None and abs(mark["sampler_wall_ns"] - mark["wall_ns"]) < 50_000_000
        off = measure_clock_offset(url)
        assert off.agrees and abs(off.offset_ns) < 20_000_000
    # Raw endpoints.
    r = httpx.get(f"{url}/v1/samples", params={"since_seq": 3, "limit": 5}).json()["samples"]
    assert [x["seq"] for x in r] == [4, 5, 6, 7, 8] and all(x["schema"] == 1 for x in r)
    assert httpx.get(f"{url}/-/healthy").status_code == 200 and httpx.get(f"{url}/-/ready").status_code == 200
    assert httpx.get(f"{url}/v1/window", params={"start_ns": 5, "end_ns": 4}).status_code == 400
    assert httpx.get(f"{url}/v1/window", params={"start_ns": "x", "end_ns": 4}).status_code == 400
    assert httpx.get(f"{url}/v1/window", params={"start_ns": 1, "end_ns": 2, "edge_model": "cubic"}).status_code == 400
    assert httpx.get(f"{url}/nope").status_code == 404
    assert httpx.post(f"{url}/v1/marks", content=b"not json").status_code == 400
    metrics = httpx.get(f"{url}/metrics").text
    for name in ("gpu_energy_joules_total", "gpu_power_watts{", "sampler_samples_total", "sampler_errors_total", "sampler_loop_overruns_total",
                 "sampler_last_sample_timestamp_seconds", "process_cpu_seconds_total"):  # fmt: skip
        assert name in metrics, name
    assert "gpu_sm_clock_hertz" not in metrics  # absent in the probe: left out, never 0
    assert "DCGM_FI_DEV_SM_CLOCK" not in metrics and "DCGM_FI_DEV_POWER_USAGE{" in metrics
    marks = read_jsonl(core.store.log_dir / "marks.jsonl")
    assert marks[0]["name"] == "trial-1-begin"


def test_scrapes_never_call_the_probe(scripted_server):
    probe, core, url = scripted_server
    with httpx.Client(base_url=url) as h:
        time.sleep(0.3)
        for _ in range(100):
            h.get("/metrics")
            h.get("/v1/latest")
            n = wall_ns()
            h.get("/v1/window", params={"start_ns": n - 200_000_000, "end_ns": n - 100_000_000})
    assert probe.reads == core.samples_total


def test_sidecar_against_twin_device(tmp_path: Path):
    with (
        start_twin_gpu(tmp_path, time_scale=20.0) as gpu,
        start_sampler(gpu.url, tmp_path / "log", tmp_path, rate_hz=10.0) as sp,
    ):
        with TelemetryClient(sp.url) as c:
            c.wait_ready(10.0)
            load = TwinLoad(gpu.url)
            try:
                load.set(True, 40.0, 0.9)
                cpu0, m0 = _cpu_seconds(sp.url), time.monotonic()
                t0 = wall_ns()
                time.sleep(1.0)
                t1 = wall_ns()
                w = c.window(t0, t1)
                truth = load.truth(t0, t1)
                cpu_share = (_cpu_seconds(sp.url) - cpu0) / (time.monotonic() - m0)
                scrape = httpx.get(f"{sp.url}/metrics").text
            finally:
                load.close()
            ident = c.identity()
        info = httpx.get(f"{sp.url}/v1/info").json()
    assert w.valid, w.reasons
    # A wall window at --time-scale 20 covers 20x its twin seconds, and so does its energy. The window is what was
    # asked for (t0..t1), not the 1 s slept: a loaded host oversleeps (seen: 1.0022 s, so 20.044 twin s).
    wall_s = (t1 - t0) / 1e9
    assert w.duration_s == pytest.approx(20.0 * wall_s, rel=2e-3) and w.wall_duration_s == pytest.approx(
        wall_s, rel=2e-3
    )
    assert w.energy_j == pytest.approx(truth, rel=5e-3)
    assert w.avg_power_w == pytest.approx(truth / (20.0 * wall_s), rel=5e-3)  # per twin second of the window asked
    assert w.gpu_uuid and w.gpu_uuid.startswith("GPU-twin-") and "twin" in (w.gpu_name or "")
    assert ident["twin"] is True and ident["hardware"].startswith("twin:") and ident["time_scale"] == 20.0
    assert info["probe"] == "twin" and info["rate_hz"] == 10.0
    # the same sample under dcgm-exporter's names and units (what aiperf's --gpu-telemetry reads), issue 38 B4
    dcgm = {  # keyed as aiperf keys them (the parser may append _total to a counter's sample)
        s.name.removesuffix("_total"): s
        for fam in text_string_to_metric_families(scrape)
        for s in fam.samples
        if s.name.startswith("DCGM_")
    }
    own = {
        (s.name, s.labels.get("type")): s.value
        for fam in text_string_to_metric_families(scrape)
        for s in fam.samples
        if s.name.startswith("gpu_")
    }
    assert "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter" in scrape
    energy = dcgm["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"]
    assert energy.value == pytest.approx(own[("gpu_energy_joules_total", None)] * 1e3) and energy.value > 0
    assert energy.labels["gpu"] == "0" and energy.labels["UUID"] == w.gpu_uuid
    assert energy.labels["modelName"] == w.gpu_name and energy.labels["device"] == "nvidia0"
    assert dcgm["DCGM_FI_DEV_POWER_USAGE"].value == own[("gpu_power_watts", "instant")]
    assert dcgm["DCGM_FI_DEV_SM_CLOCK"].value == own[("gpu_sm_clock_hertz", None)] / 1e6
    assert dcgm["DCGM_FI_DEV_GPU_UTIL"].value == pytest.approx(own[("gpu_utilization_ratio", None)] * 100)
    assert {"DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_ENFORCED_POWER_LIMIT"} <= set(dcgm)
    assert cpu_share < 0.05, (
        f"sampler used {cpu_share:.1%} of a core at 10 Hz"
    )  # measured ~0.7 %; loose for a shared box
    recs = read_jsonl(tmp_path / "log" / "samples.jsonl", allow_torn_tail=False)
    assert recs[0]["kind"] == "start" and recs[0]["detail"]["probe"] == "twin"
    assert [r["seq"] for r in recs] == list(range(len(recs)))
    s = next(r for r in recs if r["kind"] == "sample")
    assert set(json.loads(json.dumps(s))) >= {"t_wall_ns", "t_mono_ns", "device_ns", "energy_mj", "power_w", "uuid", "errors",
                                               "probe_latency_ms", "run_id", "schema", "clock_event_reasons"}  # fmt: skip


def _cpu_seconds(url: str) -> float:
    text = httpx.get(f"{url}/metrics").text
    return float(next(ln.split()[1] for ln in text.splitlines() if ln.startswith("process_cpu_seconds_total ")))


def test_unreachable_sampler_is_invalid_never_zero():
    url = f"http://127.0.0.1:{free_port()}"
    with TelemetryClient(url, timeout_s=0.5) as c:
        n = wall_ns()
        w = c.window(n - 1_000_000_000, n)
        assert not w.valid and w.reasons == ["sampler_unreachable"] and w.energy_j is None and w.energy_method is None
        assert c.snapshot() is None and c.last_error and c.last_error.startswith("sampler_unreachable")
        assert c.mark("x") is None
        assert "sampler_error" in c.identity()


def test_cli_nvml_without_gpu_is_a_clear_error(tmp_path: Path):
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "harness", "sampler", "serve", "--probe", "nvml", "--port", "0"],
                       capture_output=True, text=True, timeout=60)  # fmt: skip
    assert r.returncode == 4
    assert "NVML is not available" in r.stderr and "fix:" in r.stderr
    r = subprocess.run([sys.executable, "-m", "harness", "sampler", "serve", "--probe", "twin", "--port", "0"],
                       capture_output=True, text=True, timeout=60)  # fmt: skip
    assert r.returncode == 2 and "--twin-url" in r.stderr


def test_a_mark_name_is_bounded(scripted_server):
    """Issue 38 A5: the sampler kept a 5 MB mark name (in memory and in its log)."""
    _, _, url = scripted_server
    r = httpx.post(f"{url}/v1/marks", json={"name": "x" * 5_000_000})
    assert r.status_code == 400 and "1 to 256 characters" in r.json()["error"]["message"]
    assert httpx.post(f"{url}/v1/marks", json={"name": ""}).status_code == 400
    assert httpx.post(f"{url}/v1/marks", json={"name": "cell-start"}).status_code == 200


def test_bad_query_values_are_a_400_naming_them(scripted_server):
    """Issue 45: a negative limit was clamped to 1, a negative timestamp or a JSON ``true`` mark instant taken, a
    ``nan`` or negative wait ignored and a huge one turned silently into 30 s of waiting. Each is now a 400 naming
    the parameter and its range, answered at once."""
    _, _, url = scripted_server
    now = wall_ns()
    for path, params, says in (
        ("/v1/samples", {"limit": -5}, "limit must be between 1 and 10000, got -5"),
        ("/v1/samples", {"limit": 10_001}, "limit must be between 1 and 10000, got 10001"),
        ("/v1/samples", {"since_seq": -2}, "since_seq must be at least -1, got -2"),
        ("/v1/window", {"start_ns": -5, "end_ns": 10}, "start_ns must be at least 0, got -5"),
        ("/v1/window", {"start_ns": "true", "end_ns": 10}, "start_ns must be an integer, got 'true'"),
        ("/v1/window", {"start_ns": 1, "end_ns": 2, "wait_s": "nan"}, "wait_s must be a finite number, got 'nan'"),
        ("/v1/window", {"start_ns": 1, "end_ns": 2, "wait_s": -1}, "wait_s must be between 0.0 and 30.0, got -1.0"),
        ("/v1/window", {"start_ns": now, "end_ns": now + 10**15, "wait_s": 1e9}, "wait_s must be between 0.0 and 30.0"),
    ):
        t0 = time.monotonic()
        r = httpx.get(url + path, params=params, timeout=10)
        assert r.status_code == 400 and r.json()["error"]["message"].startswith(says), (params, r.text)
        assert time.monotonic() - t0 < 5  # refused, not waited on
    for instant in (True, -5, 1.5):
        r = httpx.post(f"{url}/v1/marks", json={"name": "m", "wall_ns": instant})
        assert r.status_code == 400 and r.json()["error"]["message"].startswith("wall_ns must be an integer >= 0")
    assert httpx.get(url + "/v1/samples", params={"since_seq": -1, "limit": 10_000}).status_code == 200
    ok = httpx.get(url + "/v1/window", params={"start_ns": now - 10**8, "end_ns": now, "wait_s": 30}, timeout=40)
    assert ok.status_code == 200


class _WebPage(BaseHTTPRequestHandler):
    """A loopback service that is not a twin GPU device: every path answers a 200 HTML page."""

    def do_GET(self) -> None:
        page = b"<html>not a GPU</html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(page)))
        self.end_headers()
        self.wfile.write(page)

    def log_message(self, format: str, *args: object) -> None:
        return


def test_a_twin_url_that_is_no_twin_gpu_never_reports_ready(scripted_server):
    """Issue 45: against a closed port or a URL that answers something else, the sidecar printed its ready line and
    answered /-/healthy 200 (what a world waits for). It now exits 4 before that, naming the URL and the fix."""
    page = ThreadingHTTPServer(("127.0.0.1", 0), _WebPage)
    threading.Thread(target=page.serve_forever, daemon=True).start()
    _, _, sampler_url = scripted_server  # a JSON service, but a sampler's /v1/info, not a twin's
    try:
        for url, says in (
            (f"http://127.0.0.1:{free_port()}", "is not answering (ConnectionRefusedError"),
            (
                f"http://127.0.0.1:{page.server_address[1]}",
                "is not a twin GPU device: GET /v1/info answered twin_bad_json",
            ),
            (sampler_url, 'is not a twin GPU device: GET /v1/info answered a JSON object without "twin": true'),
        ):
            argv = [sys.executable, "-m", "harness", "sampler", "serve", "--probe", "twin", "--twin-url", url]
            r = subprocess.run([*argv, "--port", "0"], capture_output=True, text=True, timeout=30)
            assert r.returncode == 4, (url, r.stdout, r.stderr)
            assert "sampler listening" not in r.stdout and "Traceback" not in r.stderr
            assert "error: " in r.stderr and url in r.stderr and says in r.stderr, r.stderr
            assert "fix: point --twin-url at a running `harness twin gpu`" in r.stderr
    finally:
        page.shutdown()
        page.server_close()


class _GatedProbe(ScriptedProbe):
    """A scripted probe whose reads wait on ``gate``: the first read of a restarted sampler held back at will."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()

    def read(self):
        self.gate.wait(10.0)
        return super().read()


def _until_ready(core: SamplerCore, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not core.ready():
        assert time.monotonic() < deadline, "the sampler took no sample"
        time.sleep(0.01)


def test_a_restarted_sampler_is_ready_only_after_its_own_first_sample(tmp_path: Path):
    """A restarted sampler reloads its predecessor's samples; it used to say ready on those before reading the GPU
    itself, so a window opened right after ``/-/ready`` bracketed the restart (``sampler_restart``) on a busy host."""
    first = SamplerCore(ScriptedProbe(), rate_hz=20.0, log_dir=tmp_path / "log").start()
    _until_ready(first)
    first.stop()
    probe = _GatedProbe()
    again = SamplerCore(probe, rate_hz=20.0, log_dir=tmp_path / "log").start()
    try:
        assert again.store.latest(usable=True) is not None  # the predecessor's samples are back in the ring
        assert not again.ready()
        probe.gate.set()
        _until_ready(again)
        t0 = wall_ns()
        time.sleep(0.3)
        w = again.window(t0, wall_ns(), wait_s=2.0)
        assert "sampler_restart" not in w.reasons, w.reasons
    finally:
        probe.gate.set()
        again.stop()
