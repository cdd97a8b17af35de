"""The twin GPU device as a real process on 127.0.0.1: every endpoint, physics, faults, seeds."""

from __future__ import annotations

import json
import time

import httpx
import pytest
from _twin_helpers import twin_gpu

from harness.core.clocks import wall_ns
from harness.twin.profile import load_profile


@pytest.fixture(scope="module")
def gpu():
    with twin_gpu(time_scale=50.0, seed=7) as g:
        yield g


def test_identity_clock_profile(gpu):
    assert gpu.get("/health").json() == {"ok": True}
    info = gpu.get("/v1/info").json()
    assert "twin" in info["name"].lower() and info["uuid"].startswith("GPU-twin-") and "twin" in info["driver_version"]
    assert info["hardware"] == "twin:rtx4060-laptop" and info["twin"] is True
    assert info["power_limit_w"] == 80.0 and info["memory_total_mb"] == 8192
    assert info["time_scale"] == 50.0 and info["seed"] == 7
    c1 = gpu.get("/v1/clock").json()
    time.sleep(0.2)
    c2 = gpu.get("/v1/clock").json()
    # the device clock runs 50x faster than the wall clock and equals anchor + (mono - anchor) * scale
    assert c2["device_ns"] - c1["device_ns"] == pytest.approx(50 * (c2["mono_ns"] - c1["mono_ns"]), rel=1e-6)
    assert c1["device_ns"] == c1["anchor_wall_ns"] + int((c1["mono_ns"] - c1["anchor_mono_ns"]) * 50.0)
    prof = gpu.get("/v1/profile").json()
    assert prof == load_profile().model_dump(mode="json")
    assert gpu.get("/nope").status_code == 404


def test_state_fields_and_idle(gpu):
    s = gpu.get("/v1/state").json()
    for key in (
        "wall_ns",
        "mono_ns",
        "device_ns",
        "name",
        "uuid",
        "driver_version",
        "energy_mj",
        "power_w",
        "power_avg_w",
        "temperature_c",
        "sm_clock_mhz",
        "mem_clock_mhz",
        "utilization_pct",
        "memory_total_mb",
        "memory_reserved_mb",
        "memory_used_mb",
        "memory_free_mb",
        "power_limit_w",
        "power_management_limit_w",
        "clock_event_reasons",
    ):
        assert key in s and s[key] is not None, key
    assert s["clock_event_reasons"] & 0x1  # nothing ran: idle
    assert s["utilization_pct"] == 0 and s["power_w"] < 10


def test_lease_oom_cap_energy_release(gpu):
    free0 = gpu.get("/v1/state").json()["memory_free_mb"]
    r = gpu.post("/v1/engines", json={"engine_id": "a", "memory_mb": 5000, "lease_s": 30})
    assert r.status_code == 200 and r.json()["memory_free_mb"] == pytest.approx(free0 - 5000)
    r = gpu.post("/v1/engines", json={"engine_id": "b", "memory_mb": 5000, "lease_s": 30})
    assert r.status_code == 507 and "out of memory" in r.json()["error"]["message"]
    try:
        # moderate demand: not capped, full clocks
        r = gpu.post("/v1/engines/a/activity", json={"busy": True, "dynamic_power_w": 40.0, "util": 0.8}).json()
        assert r["clock_factor"] == 1.0
        time.sleep(0.15)
        s = gpu.get("/v1/state").json()
        assert 45 < s["power_w"] < 56 and not s["clock_event_reasons"] & 0x4 and s["utilization_pct"] == 80
        # demand above the 80 W limit: clocks drop and power sits at the limit
        r = gpu.post("/v1/engines/a/activity", json={"busy": True, "dynamic_power_w": 110.0, "util": 0.99}).json()
        assert 0.3 < r["clock_factor"] < 1.0
        time.sleep(0.3)
        s1 = gpu.get("/v1/state").json()
        assert s1["clock_event_reasons"] & 0x4 and not s1["clock_event_reasons"] & 0x1
        assert 79.0 < s1["power_w"] < 83.0 and s1["sm_clock_mhz"] < 2370
        time.sleep(0.4)
        s2 = gpu.get("/v1/state").json()
        counter_j = (s2["energy_mj"] - s1["energy_mj"]) / 1000.0
        truth = gpu.get("/truth/energy", params={"start_ns": s1["wall_ns"], "end_ns": s2["wall_ns"]}).json()
        assert truth["energy_j"] == pytest.approx(counter_j, rel=0.01)
        twin_s = (s2["device_ns"] - s1["device_ns"]) / 1e9
        assert truth["duration_s"] == pytest.approx(twin_s, rel=0.01)
        assert counter_j / twin_s == pytest.approx(81.0, abs=2.0)  # energy is the integral of the capped power
        assert s2["temperature_c"] > s["temperature_c"]  # heats under load
    finally:
        gpu.post("/v1/engines/a/activity", json={"busy": False, "dynamic_power_w": 0.0, "util": 0.0})
        assert httpx.delete(gpu.url + "/v1/engines/a").json()["found"] is True
    assert (
        gpu.post("/v1/engines/a/activity", json={"busy": True, "dynamic_power_w": 1.0, "util": 0.1}).status_code == 404
    )
    assert gpu.get("/v1/state").json()["memory_free_mb"] == free0


def test_lease_expires_without_heartbeat(gpu):
    assert gpu.post("/v1/engines", json={"engine_id": "short", "memory_mb": 100, "lease_s": 0.3}).status_code == 200
    assert gpu.get("/v1/state").json()["engines"] == 1
    time.sleep(0.6)
    assert gpu.get("/v1/state").json()["engines"] == 0


def test_truth_energy_bad_args(gpu):
    assert gpu.get("/truth/energy").status_code == 400
    now = wall_ns()
    assert gpu.get("/truth/energy", params={"start_ns": now, "end_ns": now - 1}).status_code == 400


def test_faults(gpu):
    e0 = gpu.get("/v1/state").json()
    assert gpu.post("/v1/faults", json={"counter_reset": True}).json()["ok"]
    e1 = gpu.get("/v1/state").json()
    assert e1["energy_mj"] < e0["energy_mj"]
    uuid = gpu.post("/v1/faults", json={"uuid_change": True}).json()["uuid"]
    assert uuid != e0["uuid"] and gpu.get("/v1/state").json()["uuid"] == uuid
    gpu.post("/v1/faults", json={"probe_delay_ms": 300})
    t = time.monotonic()
    gpu.get("/v1/state")
    assert time.monotonic() - t >= 0.29
    gpu.post("/v1/faults", json={"probe_error": "GPU is lost"})
    r = gpu.get("/v1/state")
    assert r.status_code == 500 and "GPU is lost" in r.json()["error"]["message"]
    assert gpu.post("/v1/faults", json={}).json()["faults"] == {}
    t = time.monotonic()
    assert gpu.get("/v1/state").status_code == 200 and time.monotonic() - t < 0.25


def test_settings_denied_refuses_clock_setters_as_nvml_without_root(gpu):
    from harness.gpu.sm_clocks import SmClockError, TwinClockDevice

    assert gpu.post("/v1/faults", json={"settings_denied": "yes"}).status_code == 400
    assert gpu.post("/v1/faults", json={"settings_denied": True}).json()["faults"] == {"settings_denied": True}
    r = gpu.post("/v1/clocks", json={"sm_clock_locked_mhz": 1410})
    assert r.status_code == 403 and "Insufficient Permissions" in r.json()["error"]["message"]
    assert httpx.delete(gpu.url + "/v1/clocks", timeout=5).status_code == 403
    assert gpu.get("/v1/clocks").json()["sm_clock_locked_mhz"] is None  # nothing changed; reads still work
    dev = TwinClockDevice(gpu.url)
    with pytest.raises(SmClockError) as exc:
        dev.lock(1410)
    assert "needs root" in exc.value.message and "CAP_SYS_ADMIN" in (exc.value.fix or "")
    gpu.post("/v1/faults", json={})
    dev.lock(1410)
    assert dev.clocks().locked_mhz == 1410
    dev.unlock()


def test_idle_bit_only_after_a_while_and_cooling(tmp_path):
    with twin_gpu(time_scale=2.0, seed=1, log_dir=str(tmp_path)) as g:
        g.post("/v1/engines", json={"engine_id": "x", "memory_mb": 1000, "lease_s": 30})
        g.post("/v1/engines/x/activity", json={"busy": True, "dynamic_power_w": 60.0, "util": 0.9})
        time.sleep(0.2)
        g.post("/v1/engines/x/activity", json={"busy": False, "dynamic_power_w": 0.0, "util": 0.0})
        right_after = g.get("/v1/state").json()
        assert not right_after["clock_event_reasons"] & 0x1
        time.sleep(0.8)  # > idle_after_s (1.2 twin s) at scale 2
        later = g.get("/v1/state").json()
        assert later["clock_event_reasons"] & 0x1 and later["sm_clock_mhz"] == 210


def test_thermal_slowdown_and_seed(tmp_path):
    prof = load_profile().model_dump(mode="json")
    prof["device"]["slowdown_temp_c"] = 45.0
    prof["device"]["thermal_tau_s"] = 5.0
    path = tmp_path / "hot.json"
    path.write_text(json.dumps(prof))
    with twin_gpu(time_scale=50.0, seed=3, profile=str(path), log_dir=str(tmp_path)) as g:
        g.post("/v1/engines", json={"engine_id": "x", "memory_mb": 1000, "lease_s": 30})
        g.post("/v1/engines/x/activity", json={"busy": True, "dynamic_power_w": 60.0, "util": 0.9})
        time.sleep(0.8)  # 40 twin s = 8 time constants
        s = g.get("/v1/state").json()
        assert s["temperature_c"] > 45 and s["clock_event_reasons"] & 0x20
        cf = g.post("/v1/engines/x/activity", json={"busy": True, "dynamic_power_w": 60.0, "util": 0.9}).json()[
            "clock_factor"
        ]
        assert cf < 1.0
        uuid3 = g.get("/v1/info").json()["uuid"]
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    with (
        twin_gpu(time_scale=50.0, seed=3, log_dir=str(tmp_path / "a")) as g2,
        twin_gpu(time_scale=50.0, seed=4, log_dir=str(tmp_path / "b")) as g3,
    ):
        assert g2.get("/v1/info").json()["uuid"] == uuid3
        assert g3.get("/v1/info").json()["uuid"] != uuid3


def test_past_instants_read_back_exactly_as_they_were_read_live(gpu):
    """``GET /v1/states`` answers the state at past wall instants from the device's history: what a live ``/v1/state``
    read at that instant said (a late sampler reads the instants it missed). Older than the history is an error entry;
    a slow-probe fault answers like a late driver (one undated reading of now)."""
    eid = "history-test"
    assert gpu.post("/v1/engines", json={"engine_id": eid, "memory_mb": 1000, "lease_s": 30}).status_code == 200
    live = []
    for i in range(24):
        if i in (4, 16):
            gpu.post(f"/v1/engines/{eid}/activity", json={"busy": i == 4, "dynamic_power_w": 55.0, "util": 1.0})
        live.append(gpu.get("/v1/state").json())
        time.sleep(0.03)
    httpx.delete(f"{gpu.url}/v1/engines/{eid}", trust_env=False)
    walls = [s["wall_ns"] for s in live]
    ans = gpu.get("/v1/states", params={"at_wall_ns": ",".join(map(str, walls))}).json()
    assert ans["dated"] is True and [s["wall_ns"] for s in ans["states"]] == walls
    # A wall instant maps to the device clock through a (mono, wall) pair read in each call: a preemption between the
    # two reads moves it by that much x the time scale. Values must agree where both reads fall in one jitter period
    # (the power's seeded noise changes at its edges) and within 5 ms of device time; most pairs must qualify.
    clock = gpu.get("/v1/clock").json()
    period = int(load_profile().device.tick_ms * 1e6 * clock["time_scale"])
    checked = 0
    for a, b in zip(live, ans["states"]):
        assert abs(a["device_ns"] - b["device_ns"]) < 50_000_000, (a["device_ns"], b["device_ns"])  # < 1 ms of wall
        same_period = (a["device_ns"] - clock["anchor_wall_ns"]) // period == (
            b["device_ns"] - clock["anchor_wall_ns"]
        ) // period
        if not same_period or abs(a["device_ns"] - b["device_ns"]) > 5_000_000:
            continue
        checked += 1
        for key in (
            "power_w",
            "utilization_pct",
            "clock_event_reasons",
            "sm_clock_mhz",
            "memory_used_mb",
            "engines",
            "uuid",
        ):
            assert a[key] == b[key], (key, a[key], b[key])
        assert abs(a["energy_mj"] - b["energy_mj"]) <= 2 + a["power_w"] * 5  # 5 ms of device time at most
        assert abs(a["temperature_c"] - b["temperature_c"]) <= 0.15
    assert checked >= 18, checked
    assert len({s["power_w"] for s in ans["states"]}) >= 3  # idle, loaded, idle again: the history is not one value
    old = gpu.get("/v1/states", params={"at_wall_ns": str(walls[0] - 10**13)}).json()["states"][0]
    assert "older than the device's history" in old["error"]
    for bad in ("", "x", ",".join(["1"] * 1201)):
        r = gpu.get("/v1/states", params={"at_wall_ns": bad})
        assert r.status_code == 400 and "at_wall_ns" in r.json()["error"]["message"]
    gpu.post("/v1/faults", json={"probe_delay_ms": 120})
    try:
        late = gpu.get("/v1/states", params={"at_wall_ns": f"{walls[0]},{walls[1]}"}).json()
    finally:
        gpu.post("/v1/faults", json={})
    assert late["dated"] is False and len(late["states"]) == 1


def test_a_lease_of_negative_or_endless_memory_is_refused(gpu):
    """Issue 38 A5: a negative lease made free memory 1,001,717 MB."""
    before = gpu.get("/v1/state").json()["memory_used_mb"]
    for body in ({"engine_id": "neg", "memory_mb": -1e6}, {"engine_id": "inf", "memory_mb": "inf"},
                 {"engine_id": "zero-lease", "memory_mb": 10, "lease_s": 0}):  # fmt: skip
        r = gpu.post("/v1/engines", json=body)
        assert r.status_code == 400 and "memory_mb must be >= 0" in r.json()["error"]["message"], r.text
    assert gpu.get("/v1/state").json()["memory_used_mb"] == before


def test_faults_and_clock_locks_take_only_what_they_can_run(gpu):
    """Issue 38 A5: unknown fault names were dropped, ``probe_delay_ms: -50`` made every later ``/v1/state`` a 500,
    and a lock at 1410.7 MHz was truncated to 1410 silently."""
    for body, says in (
        ({"probe_delay": 50}, "unknown fault(s) 'probe_delay'"),
        ({"probe_delay_ms": -50}, "probe_delay_ms must be"),
        ({"probe_delay_ms": "slow"}, "probe_delay_ms must be"),
        ({"probe_error": 7}, "probe_error must be"),
    ):
        r = gpu.post("/v1/faults", json=body)
        assert r.status_code == 400 and says in r.json()["error"]["message"], (body, r.text)
    assert gpu.get("/v1/state").status_code == 200
    r = gpu.post("/v1/clocks", json={"sm_clock_locked_mhz": 1410.7})
    assert r.status_code == 400 and "1410.7" in r.json()["error"]["message"]
    assert gpu.get("/v1/clocks").json()["sm_clock_locked_mhz"] is None
