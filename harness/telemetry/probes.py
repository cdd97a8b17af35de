"""Probes: one reading of one GPU's state. ``NvmlProbe`` (real GPU, nvidia-ml-py) and ``TwinProbe`` (twin device).

A probe's ``read()`` never raises: a failed or unsupported field is None (never 0) and failures are listed in
``errors``. Only the sampler loop calls ``read()``; HTTP scrapes never do.
"""

from __future__ import annotations

import http.client
import json
import socket
from typing import Any, Protocol
from urllib.parse import urlsplit

from harness.errors import ServiceUnavailableError, UsageError
from harness.telemetry.windows import STATE_FIELDS
from harness.timeutil import mono_ns, wall_ns


class Probe(Protocol):
    """What the sampler needs from a GPU backend."""

    kind: str

    def read(self) -> dict[str, Any]:
        """The ``STATE_FIELDS`` plus ``device_ns`` (None = use wall) and ``errors`` (list of str). Never raises."""
        ...

    def identity(self) -> dict[str, Any]:
        """Static facts: name, uuid, driver_version, power limits, backend details."""
        ...

    def close(self) -> None: ...


def empty_reading(error: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {f: None for f in STATE_FIELDS}
    out["device_ns"] = None
    out["errors"] = [error] if error else []
    return out


def _quickack(sock: socket.socket | None) -> None:
    """Ask Linux to ACK at once: a server that writes headers and body separately (Nagle on) otherwise stalls
    every keep-alive response by the 40 ms delayed-ACK timer."""
    if sock is not None and hasattr(socket, "TCP_QUICKACK"):
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK, 1)
        except OSError:
            pass


class TwinProbe:
    """Reads ``GET /v1/state`` of a twin GPU device (``harness twin gpu``) over one keep-alive connection."""

    kind = "twin"

    def __init__(self, url: str, timeout_s: float = 2.0) -> None:
        parts = urlsplit(url if "://" in url else f"http://{url}")
        if parts.scheme != "http" or not parts.hostname:
            raise UsageError(f"twin device URL must be http://HOST:PORT, got {url!r}", fix="pass --twin-url http://127.0.0.1:18100")
        self.url = f"http://{parts.hostname}:{parts.port or 80}"
        self._host, self._port, self._timeout = parts.hostname, parts.port or 80, timeout_s
        self._conn: http.client.HTTPConnection | None = None

    def _get(self, path: str) -> tuple[int, bytes]:
        for attempt in (0, 1):  # one retry on a connection the server closed between calls
            if self._conn is None:
                self._conn = http.client.HTTPConnection(self._host, self._port, timeout=self._timeout)
            try:
                if self._conn.sock is None:
                    self._conn.connect()
                    self._conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                _quickack(self._conn.sock)
                self._conn.request("GET", path)
                resp = self._conn.getresponse()
                _quickack(self._conn.sock)
                body = resp.read()
                if resp.will_close:
                    self._conn.close()
                    self._conn = None
                return resp.status, body
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                self._drop()
                if attempt:
                    raise
            except Exception:
                self._drop()
                raise
        raise AssertionError("unreachable")

    def _drop(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def read(self) -> dict[str, Any]:
        try:
            status, body = self._get("/v1/state")
        except (OSError, http.client.HTTPException) as exc:
            return empty_reading(f"twin_unreachable: {type(exc).__name__}: {exc}")
        try:
            state = json.loads(body)
        except ValueError:
            return empty_reading(f"twin_bad_json: http {status}")
        if status != 200 or not isinstance(state, dict):
            msg = state.get("error") if isinstance(state, dict) else None
            if isinstance(msg, dict):
                msg = msg.get("message")
            return empty_reading(f"twin_http_{status}: {msg or body[:200].decode(errors='replace')}")
        out = empty_reading()
        for f in STATE_FIELDS:
            out[f] = state.get(f)
        out["device_ns"] = state.get("device_ns")
        out["read_wall_ns"], out["read_mono_ns"] = state.get("wall_ns"), state.get("mono_ns")
        errs = state.get("errors") or []
        if isinstance(errs, str):
            errs = [errs]
        err = state.get("error")
        if err:
            errs = [*errs, err.get("message", str(err)) if isinstance(err, dict) else str(err)]
        out["errors"] = [f"twin: {e}" for e in errs]
        return out

    def identity(self) -> dict[str, Any]:
        try:
            status, body = self._get("/v1/info")
            info = json.loads(body) if status == 200 else {}
        except (OSError, http.client.HTTPException, ValueError) as exc:
            raise ServiceUnavailableError(
                f"twin GPU device at {self.url} is not answering ({exc})", fix="start it with `harness twin gpu --port P` or fix --twin-url"
            ) from None
        keys = ("name", "uuid", "driver_version", "hardware", "profile", "power_limit_w", "memory_total_mb", "time_scale", "seed", "twin")
        return {"backend": "twin", "twin_url": self.url, **{k: info.get(k) for k in keys}}

    def close(self) -> None:
        self._drop()


class NvmlProbe:
    """Reads one physical GPU through NVML (``nvidia-ml-py``, module ``pynvml``, imported lazily).

    Power: ``NVML_FI_DEV_POWER_INSTANT`` / ``NVML_FI_DEV_POWER_AVERAGE`` field values (GPU scope); when the instant
    field is unsupported ``power_w`` falls back to ``nvmlDeviceGetPowerUsage`` (a 1 s average on Ampere and newer,
    recorded in ``identity()["power_w_source"]``). A field that answers NOT_SUPPORTED is not asked again.
    """

    kind = "nvml"

    def __init__(self, gpu_index: int = 0) -> None:
        try:
            import pynvml  # nvidia-ml-py
        except ImportError:
            raise ServiceUnavailableError("nvidia-ml-py is not installed", fix="pip install nvidia-ml-py") from None
        self._nv = pynvml
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            raise ServiceUnavailableError(
                f"NVML is not available ({exc}): no NVIDIA driver or GPU on this machine",
                fix="run on a GPU host (Docker: --gpus all) or use --probe twin",
            ) from None
        try:
            count = pynvml.nvmlDeviceGetCount()
            if not 0 <= gpu_index < count:
                raise UsageError(f"--gpu-index {gpu_index} out of range: this host has {count} GPU(s)", fix=f"pick 0..{count - 1}")
            self._h = pynvml.nvmlDeviceGetHandleByIndex(gpu_index)
        except pynvml.NVMLError as exc:
            pynvml.nvmlShutdown()
            raise ServiceUnavailableError(f"cannot open GPU {gpu_index} through NVML: {exc}", fix="check nvidia-smi") from None
        self.gpu_index = gpu_index
        self._unsupported: set[str] = set()
        self._power_w_source = "field_instant"
        self._static = {
            "name": self._call("name", pynvml.nvmlDeviceGetName, self._h, errors=[]),
            "driver_version": self._call("driver_version", pynvml.nvmlSystemGetDriverVersion, errors=[]),
        }

    def _call(self, key: str, fn: Any, *args: Any, errors: list[str]) -> Any:
        """Call an NVML function; NOT_SUPPORTED -> None (and never again), other errors -> None + recorded."""
        if key in self._unsupported:
            return None
        nv = self._nv
        try:
            val = fn(*args)
        except nv.NVMLError as exc:
            if getattr(exc, "value", None) in (nv.NVML_ERROR_NOT_SUPPORTED, getattr(nv, "NVML_ERROR_FUNCTION_NOT_FOUND", -1)):
                self._unsupported.add(key)
            else:
                errors.append(f"nvml {key}: {exc}")
            return None
        except AttributeError:  # an older binding without this function
            self._unsupported.add(key)
            return None
        return val.decode() if isinstance(val, bytes) else val

    def _power_fields(self, errors: list[str]) -> tuple[float | None, float | None]:
        nv = self._nv
        if "power_fields" in self._unsupported:
            return None, None
        ids = [(nv.NVML_FI_DEV_POWER_INSTANT, nv.NVML_POWER_SCOPE_GPU), (nv.NVML_FI_DEV_POWER_AVERAGE, nv.NVML_POWER_SCOPE_GPU)]
        try:
            vals = nv.nvmlDeviceGetFieldValues(self._h, ids)
        except nv.NVMLError as exc:
            if getattr(exc, "value", None) == nv.NVML_ERROR_NOT_SUPPORTED:
                self._unsupported.add("power_fields")
            else:
                errors.append(f"nvml power fields: {exc}")
            return None, None
        out: list[float | None] = []
        for v in vals:
            if v.nvmlReturn != nv.NVML_SUCCESS:
                out.append(None)
                continue
            raw = {0: v.value.dVal, 1: v.value.uiVal, 2: v.value.ulVal, 3: v.value.ullVal, 4: v.value.sllVal, 5: v.value.siVal}.get(v.valueType, v.value.uiVal)
            out.append(raw / 1000.0)  # mW -> W
        if out[0] is None and out[1] is None:
            self._unsupported.add("power_fields")
        return out[0], out[1]

    def read(self) -> dict[str, Any]:
        nv, h = self._nv, self._h
        errors: list[str] = []
        out = empty_reading()
        out.update(self._static)
        out["uuid"] = self._call("uuid", nv.nvmlDeviceGetUUID, h, errors=errors)
        out["energy_mj"] = self._call("energy", nv.nvmlDeviceGetTotalEnergyConsumption, h, errors=errors)
        inst, avg = self._power_fields(errors)
        if inst is None:
            legacy = self._call("power_usage", nv.nvmlDeviceGetPowerUsage, h, errors=errors)
            if legacy is not None:
                inst, self._power_w_source = legacy / 1000.0, "nvmlDeviceGetPowerUsage"
        out["power_w"], out["power_avg_w"] = inst, avg
        out["temperature_c"] = self._call("temperature", nv.nvmlDeviceGetTemperature, h, nv.NVML_TEMPERATURE_GPU, errors=errors)
        out["sm_clock_mhz"] = self._call("sm_clock", nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_SM, errors=errors)
        out["mem_clock_mhz"] = self._call("mem_clock", nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_MEM, errors=errors)
        util = self._call("utilization", nv.nvmlDeviceGetUtilizationRates, h, errors=errors)
        out["utilization_pct"] = float(util.gpu) if util is not None else None
        mem = self._call("memory_v2", nv.nvmlDeviceGetMemoryInfo, h, nv.nvmlMemory_v2, errors=errors)
        if mem is not None:
            mib = 1024 * 1024
            out["memory_total_mb"] = mem.total / mib
            out["memory_reserved_mb"] = mem.reserved / mib
            out["memory_used_mb"] = mem.used / mib
            out["memory_free_mb"] = mem.free / mib
        enforced = self._call("enforced_limit", nv.nvmlDeviceGetEnforcedPowerLimit, h, errors=errors)
        mgmt = self._call("management_limit", nv.nvmlDeviceGetPowerManagementLimit, h, errors=errors)
        out["power_limit_w"] = enforced / 1000.0 if enforced is not None else None
        out["power_management_limit_w"] = mgmt / 1000.0 if mgmt is not None else None
        reasons = self._call("clock_events", getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or _missing, h, errors=errors)
        if reasons is None and "clock_events" in self._unsupported:
            reasons = self._call("throttle_reasons", nv.nvmlDeviceGetCurrentClocksThrottleReasons, h, errors=errors)
        out["clock_event_reasons"] = int(reasons) if reasons is not None else None
        out["device_ns"] = None  # NVML has no clock of its own here: device time = wall time
        out["errors"] = errors
        return out

    def identity(self) -> dict[str, Any]:
        errors: list[str] = []
        nv = self._nv
        return {
            "backend": "nvml",
            "gpu_index": self.gpu_index,
            **self._static,
            "uuid": self._call("uuid", nv.nvmlDeviceGetUUID, self._h, errors=errors),
            "nvml_version": self._call("nvml_version", nv.nvmlSystemGetNVMLVersion, errors=errors),
            "power_limit_w": _mw(self._call("enforced_limit", nv.nvmlDeviceGetEnforcedPowerLimit, self._h, errors=errors)),
            "power_default_limit_w": _mw(self._call("default_limit", nv.nvmlDeviceGetPowerManagementDefaultLimit, self._h, errors=errors)),
            "power_w_source": self._power_w_source,
            "unsupported": sorted(self._unsupported),
            "twin": False,
        }

    def close(self) -> None:
        try:
            self._nv.nvmlShutdown()
        except Exception:  # noqa: BLE001 - shutting down; nothing to report to
            pass


def _mw(v: Any) -> float | None:
    return v / 1000.0 if v is not None else None


def _missing(*_: Any) -> Any:
    raise AttributeError("not in this nvidia-ml-py")


def make_probe(kind: str, *, gpu_index: int = 0, twin_url: str | None = None) -> Probe:
    """Build the probe the CLI asked for."""
    if kind == "nvml":
        return NvmlProbe(gpu_index)
    if kind == "twin":
        if not twin_url:
            raise UsageError("--probe twin needs --twin-url", fix="pass --twin-url http://127.0.0.1:18100")
        return TwinProbe(twin_url)
    raise UsageError(f"unknown probe {kind!r}", fix="use --probe nvml or --probe twin")


READ_STAMP_SLACK_NS = 1_000_000


def probe_timing(probe: Probe) -> tuple[dict[str, Any], int, int, float]:
    """Read once and stamp it: (reading, wall ns, mono ns, latency ms).

    The stamp is the instant the backend says it took the reading (``read_wall_ns`` / ``read_mono_ns`` in the
    reading: the twin device stamps its state on the shared host clocks) when that instant lies within the call;
    otherwise the call's midpoint. A slow or descheduled backend thus does not shift the reading in time.
    """
    w0, m0 = wall_ns(), mono_ns()
    reading = probe.read()
    w1, m1 = wall_ns(), mono_ns()
    rw, rm = reading.pop("read_wall_ns", None), reading.pop("read_mono_ns", None)
    t_wall, t_mono = (w0 + w1) // 2, (m0 + m1) // 2
    if isinstance(rw, int) and w0 - READ_STAMP_SLACK_NS <= rw <= w1 + READ_STAMP_SLACK_NS:
        t_wall = rw
        if isinstance(rm, int) and m0 - READ_STAMP_SLACK_NS <= rm <= m1 + READ_STAMP_SLACK_NS:
            t_mono = rm  # same monotonic clock (no time namespace between the two processes)
        else:
            t_mono = m0 + (rw - w0)
    return reading, t_wall, t_mono, (m1 - m0) / 1e6
