"""The verdict rows of a finished (or partial) ``gpu_check.json``: pure, so the tests prove the logic."""

from __future__ import annotations

from typing import Any

from harness.gpu.clock_events import NAMES
from harness.gpucheck.verdict import grade, row

ENERGY_OK, ENERGY_WARN = 0.05, 0.10  # counter vs power-sample integral, per window
SMI_OK, SMI_WARN = 0.10, 0.20  # nvidia-smi power.draw is a 1 s average: looser


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x * 100:+.2f} %"


def verdicts(out: dict[str, Any]) -> list[dict[str, str]]:
    ws: dict[str, Any] = out.get("windows", {})
    setup = (out.get("phases") or {}).get("setup") or {}
    device = str(setup.get("load_device") or "none")
    rows = [
        row(
            "load",
            "WARN" if "STAND-IN" in device else "PASS" if setup.get("status") == "done" else "FAIL",
            device,
            str(setup.get("error") or ""),
        )
    ]
    for name in ("idle", "ramp", "sustained", "decode_b1", "decode_b16"):
        w = ws.get(name)
        if not w:
            rows.append(row(f"energy[{name}]", "SKIP", "no window", _phase_error(out, name)))
            continue
        rows.append(
            row(
                f"energy[{name}]",
                grade(w.get("err_integral_vs_counter"), ENERGY_OK, ENERGY_WARN),
                f"integral vs counter {_pct(w.get('err_integral_vs_counter'))}",
                f"{w.get('avg_power_w')} W avg, {w.get('seconds')} s",
            )
        )
        smi_err = w.get("err_smi_power_draw_vs_counter")
        rows.append(row(f"smi[{name}]", grade(smi_err, SMI_OK, SMI_WARN), f"nvidia-smi power.draw vs counter {_pct(smi_err)}",
                        (out.get("smi") or {}).get("error") or ""))  # fmt: skip
    p = out.get("period") or {}
    med, req = p.get("median_ms"), p.get("requested_ms")
    rows.append(row("sample_period", grade((med - req) / req if med and req else None, 0.1, 0.5), f"{med} ms median (asked {req} ms)",
                    f"{p.get('overruns')} overruns, read p99 {p.get('read_latency_p99_ms')} ms"))  # fmt: skip
    bits = int((ws.get("sustained") or {}).get("clock_event_reasons_or") or 0)
    names = [n for b, n in NAMES.items() if bits & b] or ["none"]
    rows.append(
        row("clock_events[sustained]", "PASS" if "sustained" in ws else "SKIP", f"0x{bits:x} {','.join(names)}")
    )
    rows.append(_uuid_row(out.get("uuid_map") or {}))
    rows += _cap_rows(out)
    rows += _clock_rows(out)
    tw = (out.get("twin") or {}).get("replay") or {}
    rows.append(row("twin_vs_truth", grade(tw.get("energy_err"), 0.05, 0.15), f"RMS {tw.get('rms_w')} W, energy {_pct(tw.get('energy_err'))}",
                    tw.get("error") or (out.get("twin") or {}).get("error") or ""))  # fmt: skip
    la = out.get("launch_argv") or {}
    rows.append(row("launch_argv", "PASS" if la.get("argv") else "SKIP", f"{la.get('configs', 0)} configs",
                    str(la.get("parser_check") or la.get("error") or "")))  # fmt: skip
    for r in out.get("restores") or []:
        rows.append(row(f"restore[{r['name']}]", "PASS" if r["ok"] == "true" else "FAIL", r["detail"][:60]))
    return rows


def _phase_error(out: dict[str, Any], name: str) -> str:
    return str(((out.get("phases") or {}).get(name) or {}).get("error") or "")


def _uuid_row(u: dict[str, Any]) -> dict[str, str]:
    if "torch_uuid_cuda0" not in u:
        return row("uuid_map", "SKIP", str(u.get("torch") or "not run"))
    here = bool(u.get("torch_cuda0_is_nvml_index"))
    child = u.get("child_torch_uuid_cuda0") == u.get("child_cuda_visible_devices")
    return row(
        "uuid_map",
        "PASS" if here and child else "FAIL",
        f"cuda:0 = NVML {u.get('torch_cuda0_is_nvml_index')}",
        f"CUDA_VISIBLE_DEVICES={u.get('child_cuda_visible_devices')} -> {u.get('child_torch_uuid_cuda0')} {u.get('child_error') or ''}",
    )


def _cap_rows(out: dict[str, Any]) -> list[dict[str, str]]:
    pc = (out.get("phases") or {}).get("power_cap") or {}
    lim = out.get("limits") or {}
    rows = [
        row(
            "power_limits",
            "PASS" if lim.get("enforced_w") else "SKIP",
            f"min {lim.get('min_w')} / max {lim.get('max_w')} / default {lim.get('default_w')} / enforced {lim.get('enforced_w')} W",
        )
    ]
    if pc.get("read_only"):
        rows.append(row("power_cap_set", "SKIP", "read-only: not attempted", f"would have set {pc.get('target_w')} W"))
    elif pc.get("refused"):
        rows.append(row("power_cap_set", "WARN", "refused", pc["refused"]))
    elif pc.get("error") or not pc:
        rows.append(row("power_cap_set", "FAIL" if pc.get("error") else "SKIP", "not run", str(pc.get("error") or "")))
    else:
        enforced_ok = (
            pc.get("enforced_after_set_w") is not None and abs(pc["enforced_after_set_w"] - pc["target_w"]) < 1.0
        )
        w = (out.get("windows") or {}).get("capped_matmul") or {}
        rows.append(
            row(
                "power_cap_set",
                "PASS" if enforced_ok else "FAIL",
                f"target {pc.get('target_w')} W, enforced {pc.get('enforced_after_set_w')} W",
            )
        )
        rows.append(
            row(
                "power_follows_cap",
                "PASS" if pc.get("follows_cap") else "FAIL",
                f"{w.get('avg_power_w')} W avg under matmul",
            )
        )
    rows.append(_binds_row(out))
    return rows


def cap_binds_verdict(out: dict[str, Any]) -> dict[str, Any]:
    """Whether a power cap can bind under the decode-shaped load: the verdict on a --sm-clocks sweep dimension."""
    ws, lim = out.get("windows") or {}, out.get("limits") or {}
    decode = [
        ws[k]["avg_power_w"] for k in ("decode_b1", "decode_b16") if (ws.get(k) or {}).get("avg_power_w") is not None
    ]
    if not decode:
        return {"verdict": "unknown", "reason": "no decode window"}
    top, lo, default = max(decode), lim.get("min_w"), lim.get("default_w") or lim.get("enforced_w")
    res: dict[str, Any] = {"decode_power_w": top, "min_cap_w": lo, "default_cap_w": default}
    if lo is not None and top < lo:
        res.update(
            verdict="never_binds",
            needs_sm_clocks=True,
            reason=f"decode draws {top:g} W, below the lowest settable cap {lo:g} W",
        )
    elif default and top < 0.8 * default:
        res.update(
            verdict="binds_only_far_below_default",
            needs_sm_clocks=True,
            reason=f"decode draws {top:g} W = {top / default:.0%} of the default cap {default:g} W",
        )
    else:
        res.update(verdict="binds", needs_sm_clocks=False, reason=f"decode draws {top:g} W, near the default cap")
    if res["needs_sm_clocks"]:
        res["next"] = sm_clocks_command(out)
    return res


def sm_clocks_command(out: dict[str, Any]) -> str:
    """The sweep to run when the cap does not bind: unlocked beside the lower clocks this check locked (else 71 % and
    50 % of an H200's 1980 MHz)."""
    picked = [int(c) for c in ((out.get("phases") or {}).get("sm_clocks") or {}).get("picked_mhz") or []]
    lower = sorted(set(picked) - {max(picked, default=0)}, reverse=True)
    clocks = ",".join(str(c) for c in lower) if lower else "1410,990"
    return f"harness sweep --sm-clocks max,{clocks} (docs/smclocks.md)"


def _binds_row(out: dict[str, Any]) -> dict[str, str]:
    v = cap_binds_verdict(out)
    if v["verdict"] == "unknown":
        return row("cap_binds_decode", "SKIP", "no decode window")
    return row(
        "cap_binds_decode",
        "WARN" if v["needs_sm_clocks"] else "PASS",
        v["verdict"],
        v["reason"]
        + (
            f": a power cap cannot steer decode energy here; sweep locked clocks: {v['next']}"
            if v["needs_sm_clocks"]
            else ""
        ),
    )


def _clock_rows(out: dict[str, Any]) -> list[dict[str, str]]:
    sc = (out.get("phases") or {}).get("sm_clocks") or {}
    ws = out.get("windows") or {}
    if sc.get("read_only"):
        return [
            row("sm_clock_lock", "SKIP", "read-only: not attempted", f"would have locked {sc.get('picked_mhz')} MHz")
        ]
    if sc.get("refused"):
        return [row("sm_clock_lock", "WARN", "refused", sc["refused"])]
    if not sc.get("picked_mhz") or sc.get("error"):
        return [row("sm_clock_lock", "FAIL" if sc.get("error") else "SKIP", "not run", str(sc.get("error") or ""))]
    rows = []
    for mhz in sc["picked_mhz"]:
        m, d = ws.get(f"clock{mhz}_matmul") or {}, ws.get(f"clock{mhz}_decode_b1") or {}
        seen = m.get("avg_sm_clock_mhz")
        ok = seen is not None and seen <= mhz * 1.02
        rows.append(
            row(
                f"sm_clock_lock[{mhz}]",
                "PASS" if ok else "FAIL",
                f"seen {seen} MHz; {m.get('avg_power_w')} W",
                f"J/matmul {m.get('energy_per_step_j')}, J/decode step {d.get('energy_per_step_j')} ({d.get('avg_power_w')} W)",
            )
        )
    return rows
