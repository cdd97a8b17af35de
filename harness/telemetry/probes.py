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

from harness.core.clocks import mono_ns, wall_ns
from harness.core.errors import ServiceUnavailableError, UsageError
from harness.telemetry.fields import STATE_FIELDS, empty_reading


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

    # Optional: ``capabilities() -> dict`` (no GPU call, any thread): what the probe learnt while reading (which
    # sources answer, what is unsupported); the sampler merges it into its identity on every query.


class HistoryProbe(Probe, Protocol):
    """A probe whose device also answers for past instants (the twin GPU's history, as a driver's sample buffer).

    ``read_at(walls)`` returns ``(dated, readings)``: when ``dated``, one reading per wall instant, each the device's
    exact state at that instant (``read_wall_ns`` = the instant), so the call's latency does not blur it; when not
    (the device answered like a late driver), one reading stamped like ``read``'s (``call_stamp``)."""

    def read_at(self, walls: list[int]) -> tuple[bool, list[dict[str, Any]]]: ...


def has_history(probe: Probe) -> bool:
    """Whether ``probe`` can read past instants (``HistoryProbe``)."""
    return callable(getattr(probe, "read_at", None))


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
            raise UsageError(
                f"twin device URL must be http://HOST:PORT, got {url!r}", fix="pass --twin-url http://127.0.0.1:18100"
            )
        self.url = f"http://{parts.hostname}:{parts.port or 80}"
        self._host, self._port, self._timeout = parts.hostname, parts.port or 80, timeout_s
        self._conn: http.client.HTTPConnection | None = None
        self._no_history = False

    def _get(self, path: str) -> tuple[int, bytes]:
        for attempt in (0, 1):  # one retry on a connection the server closed between calls
            if self._conn is None:
                self._conn = http.client.HTTPConnection(self._host, self._port, timeout=self._timeout)
            try:
                if self._conn.sock is None:
                    self._conn.connect()
                    assert self._conn.sock is not None  # connect() opened it
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
        state, problem = _twin_json(status, body)
        return empty_reading(problem) if state is None else _twin_reading(state)

    def read_at(self, walls: list[int]) -> tuple[bool, list[dict[str, Any]]]:
        """The device's readings at past wall instants (``GET /v1/states``), see ``HistoryProbe``. A device without the
        route (an older twin) answers 404 once; from then on this reads now, undated, as ``read`` does."""
        if self._no_history:
            return False, [self.read()]
        try:
            status, body = self._get("/v1/states?at_wall_ns=" + ",".join(str(int(w)) for w in walls))
        except (OSError, http.client.HTTPException) as exc:
            return False, [empty_reading(f"twin_unreachable: {type(exc).__name__}: {exc}")]
        if status == 404:
            self._no_history = True
            return False, [self.read()]
        answer, problem = _twin_json(status, body)
        if answer is None:
            return False, [empty_reading(problem)]
        states = answer.get("states")
        if not isinstance(states, list) or not states or not all(isinstance(x, dict) for x in states):
            return False, [empty_reading("twin_bad_answer: /v1/states without a list of states")]
        return bool(answer.get("dated")) and len(states) == len(walls), [_twin_reading(x) for x in states]

    def check(self) -> None:
        """Show that ``self.url`` is a twin GPU device before the sampler says it is ready: ``GET /v1/info`` answers
        ``"twin": true`` and ``GET /v1/state`` a reading. ``ServiceUnavailableError`` naming the URL otherwise (nothing
        answering, or something else: a twin engine, a web page, another service)."""
        fix = "point --twin-url at a running `harness twin gpu` (it prints its URL on its ready line)"
        try:
            status, body = self._get("/v1/info")
        except (OSError, http.client.HTTPException) as exc:
            raise ServiceUnavailableError(
                f"twin GPU device at {self.url} is not answering ({type(exc).__name__}: {exc})", fix=fix
            ) from None
        info, problem = _twin_json(status, body)
        if info is None or info.get("twin") is not True:
            what = problem or 'a JSON object without "twin": true'
            raise ServiceUnavailableError(f"{self.url} is not a twin GPU device: GET /v1/info answered {what}", fix=fix)
        reading = self.read()
        if reading["energy_mj"] is None and reading["power_w"] is None:
            errors = "; ".join(reading["errors"]) or "no energy or power"
            raise ServiceUnavailableError(
                f"the twin GPU device at {self.url} gave no reading on GET /v1/state ({errors})", fix=fix
            )

    def identity(self) -> dict[str, Any]:
        try:
            status, body = self._get("/v1/info")
            info = json.loads(body) if status == 200 else {}
        except (OSError, http.client.HTTPException, ValueError) as exc:
            raise ServiceUnavailableError(
                f"twin GPU device at {self.url} is not answering ({exc})",
                fix="start it with `harness twin gpu --port P` or fix --twin-url",
            ) from None
        keys = (
            "name",
            "uuid",
            "driver_version",
            "hardware",
            "profile",
            "power_limit_w",
            "memory_total_mb",
            "time_scale",
            "seed",
            "twin",
        )
        return {"backend": "twin", "twin_url": self.url, **{k: info.get(k) for k in keys}}

    def close(self) -> None:
        self._drop()


def _twin_json(status: int, body: bytes) -> tuple[dict[str, Any], None] | tuple[None, str]:
    """(the JSON object of a 200 answer, None), or (None, what went wrong)."""
    try:
        obj = json.loads(body)
    except ValueError:
        return None, f"twin_bad_json: http {status}"
    if status != 200 or not isinstance(obj, dict):
        msg = obj.get("error") if isinstance(obj, dict) else None
        if isinstance(msg, dict):
            msg = msg.get("message")
        return None, f"twin_http_{status}: {msg or body[:200].decode(errors='replace')}"
    return obj, None


def _twin_reading(state: dict[str, Any]) -> dict[str, Any]:
    """A probe reading from one twin state object (its ``wall_ns``/``mono_ns`` become the read stamps)."""
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


# NVML answers meaning "this GPU, driver or binding has no such thing": the probe stops asking. FUNCTION_NOT_FOUND is
# what nvidia-ml-py raises when the driver's library lacks the entry point (an older driver); ARGUMENT_VERSION_MISMATCH
# what a driver answers for a struct version it does not know (e.g. nvmlMemory_v2).
_ABSENT_CODES = ("NVML_ERROR_NOT_SUPPORTED", "NVML_ERROR_FUNCTION_NOT_FOUND", "NVML_ERROR_ARGUMENT_VERSION_MISMATCH")
_POWER_FIELDS = ("NVML_FI_DEV_POWER_INSTANT", "NVML_FI_DEV_POWER_AVERAGE")


def field_value(nv: Any, v: Any) -> float | int | None:
    """The value of one ``nvmlFieldValue_t`` by its ``valueType``; None unless its ``nvmlReturn`` is success."""
    if v.nvmlReturn != nv.NVML_SUCCESS:
        return None
    kinds = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}
    return getattr(v.value, kinds.get(v.valueType, "uiVal"))


class NvmlProbe:
    """Reads one physical GPU through NVML (``nvidia-ml-py``, module ``pynvml``, imported lazily).

    Power: ``NVML_FI_DEV_POWER_INSTANT`` / ``NVML_FI_DEV_POWER_AVERAGE`` field values (GPU scope); when the instant
    field is unsupported ``power_w`` falls back to ``nvmlDeviceGetPowerUsage`` (a 1 s average on Ampere and newer).
    Memory: ``nvmlDeviceGetMemoryInfo_v2``, else the v1 call (no ``reserved``; its ``used`` includes reserved memory).
    Clock events: ``nvmlDeviceGetCurrentClocksEventReasons``, else the deprecated ``...ThrottleReasons``.
    Every entry point is looked up by name at call time, so a binding without a (deprecated) wrapper loses only that
    value. An answer in ``_ABSENT_CODES`` (per call or per field) is not asked again; ``capabilities()`` says which
    sources are in use. The constructor reads once, so the capabilities are known before the first sample.
    """

    kind = "nvml"

    def __init__(self, gpu_index: int | str = 0) -> None:
        """``gpu_index``: an NVML index, or the GPU's UUID (``GPU-...``: what the harness opens, see
        ``harness.gpu.identity``)."""
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
        from harness.gpu.identity import open_handle

        try:
            count = pynvml.nvmlDeviceGetCount()
            if isinstance(gpu_index, int) and not 0 <= gpu_index < count:
                pynvml.nvmlShutdown()
                raise UsageError(
                    f"--gpu-index {gpu_index} out of range: this host has {count} GPU(s)", fix=f"pick 0..{count - 1}"
                )
            self._h = open_handle(pynvml, gpu_index)
        except pynvml.NVMLError as exc:
            pynvml.nvmlShutdown()
            raise ServiceUnavailableError(
                f"cannot open GPU {gpu_index} through NVML: {exc}", fix="check nvidia-smi"
            ) from None
        self.gpu_index = gpu_index
        self._unsupported: frozenset[str] = frozenset()  # replaced, never mutated: other threads read it
        self._absent = tuple(getattr(pynvml, c) for c in _ABSENT_CODES if hasattr(pynvml, c))
        self._power_w_source: str | None = None
        self._memory_source: str | None = None
        self._clock_events_source: str | None = None
        self._static = {
            "name": self._call("name", "nvmlDeviceGetName", self._h, errors=[]),
            "driver_version": self._call("driver_version", "nvmlSystemGetDriverVersion", errors=[]),
        }
        self.read()  # discover what this GPU, driver and binding support

    @property
    def handle(self) -> Any:
        """The NVML device handle (for checks that call nvidia-ml-py directly)."""
        return self._h

    def _mark_unsupported(self, key: str) -> None:
        self._unsupported = self._unsupported | {key}

    def _call(self, key: str, fname: str, *args: Any, errors: list[str]) -> Any:
        """Call the binding's ``fname``; an absent answer -> None (and never again), other errors -> None + recorded."""
        if key in self._unsupported:
            return None
        nv = self._nv
        fn = getattr(nv, fname, None)
        if fn is None:  # this nvidia-ml-py has no such wrapper (e.g. a removed deprecated one)
            self._mark_unsupported(key)
            return None
        try:
            val = fn(*args)
        except nv.NVMLError as exc:
            if getattr(exc, "value", None) in self._absent:
                self._mark_unsupported(key)
            else:
                errors.append(f"nvml {key}: {exc}")
            return None
        return val.decode() if isinstance(val, bytes) else val

    def _power_fields(self, errors: list[str]) -> dict[str, float | None]:
        """Instant and average power (W) from one field-values call over the fields not known to be absent."""
        nv = self._nv
        names = [n for n in _POWER_FIELDS if n not in self._unsupported and hasattr(nv, n)]
        out: dict[str, float | None] = dict.fromkeys(_POWER_FIELDS)
        scope = getattr(nv, "NVML_POWER_SCOPE_GPU", 0)
        vals = (
            self._call(
                "power_fields",
                "nvmlDeviceGetFieldValues",
                self._h,
                [(getattr(nv, n), scope) for n in names],
                errors=errors,
            )
            if names
            else None
        )
        for name, v in zip(names, vals or ()):
            raw = field_value(nv, v)
            if raw is not None:
                out[name] = raw / 1000.0  # mW -> W
            elif v.nvmlReturn in self._absent:
                self._mark_unsupported(name)
            else:
                errors.append(f"nvml {name}: {nv.NVMLError(v.nvmlReturn)}")
        return out

    def _memory(self, out: dict[str, Any], errors: list[str]) -> None:
        nv, mib = self._nv, 1024 * 1024
        version = getattr(nv, "nvmlMemory_v2", None)
        mem = self._call("memory_v2", "nvmlDeviceGetMemoryInfo", self._h, version, errors=errors) if version else None
        if mem is None and "memory_v2" not in self._unsupported and version:
            return  # a transient v2 error: recorded; v1 would mix semantics
        if mem is not None:
            self._memory_source = "nvmlDeviceGetMemoryInfo_v2"
            out["memory_reserved_mb"] = mem.reserved / mib
        else:
            mem = self._call("memory_v1", "nvmlDeviceGetMemoryInfo", self._h, errors=errors)
            if mem is None:
                return
            self._memory_source = "nvmlDeviceGetMemoryInfo (v1: used includes reserved)"
        out["memory_total_mb"], out["memory_used_mb"], out["memory_free_mb"] = (
            mem.total / mib,
            mem.used / mib,
            mem.free / mib,
        )

    def _clock_events(self, errors: list[str]) -> int | None:
        for key, fname in (
            ("clock_events", "nvmlDeviceGetCurrentClocksEventReasons"),
            ("throttle_reasons", "nvmlDeviceGetCurrentClocksThrottleReasons"),
        ):
            if key in self._unsupported:
                continue
            val = self._call(key, fname, self._h, errors=errors)
            if val is not None:
                self._clock_events_source = fname
                return int(val)
            if key not in self._unsupported:
                return None  # a transient error on the preferred call: recorded, no fallback
        return None

    def read(self) -> dict[str, Any]:
        nv, h = self._nv, self._h
        errors: list[str] = []
        out = empty_reading()
        out.update(self._static)
        out["uuid"] = self._call("uuid", "nvmlDeviceGetUUID", h, errors=errors)
        # The reading's instant is the energy counter's read, not the whole read's midpoint: a dozen NVML calls can
        # stall on a loaded host (a thread switched out for 100 ms), and a midpoint stamp then misplaces the counter
        # at a window edge by half the stall (seen: +9 % energy on a 1 s window under the parallel suite).
        w0, m0 = wall_ns(), mono_ns()
        out["energy_mj"] = self._call("energy", "nvmlDeviceGetTotalEnergyConsumption", h, errors=errors)
        fields = self._power_fields(errors)  # the instant power, right after: the same moment as the counter
        w1, m1 = wall_ns(), mono_ns()
        out["read_wall_ns"], out["read_mono_ns"] = (w0 + w1) // 2, (m0 + m1) // 2
        inst, avg = fields["NVML_FI_DEV_POWER_INSTANT"], fields["NVML_FI_DEV_POWER_AVERAGE"]
        if inst is not None:
            self._power_w_source = "NVML_FI_DEV_POWER_INSTANT"
        elif "NVML_FI_DEV_POWER_INSTANT" in self._unsupported or "power_fields" in self._unsupported:
            legacy = self._call("power_usage", "nvmlDeviceGetPowerUsage", h, errors=errors)
            if legacy is not None:
                inst, self._power_w_source = (
                    legacy / 1000.0,
                    "nvmlDeviceGetPowerUsage (1 s average on Ampere and newer)",
                )
            elif "power_usage" in self._unsupported:
                self._power_w_source = None  # no power reading at all on this GPU
        out["power_w"], out["power_avg_w"] = inst, avg
        out["temperature_c"] = self._call(
            "temperature", "nvmlDeviceGetTemperature", h, getattr(nv, "NVML_TEMPERATURE_GPU", 0), errors=errors
        )
        out["sm_clock_mhz"] = self._call(
            "sm_clock", "nvmlDeviceGetClockInfo", h, getattr(nv, "NVML_CLOCK_SM", 1), errors=errors
        )
        out["mem_clock_mhz"] = self._call(
            "mem_clock", "nvmlDeviceGetClockInfo", h, getattr(nv, "NVML_CLOCK_MEM", 2), errors=errors
        )
        util = self._call("utilization", "nvmlDeviceGetUtilizationRates", h, errors=errors)
        out["utilization_pct"] = float(util.gpu) if util is not None else None
        self._memory(out, errors)
        enforced = self._call("enforced_limit", "nvmlDeviceGetEnforcedPowerLimit", h, errors=errors)
        mgmt = self._call("management_limit", "nvmlDeviceGetPowerManagementLimit", h, errors=errors)
        out["power_limit_w"], out["power_management_limit_w"] = _mw(enforced), _mw(mgmt)
        out["clock_event_reasons"] = self._clock_events(errors)
        out["device_ns"] = None  # NVML has no clock of its own here: device time = wall time
        out["errors"] = errors
        return out

    def capabilities(self) -> dict[str, Any]:
        """What this GPU, driver and binding turned out to support (no NVML call; safe from any thread)."""
        return {
            "power_w_source": self._power_w_source,
            "memory_source": self._memory_source,
            "clock_events_source": self._clock_events_source,
            "unsupported": sorted(self._unsupported),
        }

    def identity(self) -> dict[str, Any]:
        errors: list[str] = []
        h = self._h
        return {
            "backend": "nvml",
            "gpu_index": self.gpu_index,
            **self._static,
            "uuid": self._call("uuid", "nvmlDeviceGetUUID", h, errors=errors),
            "nvml_version": self._call("nvml_version", "nvmlSystemGetNVMLVersion", errors=errors),
            "nvidia_ml_py": _dist_version("nvidia-ml-py"),
            "power_limit_w": _mw(self._call("enforced_limit", "nvmlDeviceGetEnforcedPowerLimit", h, errors=errors)),
            "power_default_limit_w": _mw(
                self._call("default_limit", "nvmlDeviceGetPowerManagementDefaultLimit", h, errors=errors)
            ),
            **self.capabilities(),
            "twin": False,
        }

    def close(self) -> None:
        try:
            self._nv.nvmlShutdown()
        except Exception:  # noqa: BLE001 - shutting down; nothing to report to
            pass


def _mw(v: Any) -> float | None:
    return v / 1000.0 if v is not None else None


def _dist_version(dist: str) -> str | None:
    """An installed distribution's version (nvidia-ml-py's module has no ``__version__``)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def make_probe(kind: str, *, gpu_index: int = 0, twin_url: str | None = None) -> Probe:
    """Build the probe the CLI asked for; a twin probe only once its URL has shown a twin GPU device (``check``)."""
    if kind == "nvml":
        return NvmlProbe(gpu_index)
    if kind == "rapl":
        from harness.telemetry.rapl_probe import RaplProbe

        return RaplProbe()
    if kind == "twin":
        if not twin_url:
            raise UsageError("--probe twin needs --twin-url", fix="pass --twin-url http://127.0.0.1:18100")
        probe = TwinProbe(twin_url)
        try:
            probe.check()
        except ServiceUnavailableError:
            probe.close()
            raise
        return probe
    raise UsageError(f"unknown probe {kind!r}", fix="use --probe nvml, rapl or twin")


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
    t_wall, t_mono = call_stamp(reading, w0, m0, w1, m1)
    return reading, t_wall, t_mono, (m1 - m0) / 1e6


def call_stamp(reading: dict[str, Any], w0: int, m0: int, w1: int, m1: int) -> tuple[int, int]:
    """(wall ns, mono ns) of a reading taken by a call between (w0, m0) and (w1, m1): the backend's own read stamps
    (popped from ``reading``) when they lie within the call, else the call's midpoint."""
    rw, rm = reading.pop("read_wall_ns", None), reading.pop("read_mono_ns", None)
    t_wall, t_mono = (w0 + w1) // 2, (m0 + m1) // 2
    if isinstance(rw, int) and w0 - READ_STAMP_SLACK_NS <= rw <= w1 + READ_STAMP_SLACK_NS:
        t_wall = rw
        if isinstance(rm, int) and m0 - READ_STAMP_SLACK_NS <= rm <= m1 + READ_STAMP_SLACK_NS:
            t_mono = rm  # same monotonic clock (no time namespace between the two processes)
        else:
            t_mono = m0 + (rw - w0)
    return t_wall, t_mono
