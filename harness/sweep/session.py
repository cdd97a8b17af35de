"""One sweep session: check the options, take the run folder's writer lock (new run or ``--resume``), open the world,
wire the device settings swept per pass (power caps, SM clocks), run ``SweepRunner``, and leave the manifest saying how the session ended."""

from __future__ import annotations

import errno
import signal
import sys
from pathlib import Path
from typing import Any

from harness.core.clocks import mono_ns
from harness.core.errors import HarnessError, UsageError
from harness.core.jsonl import write_error
from harness.engine.spec import EngineSpec
from harness.gpu.pass_setting import PassSetting
from harness.runs.folder import new_run_id, prepare_resume, prepare_run_dir
from harness.runs.gpu_time import GpuTime, twin_launch_scale
from harness.runs.lock import RunLock
from harness.runs.manifest import SweepManifest, read_manifest, read_options
from harness.runs.options import SweepOptions
from harness.runs.rows import SweepRow
from harness.runs.writable import check_writable
from harness.sweep.checks import check_options
from harness.sweep.console import SweepConsole
from harness.sweep.errors import (
    PENDING,
    Interrupted,
    SweepInterrupted,
    WorldLost,
    on_sigint,
    on_sigterm,
    raise_if_interrupted,
)
from harness.sweep.runner import SweepRunner


def run_sweep(
    opts: SweepOptions,
    out: Path | None = None,
    *,
    resume: Path | None = None,
    force: bool = False,
    retry_errors: bool = False,
    argv: list[str] | None = None,
    console: SweepConsole | None = None,
) -> tuple[Path, list[SweepRow], SweepManifest]:
    """Plan, take the run folder's writer lock, open the world, run, and write rows + manifest; return (run folder,
    resolved rows, manifest). ``retry_errors`` (with ``resume``) re-runs every cell whose row is an error row."""
    console = console or SweepConsole()
    if resume is not None:
        read_manifest(resume)  # a run folder at all? (nothing is created or locked otherwise)
        lock = RunLock(resume)
        lock.acquire()
        try:
            manifest = read_manifest(resume)  # re-read under the lock: the previous writer may have just finished
            saved = read_options(resume)
            # Services of the killed run are gone; use the URLs given now (or start fresh ones). A Ray cluster outlives
            # its driver: the saved address stands unless another is given (never a silent local cluster instead).
            opts = saved.model_copy(
                update={
                    "sampler_url": opts.sampler_url,
                    "twin_gpu_url": opts.twin_gpu_url,
                    "gpu_settings_url": opts.gpu_settings_url,
                    "ray_address": opts.ray_address or saved.ray_address,
                }
            )
            _check_resume_version(opts)
            check_options(opts)  # the saved options, checked as a new run's are
            run_dir = resume
            check_writable([run_dir], f"the run folder {run_dir}")  # rows, manifest and logs a run as root wrote
            prepare_resume(run_dir)
        except BaseException:
            lock.release()
            raise
    else:
        check_options(opts)  # a usage error must not leave a failed run folder behind
        requested = opts.sglang_version
        opts = resolve_versions(opts)  # before anything is written
        run_dir = out or Path("results") / new_run_id()
        lock = RunLock(run_dir)
        prepare_run_dir(run_dir, force=force, lock=lock)
        manifest = SweepManifest.new(
            new_run_id() if out else run_dir.name,
            argv or sys.argv,
            opts.model_dump(),
            sglang_version_requested=requested,
        )
    try:
        manifest.hold_lock(lock.info)
        return _run_locked(opts, run_dir, manifest, resume is not None, retry_errors, argv, console)
    finally:
        lock.release()


def resolve_versions(opts: SweepOptions) -> SweepOptions:
    """``auto`` versions resolved (by the one builder, ``EngineSpec.build``): sglang's for an sglang API, vLLM's for
    a vLLM one (the other stays as given)."""
    spec = opts.engine_spec()
    if spec.api == "vllm":
        return opts.model_copy(update={"vllm_version": spec.vllm_version})
    return opts.model_copy(update={"sglang_version": spec.sglang_version})


def _check_resume_version(opts: SweepOptions) -> None:
    """A resumed real-engine run must find the engine version its rows were measured with."""
    if opts.engine == "twin":
        return
    saved = opts.vllm_version if opts.engine == "vllm" else opts.sglang_version
    now = EngineSpec.build(opts.engine).version  # what ``auto`` finds installed now
    if now != saved:
        name, tag = ("vLLM", "VLLM_TAG") if opts.engine == "vllm" else ("sglang", "SGLANG_TAG")
        raise UsageError(
            f"this run was measured with {name} {saved}, but {now} is installed now",
            fix=f"resume in the environment with {name} {saved} (same {tag}), or start a new run",
        )


def _run_locked(
    opts: SweepOptions,
    run_dir: Path,
    manifest: SweepManifest,
    resumed: bool,
    retry_errors: bool,
    argv: list[str] | None,
    console: SweepConsole,
) -> tuple[Path, list[SweepRow], SweepManifest]:
    """The body of ``run_sweep`` once this process holds the run folder's lock."""
    from harness.sweep.executors import open_sweep_world
    from harness.sweep.plan_estimate import estimate_plan, plan_gpus, plan_line
    from harness.sweep.preflight import plan_section, run_preflight, run_static_preflight
    from harness.sweep.probe import apply_probe

    manifest.sglang_version, manifest.attention_backend = opts.sglang_version, opts.server_attention_backend
    if opts.api == "vllm":
        manifest.sglang_version, manifest.vllm_version = None, opts.vllm_version
        manifest.skipped_configs = [c.as_tuple() for c in opts.skipped_configs]
    session = manifest.begin_session(argv or sys.argv, resumed=resumed, retry_errors=retry_errors)
    manifest.save(run_dir)
    PENDING.signum = None
    old = signal.signal(signal.SIGTERM, on_sigterm)
    # Ctrl-C stops the sweep even when the parent started it with SIGINT ignored (a non-interactive shell's `cmd &`
    # hands its children SIGINT = SIG_IGN, and such a sweep ran on to exit 0).
    old_int = signal.signal(signal.SIGINT, on_sigint)
    t0 = mono_ns()
    try:
        estimate = estimate_plan(opts, plan_gpus(opts))  # before any GPU time: the sweep's first line
        console.line(plan_line(estimate))
        static = run_static_preflight(opts)  # no world needed: a refusal here costs no GPU time
        with open_sweep_world(opts, run_dir, opts.engine_spec(), manifest, console) as world:
            session.world = manifest.record_world(world)
            snapshot = world.telemetry.snapshot()
            manifest.memory_total_mb = getattr(snapshot, "memory_total_mb", None)  # policies' mem/total
            if manifest.idle_power_w is None:  # the board before any server (twin calibrate --from reads it)
                manifest.idle_power_w = getattr(snapshot, "power_w", None)
            manifest.seeds = {"seed": opts.seed, "twin_engine_seeds": "sha256(seed:launch key)"}
            gpu_time = open_gpu_time(opts, world, manifest)
            probed = (manifest.preflight or {}).get("probe")  # a resumed run keeps the probe it measured
            with gpu_time.timing("preflight"):
                manifest.preflight = run_preflight(opts, world, snapshot, static)  # before any setting or server
                if probed is not None:
                    manifest.preflight["probe"] = probed
                manifest.save(run_dir)
                opts = apply_probe(opts, world, run_dir, manifest.preflight, console.line)  # may resolve caps auto
            if manifest.options is not None:  # --resume reuses the caps the probe chose
                manifest.options["power_caps"] = opts.power_caps
            manifest.plan = {
                **plan_section(opts),
                "estimate": estimate.record(),
                "published_grid_gpu_s": round(estimate.published_grid_s, 1),
            }
            manifest.save(run_dir)
            settings = open_settings(opts, world, manifest, lambda: manifest.save(run_dir), console, run_dir)
            runner = SweepRunner(
                opts,
                world,
                run_dir,
                manifest,
                console,
                settings,
                retry_errors=retry_errors,
                executor=getattr(world, "executor", None),
                gpu_time=gpu_time,
            )
            try:
                rows = runner.run()
                raise_if_interrupted()  # a stop whose raise was swallowed in the last cell: not "complete"
                manifest.finished()
            except (KeyboardInterrupt, Interrupted):
                manifest.interrupted()
                raise
            finally:
                restore_settings(settings, console, run_dir)
                manifest.end_session(
                    session,
                    launches=runner.launches,
                    sampler_restarts=world.sampler_restarts,
                    wall_s=(mono_ns() - t0) / 1e9,
                )
                manifest.save_best_effort(run_dir)
            manifest.save(run_dir)  # the success path must not end without its manifest
    except OSError as exc:  # a write outside the row store (a log, a probe file) hit a full disk
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        err = write_error(run_dir, exc, fix="choose a writable --out folder")
        _record_failure(run_dir, manifest, err)
        raise err from None
    except HarnessError as exc:
        _record_failure(run_dir, manifest, exc)
        raise
    except (KeyboardInterrupt, Interrupted):
        raise SweepInterrupted(
            f"sweep interrupted; every finished cell is in {run_dir}/rows.jsonl",
            fix=f"continue with: harness sweep --resume {run_dir}",
        ) from None
    finally:
        signal.signal(signal.SIGTERM, old)
        signal.signal(signal.SIGINT, old_int)
    return run_dir, rows, manifest


def open_gpu_time(opts: SweepOptions, world: Any, manifest: SweepManifest) -> GpuTime:
    """The run's GPU-time account on the world's clock, carried on from a resumed run's record; every addition lands
    in ``manifest.gpu_time`` (saved with the manifest after each cell)."""
    saved = manifest.gpu_time

    def keep(record: dict[str, Any]) -> None:
        if getattr(world, "executor", None) is not None:
            record["accounted"] = "the driver only: cells on Ray's GPU slots are not yet split by phase"
        manifest.gpu_time = record

    return GpuTime(
        getattr(getattr(world, "clock", None), "scale", 1.0),
        twin_launch_scale(opts.engine, list(opts.engine_args)),
        saved=saved,
        on_change=keep,
    )


def _record_failure(run_dir: Path, manifest: SweepManifest, exc: HarnessError) -> None:
    """A run that stopped on an error is never left "running" on disk (a full disk included)."""
    manifest.failed(exc.message, exc.fix, "infrastructure" if isinstance(exc, WorldLost) else None)
    manifest.save_best_effort(run_dir)


def open_settings(
    opts: SweepOptions, world: Any, manifest: SweepManifest, save: Any, console: SweepConsole, run_dir: Path
) -> list[PassSetting]:
    """The controllers of the device settings swept per pass (``--power-caps``, ``--sm-clocks``; none without): every
    value is checked against the GPU before the first cell, each original is saved in the manifest before the first
    set. A refusal restores what an earlier controller of this session already took over (nothing is set yet)."""
    from harness.gpu.power_cap import PowerCapController, cap_device
    from harness.gpu.sm_clocks import SmClockController, clock_device

    twin_url = getattr(world, "twin_gpu_url", None) if opts.engine == "twin" else None  # a Ray driver's world has none
    wanted: list[tuple[Any, Any, list[str], Any]] = []
    if opts.power_caps:
        wanted.append((PowerCapController, cap_device, list(opts.power_caps), opts.power_cap_mode))
    if opts.sm_clocks:
        wanted.append((SmClockController, clock_device, list(opts.sm_clocks), "set"))
    out: list[PassSetting] = []
    try:
        for controller, device, labels, mode in wanted:
            # on a GPU box the engine's GPU, by UUID (NVML's index 0 may be another GPU: harness.gpu.identity)
            setting = controller(device(twin_url, world.gpu_index, opts.gpu_settings_url), mode, manifest, save)
            out.append(setting)
            setting.begin(labels)
    except BaseException:
        restore_settings(out, console, run_dir)
        raise
    return out


def restore_settings(settings: list[PassSetting], console: SweepConsole, run_dir: Path) -> None:
    """Put each original back (the last set first); a failure is reported (and kept in the manifest) without hiding
    the run's own, and the other settings are still restored."""
    for setting in reversed(settings):
        try:
            text = setting.restore()
        except HarnessError as exc:
            setting.state["restore_error"] = exc.message
            setting.save()
            console.line(
                f"could not restore {setting.what}: {exc.message} ({exc.fix}); "
                f"harness sweep --resume {run_dir} restores it"
            )
            continue
        finally:
            setting.close()
        if text is not None:
            console.line(text)
