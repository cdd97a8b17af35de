"""One serving session: the world (twin GPU + sampler, or a GPU box's sampler), one engine instance per config (or
one at a time, relaunched on a switch, where only one fits), the control loop and the front, started together and
stopped together (``with open_session(options) as s``)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Literal

from harness.core.errors import UsageError
from harness.core.httpserve import Server, serve_in_thread
from harness.engine.launch import ServerLaunchError
from harness.engine.version import version_tuple
from harness.gpu.power_cap import cap_device
from harness.gpu.sm_clocks import clock_device
from harness.grid import BASELINE, SpecConfig
from harness.serve.adaptive import AdaptiveParams
from harness.serve.clock_actuator import ClockActuator
from harness.serve.clock_trim import ClockParams
from harness.serve.control_loop import AdaptiveDecider, BandDecider, ControlLoop, Decider
from harness.serve.controller import ControllerParams
from harness.serve.front import Front, make_front_server
from harness.serve.options import ServeOptions
from harness.serve.picks import PickTable
from harness.serve.pool import Pool, launch_pool
from harness.serve.power_budget import PowerBudget, open_power_budget
from harness.serve.relaunch import DEFAULT_DRAIN_TIMEOUT_S, RelaunchPool
from harness.world.world import World, open_world_for

ADAPTIVE_SINCE = (0, 5, 12)
"""The first sglang whose parser has ``--speculative-adaptive``."""
PUBLISHED_MEM_FRACTION = 0.65
Instances = Literal["all", "one", "auto"]


@dataclass
class SessionOptions:
    """What ``harness serve`` (and the benchmark) runs: ``configs`` are the instances; ``picks`` the table the band
    controller applies (``mode="adaptive"`` runs the sglang-adaptive emulation instead)."""

    picks: PickTable
    configs: list[SpecConfig] = field(default_factory=list)
    mode: Literal["band", "adaptive"] = "band"
    engine: Literal["twin", "sglang"] = "twin"
    run_dir: Path = Path("results/serve")
    host: str = "127.0.0.1"
    port: int = 0
    max_batch_size: int = 16
    mem_fraction: float | None = None
    """Per instance; default 0.65 / number of instances (on the twin: 0.65 of a device with that many times the memory)."""
    time_scale: float = 1.0
    tick_s: float = 0.05
    sampler_url: str | None = None
    twin_gpu_url: str | None = None
    gpu_settings_url: str | None = None
    sglang_version: str | None = None
    speculative_adaptive: bool = False
    """Pass ``--speculative-adaptive`` to the topk == 1 sglang instances where the sglang parser has it."""
    controller: ControllerParams = field(default_factory=ControllerParams)
    adaptive: AdaptiveParams = field(default_factory=AdaptiveParams)
    seed: int = 0
    engine_args: tuple[str, ...] = ()
    """Extra engine flags for every instance (the twin's ``--twin-launch-scale 0.1`` in tests)."""
    engine_device: Literal["gpu", "cpu"] = "gpu"
    model_path: str | None = None
    draft_model_path: str | None = None
    instances: Instances = "auto"
    """``all``: one instance per config, launched first; ``one``: one engine at a time, relaunched on a switch
    (``relaunch.py``); ``auto``: ``all``, and ``one`` when launching them all runs out of GPU memory."""
    relaunch_hold_s: float = 60.0
    """With one engine at a time: the least seconds (device clock) between load-driven switches (each costs a drain
    and a launch)."""
    drain_timeout_s: float = DEFAULT_DRAIN_TIMEOUT_S
    api_key: str | None = None
    """Clients must send ``Authorization: Bearer <key>`` on every route but ``/health``."""
    twin_profile: str | None = None
    """The profile of the twin GPU the session starts (``--twin-profile``; None: the laptop's)."""
    twin_memory_x: int | None = None
    """Twin GPU memory as a multiple of the profile's (default: the number of instances launched at once)."""
    clock_control: bool = False
    """Trim power into the band with the locked SM clock too (``clock_actuator.py``): changes GPU state (root on
    NVML), so off unless asked; the clock is put back when the session ends."""
    clock: ClockParams = field(default_factory=ClockParams)
    power_budget_w: float | None = None
    """Hold the band against this many watts: the board's enforced limit set to it for the session
    (``power_budget.py``; root on NVML), the limit found before put back at the end."""

    @classmethod
    def from_options(cls, opts: ServeOptions, picks: PickTable, model: Any = None) -> "SessionOptions":
        """The session ``harness serve``'s options describe: every option of the same name carried over as it is,
        the rest derived (the instances' configs, the run folder, the controller; ``model``: the closed loop's
        utilization model from ``--umodel``)."""
        same = {f.name: getattr(opts, f.name) for f in fields(cls) if f.name in ServeOptions.model_fields}
        return cls(
            **{
                **same,
                "picks": picks,
                "configs": [SpecConfig(*c) for c in opts.configs],
                "run_dir": opts.out,
                "engine_args": tuple(opts.engine_args),
                "controller": ControllerParams(
                    band=opts.band, dwell_ticks=opts.dwell_ticks, min_hold_s=opts.hold_s(model is not None), model=model
                ),
            }
        )

    def instance_configs(self) -> list[SpecConfig]:
        """The instances: the given configs, else every picked config; no_spec is always one (the fallback)."""
        chosen = self.configs or sorted(set(self.picks.values()))
        return list(dict.fromkeys([BASELINE, *chosen]))


def serving_profile(run_dir: Path, instances: int, base: str | None = None) -> str:
    """The twin GPU for ``instances`` engines: the ``base`` profile (default: the calibrated laptop's) with
    ``instances`` times its memory (each engine keeps the published 0.65 of the original board's); power, clocks
    and cap are unchanged."""
    from harness.twin.profile import DEFAULT_PROFILE, load_profile

    prof = load_profile(base or DEFAULT_PROFILE)
    dev = prof.device.model_copy(update={"memory_total_mb": prof.device.memory_total_mb * instances})
    prof = prof.model_copy(update={"device": dev, "about": f"{prof.about} [serving: memory x{instances}]"})
    path = run_dir / "twin_serve_profile.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(prof.model_dump(), indent=1))
    return str(path)


class ServeSession:
    """A running front: ``url``, ``loop``, ``pool``, ``world``; ``close()`` stops everything it started."""

    def __init__(
        self,
        world: World,
        pool: Pool,
        loop: ControlLoop,
        front: Front,
        server: Server,
        relaunch_why: str | None = None,
        open_loop_why: str | None = None,
        budget: PowerBudget | None = None,
    ) -> None:
        self.world, self.pool, self.loop, self.front, self.server = world, pool, loop, front, server
        self.budget = budget
        """The power budget in force (``--power-budget``), put back on close; None without one."""
        self.relaunch_why = relaunch_why
        """Why the session serves one engine at a time (None: every instance runs)."""
        self.open_loop_why = open_loop_why
        """Why picks follow the table alone, with no band to hold (None: the band controller holds it)."""
        host, port = server.server_address[:2]
        self.url = f"http://{host.decode() if isinstance(host, bytes) else host}:{port}"
        serve_in_thread(server, name="serve-front")
        loop.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.loop.close()
        self.front.close()
        self.pool.close()
        try:
            if self.budget is not None:
                self.budget.close()
        finally:
            self.world.close()

    def __enter__(self) -> "ServeSession":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _spec(options: SessionOptions) -> Any:
    from harness.engine.spec import EngineSpec

    return EngineSpec.build(
        options.engine,
        device=options.engine_device,
        sglang_version=options.sglang_version or "auto",
        model_path=options.model_path,
        draft_model_path=options.draft_model_path,
        extra_args=tuple(options.engine_args),
    )


def open_session(options: SessionOptions) -> ServeSession:
    """Start the world, the instances, the loop and the front; on failure stop what was started."""
    configs = options.instance_configs()
    missing = sorted(set(options.picks.values()) - set(configs))
    if missing:
        raise UsageError(
            f"picks name configs without an instance: {', '.join(map(str, missing))}",
            fix="add them to --configs or leave --configs out (then every picked config gets one)",
        )
    if options.instances == "one" and options.mode == "adaptive":
        raise UsageError(
            "--mode adaptive switches tiers every few requests; with one engine at a time each switch is a relaunch",
            fix="use --mode band with --instances one (or --instances all)",
        )
    run_dir = Path(options.run_dir)
    one = options.instances == "one"
    memory_x = options.twin_memory_x or (1 if one else len(configs))
    twin_started = options.engine == "twin" and options.twin_gpu_url is None
    profile = serving_profile(run_dir, memory_x, options.twin_profile) if twin_started else None
    world = open_world_for(options, run_dir, spec=_spec(options), profile=profile)
    pool: Pool | None = None
    loop: ControlLoop | None = None
    budget: PowerBudget | None = None
    budget_events: list[dict[str, Any]] = []
    try:
        if options.power_budget_w is not None:  # before any instance: they launch and serve under the budget
            twin_url = world.twin_gpu_url if options.engine == "twin" else None
            budget = open_power_budget(
                options.power_budget_w,
                cap_device(twin_url, world.gpu_index, options.gpu_settings_url),
                run_dir,
                budget_events.append,
            )
        why = "--instances one" if one else None
        if not one:
            try:
                pool = _launch_all(options, world, configs, run_dir)
            except ServerLaunchError as exc:
                if options.instances != "auto" or not exc.oom or options.mode == "adaptive":
                    raise
                why = f"launching {len(configs)} instances at once ran out of GPU memory ({exc.message})"
        params = options.controller
        open_loop_why = None
        if getattr(world.telemetry, "has_power", True) is False:
            reason = world.gpu_identity.get("energy_unavailable") or "no power reading on this host"
            open_loop_why = f"no band without power: {reason}; picks by batch size"
            params = replace(params, power_telemetry=False)
        if pool is None:
            pool = RelaunchPool(
                world.launcher,
                configs,
                options.max_batch_size,
                options.mem_fraction or PUBLISHED_MEM_FRACTION,
                run_dir / "logs",
                drain_timeout_s=options.drain_timeout_s,
            )
            params = replace(params, min_hold_s=max(params.min_hold_s, options.relaunch_hold_s))
        clock = None
        if options.clock_control:
            clock = _clock_factory(options, world, params.band)
        decider: Decider = (
            AdaptiveDecider(options.adaptive) if options.mode == "adaptive" else BandDecider(options.picks, params)
        )
        loop = ControlLoop(
            pool,
            decider,
            world.telemetry,
            world.clock,
            run_dir / "switches.jsonl",
            tick_s=options.tick_s,
            clock_actuator=clock,
        )
        for event in budget_events:
            loop.log_event(event)
        if budget is not None:
            budget.log = loop.log_event
        if why is not None:
            loop.log_event({"event": "one_at_a_time", "why": why, "configs": [c.as_list() for c in configs]})
        if open_loop_why is not None:
            loop.log_event({"event": "open_loop", "why": open_loop_why})
        pool.wait_ready(world.launcher.launch_timeout_s)
        front = Front(loop, ask_accept=options.mode == "adaptive", max_running=options.max_batch_size)
        server = make_front_server(front, options.host, options.port, api_key=options.api_key)
        return ServeSession(
            world, pool, loop, front, server, relaunch_why=why, open_loop_why=open_loop_why, budget=budget
        )
    except BaseException:
        if loop is not None:
            loop.close()
        if pool is not None:
            pool.close()
        try:
            if budget is not None:
                budget.close()
        finally:
            world.close()
        raise


def _clock_factory(options: SessionOptions, world: World, band: tuple[float, float]) -> Any:
    """The clock actuator of a loop (its log is the loop's switch log): the twin GPU's, the settings agent's or
    NVML's clock device."""
    url = world.twin_gpu_url if options.engine == "twin" else None
    return lambda loop: ClockActuator(
        lambda: clock_device(url, world.gpu_index, options.gpu_settings_url), band, loop.log_event, options.clock
    )


def _launch_all(options: SessionOptions, world: World, configs: list[SpecConfig], run_dir: Path) -> Pool:
    """Every instance at once (topk-1 sglang instances with ``--speculative-adaptive`` when asked and supported)."""
    adaptive = None
    spec = world.launcher.spec
    if (
        options.speculative_adaptive
        and options.engine == "sglang"
        and version_tuple(spec.sglang_version) >= ADAPTIVE_SINCE
    ):
        from harness.engine.launch import EngineLauncher

        adaptive = EngineLauncher(
            spec.model_copy(update={"extra_args": (*spec.extra_args, "--speculative-adaptive")}),
            run_dir,
            launch_timeout_s=world.launcher.launch_timeout_s,
        )
    mf = options.mem_fraction or PUBLISHED_MEM_FRACTION / len(configs)
    return launch_pool(world.launcher, configs, options.max_batch_size, mf, run_dir / "logs", adaptive)
