"""The twin GPU's HTTP contract (docs/ARCHITECTURE.md) on the shared ``harness.core.httpserve`` layer, and ``serve``."""

from __future__ import annotations

import json
import math
import time
from typing import Any, Callable

from harness.core.errors import ServiceUnavailableError
from harness.core.httpserve import Request, Response, Router, error, make_server, serve_until_signal
from harness.twin.device.gpu import TwinGpu
from harness.twin.profile import TwinProfile

Reply = Response | dict[str, Any]
MAX_INSTANTS = 1200
"""The most instants one ``GET /v1/states`` answers (two minutes of a 10 Hz sampler)."""


FAULT_NAMES = frozenset({"counter_reset", "uuid_change", "probe_delay_ms", "probe_error", "settings_denied"})
"""The twin GPU's fault hooks (``POST /v1/faults``; an empty body clears them)."""
NO_PERMISSION = "Insufficient Permissions (twin fault settings_denied: as NVML_ERROR_NO_PERMISSION without root)"
"""What the clock setters answer (403) while the ``settings_denied`` fault is on."""


def build_router(gpu: TwinGpu) -> Router:
    """HTTP routes of the device contract (docs/ARCHITECTURE.md)."""
    r = Router()
    r.add("GET", "/health", lambda req: {"ok": True})
    r.add("GET", "/v1/info", lambda req: gpu.info())
    r.add("GET", "/v1/clock", lambda req: gpu.clock_info())
    r.add("GET", "/v1/profile", lambda req: gpu.profile.model_dump(mode="json"))

    def probe_faults() -> Response | bool:
        """The injected probe faults of a read: sleeps ``probe_delay_ms``; the 500 of ``probe_error``, else whether
        the read was delayed."""
        delay = gpu.faults.get("probe_delay_ms")
        if delay:
            time.sleep(delay / 1000.0)
        err = gpu.faults.get("probe_error")
        return error(500, f"twin probe error: {err}") if err else bool(delay)

    def state(req: Request) -> Reply:
        fault = probe_faults()
        return fault if isinstance(fault, Response) else gpu.state()

    def states(req: Request) -> Reply:
        """Readings at past wall instants (``?at_wall_ns=A,B,...``, at most ``MAX_INSTANTS``), each stamped with its own
        instant. A slow-probe fault answers like a late driver instead: one reading of now, not dated
        (``"dated": false``), so the sampler stamps it by its call, as it does NVML's."""
        try:
            walls = [int(x) for x in req.query.get("at_wall_ns", "").split(",") if x.strip()]
        except ValueError:
            return error(400, "at_wall_ns must be a comma-separated list of wall epoch ns (integers)")
        if not walls or len(walls) > MAX_INSTANTS:
            return error(400, f"at_wall_ns needs 1 to {MAX_INSTANTS} instants, got {len(walls)}")
        fault = probe_faults()
        if isinstance(fault, Response):
            return fault
        if fault:
            return {"dated": False, "states": [gpu.state()]}
        return {"dated": True, "states": gpu.states_at(walls)}

    def lease(req: Request) -> Reply:
        body = req.json()
        eid = str(body.get("engine_id") or "")
        if not eid:
            return error(400, "engine_id is required")
        try:
            mem = float(body.get("memory_mb", 0))
            lease_s = float(body.get("lease_s", 30.0))
            pid = int(body["pid"]) if body.get("pid") is not None else None
        except (TypeError, ValueError):
            return error(400, "memory_mb and lease_s must be numbers, pid an integer")
        if not (math.isfinite(mem) and mem >= 0 and math.isfinite(lease_s) and lease_s > 0):
            return error(400, f"memory_mb must be >= 0 and lease_s > 0 (finite), got {mem!r} and {lease_s!r}")
        ok, free = gpu.lease(eid, mem, lease_s, pid)
        if not ok:
            return error(
                507,
                f"CUDA out of memory (twin): tried to reserve {mem:.0f} MiB, "
                f"{max(free, 0):.0f} MiB free of {gpu.p.memory_total_mb} MiB",
                memory_free_mb=free,
            )
        return {"ok": True, "memory_free_mb": free, "launch_seq": gpu.launch_seq}

    def activity(req: Request) -> Reply:
        body = req.json()
        try:
            raw = body["events"] if "events" in body else [body]
            events = [
                (
                    None if e.get("at_ns") is None else int(e["at_ns"]),
                    bool(e.get("busy")),
                    float(e.get("dynamic_power_w", 0.0)),
                    float(e.get("util", 0.0)),
                )
                for e in raw
            ]
        except (TypeError, ValueError, AttributeError, KeyError):
            return error(
                400,
                "activity: busy, dynamic_power_w, util (numbers) and optional "
                'at_ns (device ns), or {"events": [...]} of those',
            )
        out = gpu.post_events(req.params["eid"], events)
        if out is None:
            return error(404, f"no lease for engine {req.params['eid']} (expired or released)")
        return {
            "clock_factor": out[0],
            "device_ns": out[1],
            "thermal_factor": gpu.thermal_factor(),
            "power_limit_w": gpu.limit_w,
            "sm_clock_locked_mhz": gpu.locked_mhz,
        }

    def release(req: Request) -> Reply:
        found = gpu.release(req.params["eid"])
        return {"ok": True, "found": found, "memory_free_mb": gpu.memory_free_mb()}

    def release_pid(req: Request) -> Reply:
        try:
            pid = int(req.query["pid"])
        except (KeyError, ValueError):
            return error(400, "DELETE /v1/engines needs ?pid=N (the server process)")
        return {"ok": True, "released": gpu.release_pid(pid), "memory_free_mb": gpu.memory_free_mb()}

    def truth(req: Request) -> Reply:
        try:
            start, end = int(req.query["start_ns"]), int(req.query["end_ns"])
        except (KeyError, ValueError):
            return error(400, "start_ns and end_ns (wall epoch ns) are required")
        if end < start:
            return error(400, "end_ns must be >= start_ns")
        return gpu.truth_energy(start, end)

    def power_limit(req: Request) -> Reply:
        body = req.json() or {}
        try:
            watts = float(body["power_limit_w"])
        except (KeyError, TypeError, ValueError):
            return error(400, "power_limit_w (watts, a number) is required")
        try:
            return gpu.set_power_limit(watts)
        except ValueError as exc:
            return error(400, str(exc), code="invalid_argument", **gpu.power_limits())

    def faults(req: Request) -> Reply:
        """Test hooks (docs/twin.md): each known name with a value it can take, else 400 naming it (an unknown name
        used to be dropped, a negative delay made every later ``/v1/state`` a 500)."""
        body = req.json()
        unknown = sorted(set(body) - FAULT_NAMES)
        if unknown:
            return error(
                400, f"unknown fault(s) {', '.join(map(repr, unknown))}; known: {', '.join(sorted(FAULT_NAMES))}"
            )
        delay = body.get("probe_delay_ms")
        if delay is not None and (
            isinstance(delay, bool) or not isinstance(delay, (int, float)) or not 0 <= delay <= 60_000
        ):
            return error(400, f"probe_delay_ms must be a number of ms in [0, 60000], got {delay!r}")
        if "settings_denied" in body and not isinstance(body["settings_denied"], bool):
            return error(400, f"settings_denied must be true or false, got {body['settings_denied']!r}")
        if body.get("probe_error") is not None and not isinstance(body["probe_error"], str):
            return error(400, f"probe_error must be a message (string) or null, got {body['probe_error']!r}")
        return gpu.apply_faults(body)

    def denied() -> Response | None:
        """403 while ``settings_denied`` is on: a board setter refused as NVML refuses a user without root."""
        return error(403, NO_PERMISSION, code="no_permission") if gpu.faults.get("settings_denied") else None

    def unlock_clocks(req: Request) -> Reply:
        return denied() or gpu.lock_sm_clock(None)

    def lock_clocks(req: Request) -> Reply:
        if (no := denied()) is not None:
            return no
        body = req.json() or {}
        raw = body.get("sm_clock_locked_mhz", "missing")
        if raw is not None and (isinstance(raw, bool) or not isinstance(raw, int)):  # 1410.7 is refused, not truncated
            return error(400, f"sm_clock_locked_mhz (MHz, an integer; null unlocks) is required, got {raw!r}")
        mhz = raw
        try:
            return gpu.lock_sm_clock(mhz)
        except ValueError as exc:
            return error(400, str(exc), code="invalid_argument", **gpu.clocks())

    r.add("GET", "/v1/state", state)
    r.add("GET", "/v1/states", states)
    r.add("POST", "/v1/engines", lease)
    r.add("POST", "/v1/engines/{eid}/activity", activity)
    r.add("DELETE", "/v1/engines/{eid}", release)
    r.add("DELETE", "/v1/engines", release_pid)
    r.add("GET", "/truth/energy", truth)
    r.add("POST", "/v1/faults", faults)
    r.add("GET", "/v1/power_limit", lambda req: gpu.power_limits())
    r.add("POST", "/v1/power_limit", power_limit)
    r.add("GET", "/v1/clocks", lambda req: gpu.clocks())
    r.add("POST", "/v1/clocks", lock_clocks)
    r.add("DELETE", "/v1/clocks", unlock_clocks)
    return r


def serve(
    port: int,
    profile: TwinProfile,
    seed: int = 0,
    time_scale: float = 1.0,
    host: str = "127.0.0.1",
    announce: Callable[..., None] = print,
    index: int = 0,
    memory_release_s: float = 0.0,
) -> None:
    """Run the device until SIGTERM/SIGINT. ``port`` 0 picks a free port; the ready line names the URL."""
    gpu = TwinGpu(profile, seed=seed, time_scale=time_scale, index=index, memory_release_s=memory_release_s)
    try:
        server = make_server(host, port, build_router(gpu), server_header="twin-gpu")
    except OSError as exc:
        raise ServiceUnavailableError(
            f"cannot bind the twin GPU to {host}:{port}: {exc.strerror or exc}",
            fix="pick another --port (0 = any free port), or stop what holds this one",
        ) from None
    gpu.start()
    actual = server.server_address[1]
    announce(
        json.dumps(
            {
                "event": "ready",
                "service": "twin-gpu",
                "url": f"http://{host}:{actual}",
                "port": actual,
                "hardware": profile.hardware,
                "time_scale": time_scale,
                "seed": seed,
            }
        ),
        flush=True,
    )
    serve_until_signal(server, on_stop=gpu.stop)
