"""Prometheus text exposition (format 0.0.4, base units) of the latest sample and the sampler's own health, through
``prometheus_client`` (imported on the first scrape, so a sampler never scraped does not load it).

Values come from the store only; an absent value is left out, never written as 0. The latest sample is written twice:
under the sampler's own names (base units) and under NVIDIA dcgm-exporter's (``DCGM_FI_DEV_*``, DCGM's units, labels
``gpu``, ``UUID``, ``device``, ``modelName``, ``Hostname``), so tools that collect GPU telemetry from a dcgm-exporter
(aiperf's ``--gpu-telemetry URL``) read the twin's or the NVML GPU's energy from this page.
"""

from __future__ import annotations

import os
import resource
import socket
from typing import TYPE_CHECKING, Any

from harness.core import promtext
from harness.core.clocks import wall_ns
from harness.gpu import clock_events

if TYPE_CHECKING:
    from harness.telemetry.sampler import SamplerCore

Labels = dict[str, str]


# dcgm-exporter's default counters (etc/default-counters.csv): field, type, help, how to read it from a sample
DCGM_FIELDS: tuple[tuple[str, str, str, Any], ...] = (
    ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz).", lambda s: s.sm_clock_mhz),
    ("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz).", lambda s: s.mem_clock_mhz),
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).", lambda s: s.temperature_c),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", lambda s: s.power_w),
    (
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "counter",
        "Total energy consumption since boot (in mJ).",
        lambda s: s.energy_mj,
    ),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", lambda s: s.utilization_pct),
    ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).", lambda s: s.memory_free_mb),
    ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).", lambda s: s.memory_used_mb),
    ("DCGM_FI_DEV_ENFORCED_POWER_LIMIT", "gauge", "Enforced power limit (in W).", lambda s: s.power_limit_w),
)


def dcgm_text(s: Any, ident: dict[str, Any]) -> str:
    """The latest sample as dcgm-exporter writes it, one family per field. Written here rather than through
    ``prometheus_client``, which would rename the energy counter's family to ``..._total``; the exporter's is
    ``# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter`` over a sample of that very name."""
    index = ident.get("index")
    gpu = index if isinstance(index, int) else 0
    labels = {
        "gpu": str(gpu),
        "UUID": str(s.uuid or ident.get("uuid") or ""),
        "device": f"nvidia{gpu}",
        "modelName": str(s.name or ident.get("name") or ""),
        "Hostname": socket.gethostname(),
    }
    esc = ",".join(
        f'{k}="{v.replace(chr(92), chr(92) * 2).replace(chr(34), chr(92) + chr(34)).replace(chr(10), chr(92) + "n")}"'
        for k, v in labels.items()
    )
    lines = []
    for field, mtype, help_, read in DCGM_FIELDS:
        value = read(s)
        if value is None:
            continue
        lines += [f"# HELP {field} {help_}", f"# TYPE {field} {mtype}", f"{field}{{{esc}}} {float(value)!r}"]
    return "".join(line + "\n" for line in lines)


def render_metrics(core: SamplerCore) -> str:
    """The ``/metrics`` body."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    families: list[Any] = []

    def metric(name: str, mtype: str, help_: str, samples: list[tuple[Labels, float | int | None]]) -> None:
        vals = [(lbl, v) for lbl, v in samples if v is not None]
        if not vals:
            return
        keys = list(vals[0][0])
        fam = (CounterMetricFamily if mtype == "counter" else GaugeMetricFamily)(name, help_, labels=keys)
        for lbl, v in vals:
            fam.add_metric([lbl[k] for k in keys], float(v))
        families.append(fam)

    s = core.latest()
    ident = core.identity()
    g: Labels = {}
    if s is not None or ident:
        uuid = (s.uuid if s else None) or ident.get("uuid") or ""
        name = (s.name if s else None) or ident.get("name") or ""
        g = {"uuid": str(uuid), "name": str(name), "backend": str(core.probe.kind)}
    if s is not None:
        metric("gpu_energy_joules_total", "counter", "GPU total-energy counter (since driver load; twin: since device start).",
               [(g, s.energy_mj / 1e3 if s.energy_mj is not None else None)])  # fmt: skip
        gi, ga = {**g, "type": "instant"}, {**g, "type": "average"}
        metric("gpu_power_watts", "gauge", "GPU power draw.", [(gi, s.power_w), (ga, s.power_avg_w)])
        metric("gpu_temperature_celsius", "gauge", "GPU temperature.", [(g, s.temperature_c)])
        metric(
            "gpu_sm_clock_hertz",
            "gauge",
            "SM clock.",
            [(g, s.sm_clock_mhz * 1e6 if s.sm_clock_mhz is not None else None)],
        )
        metric(
            "gpu_memory_clock_hertz",
            "gauge",
            "Memory clock.",
            [(g, s.mem_clock_mhz * 1e6 if s.mem_clock_mhz is not None else None)],
        )
        metric("gpu_utilization_ratio", "gauge", "Fraction of the last period a kernel ran.",
               [(g, s.utilization_pct / 100 if s.utilization_pct is not None else None)])  # fmt: skip
        mib = 1024 * 1024
        metric("gpu_memory_bytes", "gauge", "GPU memory by kind.", [
            ({**g, "kind": k}, getattr(s, f"memory_{k}_mb") * mib if getattr(s, f"memory_{k}_mb") is not None else None)
            for k in ("total", "reserved", "used", "free")
        ])  # fmt: skip
        metric("gpu_power_limit_watts", "gauge", "Power limits.",
               [({**g, "type": "enforced"}, s.power_limit_w), ({**g, "type": "configured"}, s.power_management_limit_w)])  # fmt: skip
        if s.clock_event_reasons is not None:
            metric("gpu_clock_event_active", "gauge", "Clock-event reason bits (1 = active; gpu_idle is not throttling).",
                   [({**g, "reason": n}, int(bool(s.clock_event_reasons & bit))) for bit, n in clock_events.NAMES.items()])  # fmt: skip
        metric("gpu_sample_timestamp_seconds", "gauge", "Wall time of the latest sample.", [(g, s.t_wall_ns / 1e9)])
    metric("sampler_up", "gauge", "1 while the sampling loop runs.", [({}, int(core.healthy()))])
    metric("sampler_samples_total", "counter", "Samples taken by this process.", [({}, core.samples_total)])
    metric(
        "sampler_error_samples_total",
        "counter",
        "Samples that recorded at least one probe error.",
        [({}, core.error_samples_total)],
    )
    metric("sampler_errors_total", "counter", "Probe errors recorded.", [({}, core.errors_total)])
    metric(
        "sampler_log_write_errors_total",
        "counter",
        "Records that could not be written to the log.",
        [({}, core.store.log_errors_total)],
    )
    metric(
        "sampler_loop_errors_total",
        "counter",
        "Loop iterations that failed outside the probe.",
        [({}, core.loop_errors_total)],
    )
    metric(
        "sampler_loop_overruns_total",
        "counter",
        "Ticks skipped because a sample ended past the next deadline.",
        [({}, core.overruns_total)],
    )
    metric("sampler_backfilled_samples_total", "counter", "Missed instants read back from a device with history (twin).",
           [({}, core.backfilled_total)])  # fmt: skip
    metric("sampler_last_sample_timestamp_seconds", "gauge", "Wall time of the last sample taken.",
           [({}, core.last_sample_wall_ns / 1e9 if core.last_sample_wall_ns is not None else None)])  # fmt: skip
    metric("sampler_sample_duration_seconds", "gauge", "Duration of the last probe read.",
           [({}, core.last_latency_ms / 1e3 if core.last_latency_ms is not None else None)])  # fmt: skip
    metric("sampler_rate_hertz", "gauge", "Configured sampling rate.", [({}, core.rate_hz)])
    metric("sampler_ring_records", "gauge", "Records held in memory for window queries.", [({}, len(core.store))])
    ru = resource.getrusage(resource.RUSAGE_SELF)
    metric(
        "process_cpu_seconds_total",
        "counter",
        "User + system CPU of the sampler process.",
        [({}, ru.ru_utime + ru.ru_stime)],
    )
    metric("process_resident_memory_bytes", "gauge", "Peak resident set size.", [({}, ru.ru_maxrss * 1024)])
    metric("process_start_time_seconds", "gauge", "Start time of the sampler.", [({}, core.started_wall_ns / 1e9)])
    lbl = {"backend": str(core.probe.kind), "driver": str(ident.get("driver_version") or ""), "pid": str(os.getpid())}
    metric("sampler_build_info", "gauge", "Sampler backend and driver.", [(lbl, 1)])
    metric("sampler_scrape_timestamp_seconds", "gauge", "Time this page was rendered.", [({}, wall_ns() / 1e9)])
    return promtext.render(families) + (dcgm_text(s, ident) if s is not None else "")
