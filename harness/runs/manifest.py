"""``RUN_DIR/manifest.json``: what produced a run (versions, git commit, argv, engine and GPU identity, seeds, launches).

One pydantic model per run kind over a shared base: ``SweepManifest`` (``harness sweep``) and ``PilotManifest``
(``harness pilot``). Both keep every key they do not know (``extra="allow"``), so a manifest written by an older or
newer harness loads and is written back with nothing dropped. The runners change a manifest only through its methods
(a launch recorded, a cell done, finished / failed / interrupted, the lock holder, power cap records).
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, model_serializer

from harness.core.clocks import to_iso, wall_ns
from harness.core.errors import DataError, HarnessError, MissingFileError
from harness.core.jsonl import write_json_atomic

MANIFEST = "manifest.json"
SCHEMA = 1
"""The sweep manifest layout this harness writes and reads; a newer one is refused, never half-read."""


def git_commit(path: str | Path | None = None) -> dict[str, Any]:
    """The git commit (and whether the tree is dirty) of the checkout holding the harness, if any."""
    where = Path(path) if path else Path(__file__).resolve().parents[2]  # the checkout holding harness/
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=where, capture_output=True, text=True, timeout=5)
        if head.returncode != 0:
            return {"commit": None}
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=where,
            capture_output=True,
            text=True,
            timeout=5,
        )
        return {"commit": head.stdout.strip(), "dirty": bool(dirty.stdout.strip())}
    except (OSError, subprocess.SubprocessError):
        return {"commit": None}


def versions() -> dict[str, Any]:
    from importlib import metadata

    out: dict[str, Any] = {"python": sys.version.split()[0], "platform": platform.platform()}
    for dist in ("eagle-energy-harness", "httpx", "pydantic", "nvidia-ml-py", "sglang"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = None
    return out


class RunManifest(BaseModel):
    """What the sweep and pilot manifests share: identity, status and the transitions of a run."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    COMPLETE: ClassVar[str] = "complete"
    """The status word of a finished run (the pilots' published layout says ``completed``)."""
    OPTIONAL: ClassVar[frozenset[str]] = frozenset({"error", "fix", "failure_kind"})
    """Fields written only when set (absent, never null, as the dict manifests wrote them)."""

    schema_: int | str = Field(SCHEMA, alias="schema")
    run_id: str
    status: str = "running"
    error: str | None = None
    fix: str | None = None
    failure_kind: str | None = None
    hardware: str | None = None
    power_limit_w: float | None = None
    world: dict[str, Any] | None = None

    @model_serializer(mode="wrap")
    def _drop_unset_optionals(self, handler: Any) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        return {k: v for k, v in data.items() if not (v is None and k in self.OPTIONAL)}

    def to_json(self) -> dict[str, Any]:
        """The manifest as written: known fields under their JSON names, then every key this model did not know."""
        return self.model_dump(mode="json", by_alias=True)

    def save(self, run_dir: str | Path) -> None:
        write_json_atomic(Path(run_dir) / MANIFEST, self.to_json())

    def save_best_effort(self, run_dir: str | Path) -> None:
        """Write atomically; on a full disk (no room for the temp file) rewrite the file in place, compact.

        The compact form is smaller than the indented file already on disk, so it fits in the blocks that file
        holds. Never raises: it runs while another error is on its way to the user.
        """
        try:
            self.save(run_dir)
            return
        except HarnessError:
            pass
        try:
            data = json.dumps(self.to_json(), separators=(",", ":"), default=str).encode()
            with open(Path(run_dir) / MANIFEST, "r+b") as f:
                f.write(data)
                f.truncate(len(data))
                f.flush()
                os.fsync(f.fileno())
        except (OSError, ValueError):
            pass

    # --- transitions ------------------------------------------------------------------------------------------------
    def running(self) -> None:
        """A new session starts (a resume included): no failure from an earlier session stays on record."""
        self.status = "running"
        self.error = self.fix = self.failure_kind = None

    def finished(self) -> None:
        self.status = self.COMPLETE

    def interrupted(self) -> None:
        self.status = "interrupted"

    def failed(self, message: str, fix: str | None = None, kind: str | None = None) -> bool:
        """Record a failure of a running run; False (nothing changed) when the run had already ended otherwise."""
        if self.status != "running":
            return False
        self.status, self.error, self.fix, self.failure_kind = "failed", message, fix, kind
        return True

    def record_world(self, world: Any, *, best_effort: bool = False) -> dict[str, Any]:
        """The world's identity, hardware label and power limit; returns the identity. ``best_effort``: an identity
        that cannot be read is recorded as ``{"error": ...}`` instead of raising."""
        try:
            identity: dict[str, Any] = world.identity()
        except Exception as exc:  # best effort only when asked: the error is recorded in its place
            if not best_effort:
                raise
            identity = {"error": f"{type(exc).__name__}: {exc}"}
        self.world = identity
        self.hardware, self.power_limit_w = getattr(world, "hardware", None), getattr(world, "power_limit_w", None)
        return identity


class SweepSession(BaseModel):
    """One process's turn at a sweep run folder (the first run, each ``--resume``)."""

    model_config = ConfigDict(extra="allow")

    started_ns: int | None = None
    argv: list[str] = Field(default_factory=list)
    resumed: bool = False
    retry_errors: bool = False
    writer: dict[str, Any] | None = None
    world: dict[str, Any] | None = None
    launches: int | None = None
    sampler_restarts: int | None = None
    wall_s: float | None = None
    ended_ns: int | None = None

    @model_serializer(mode="wrap")
    def _drop_unset(self, handler: Any) -> dict[str, Any]:
        """A session records what it got to: nothing written as null (a session cut short has no ``ended_ns``)."""
        return {k: v for k, v in handler(self).items() if v is not None}


class SweepManifest(RunManifest):
    """``harness sweep``'s manifest (schema 1). ``launches`` counts every server start of every session."""

    OPTIONAL: ClassVar[frozenset[str]] = RunManifest.OPTIONAL | {
        "writer",
        "world",
        "engine_identity",
        "power_cap",
        "sm_clocks",
        "infrastructure_events",
        "seeds",
        "wall_s",
        "sglang_version",
        "sglang_version_requested",
        "attention_backend",
        "executor",
        "cell_gpus",
        "idle_power_w",
        "active",
        "vllm_version",
        "skipped_configs",
        "plan",
        "preflight",
        "gpu_time",
        "gpu_settings",
    }

    schema_: int = Field(SCHEMA, alias="schema")
    created_ns: int | None = None
    created: str | None = None
    argv: list[str] = Field(default_factory=list)
    options: dict[str, Any] | None = None
    versions: dict[str, Any] = Field(default_factory=dict)
    git: dict[str, Any] = Field(default_factory=dict)
    sessions: list[SweepSession] = Field(default_factory=list)
    launches: int = 0
    cells_planned: int | None = None
    cells_done: int = 0
    writer: dict[str, Any] | None = None
    sglang_version_requested: str | None = None
    sglang_version: str | None = None
    vllm_version: str | None = None
    skipped_configs: list[tuple[int, int, int]] = Field(default_factory=list)
    """Configs of the grid the engine has no equivalent of (vLLM: the EAGLE trees), not run."""
    attention_backend: str | None = None
    memory_total_mb: float | None = None
    seeds: dict[str, Any] | None = None
    engine_identity: dict[str, Any] | None = None
    power_cap: dict[str, Any] | None = None
    sm_clocks: dict[str, Any] | None = None
    """``--sm-clocks``: the SM clock controller's records (harness.gpu.sm_clocks)."""
    infrastructure_events: list[dict[str, Any]] | None = None
    wall_s: float | None = None
    executor: dict[str, Any] | None = None
    """``--executor ray``: the GPU slots, their events, busy seconds per GPU (harness.sweep.executors)."""
    cell_gpus: dict[str, Any] | None = None
    """``--executor ray``: which GPU (UUID, index, node, host) ran each cell."""
    idle_power_w: float | None = None
    """The board's power before any server started (``harness twin calibrate --from`` reads it)."""
    active: dict[str, Any] | None = None
    """``--strategy active``: rounds, GPU-seconds spent vs the predicted full grid, budget, stop reason."""
    plan: dict[str, Any] | None = None
    """What the run measures: its passes (GPU settings), batch sizes, configs, cells (``harness.sweep.preflight``)."""
    preflight: dict[str, Any] | None = None
    """What the run checked about its world before the first cell, one entry per check (``harness.sweep.preflight``)."""
    gpu_time: dict[str, Any] | None = None
    """Where the run's GPU seconds went (launch, measurement, settle, teardown): the place of issue 48's accounting."""
    gpu_settings: dict[str, Any] | None = None
    """Per-GPU settings (UUID -> cap and clock applied): the place of issue 49's per-GPU passes under Ray."""
    _launches_before: int = PrivateAttr(0)

    @classmethod
    def new(cls, run_id: str, argv: list[str], options: dict[str, Any], **fields: Any) -> SweepManifest:
        now = wall_ns()
        return cls(
            run_id=run_id,
            created_ns=now,
            created=to_iso(now),
            argv=argv,
            options=options,
            versions=versions(),
            git=git_commit(),
            **fields,
        )

    def begin_session(self, argv: list[str], *, resumed: bool, retry_errors: bool) -> SweepSession:
        """Start this process's session: status running, the lock holder recorded, the launch count carried on."""
        self.running()
        self._launches_before = self.launches
        session = SweepSession(
            started_ns=wall_ns(), argv=argv, resumed=resumed, retry_errors=retry_errors, writer=self.writer
        )
        self.sessions.append(session)
        return session

    def hold_lock(self, holder: dict[str, Any]) -> None:
        """The writer lock's holder (pid, host, start): ``harness status`` tells a live run from a dead one by it."""
        self.writer = dict(holder)

    def launches_recorded(self, this_session: int) -> None:
        """This session's launches so far, on top of the earlier sessions'."""
        self.launches = self._launches_before + this_session

    def cell_done(self) -> None:
        self.cells_done += 1

    def infrastructure_event(self, event: dict[str, Any]) -> None:
        self.infrastructure_events = [*(self.infrastructure_events or []), event]

    def setting_records(self, key: str) -> dict[str, Any]:
        """A device setting controller's records (``power_cap``, ``sm_clocks``: original, targets, enforced,
        restored), kept in place."""
        if key not in ("power_cap", "sm_clocks"):
            raise KeyError(key)
        if getattr(self, key) is None:
            setattr(self, key, {})
        records: dict[str, Any] = getattr(self, key)
        return records

    def end_session(self, session: SweepSession, *, launches: int, sampler_restarts: int, wall_s: float) -> None:
        session.launches, session.sampler_restarts, session.wall_s = launches, sampler_restarts, wall_s
        session.ended_ns = wall_ns()
        self.launches_recorded(launches)
        self.wall_s = sum(s.wall_s or 0.0 for s in self.sessions)


class PilotManifest(RunManifest):
    """``harness pilot``'s manifest (schema ``pilot-run-v1``): options, configs, suite metadata, start/end, outputs."""

    COMPLETE: ClassVar[str] = "completed"
    OPTIONAL: ClassVar[frozenset[str]] = RunManifest.OPTIONAL | {
        "finished_at",
        "outputs",
        "world",
        "hardware",
        "power_limit_w",
    }

    schema_: str = Field("pilot-run-v1", alias="schema")
    suite: str
    started_at: str = Field(default_factory=lambda: to_iso(wall_ns()))
    options: dict[str, Any] = Field(default_factory=dict)
    sglang_version: str | None = None
    sglang_version_requested: str | None = None
    configs: dict[str, list[int]] = Field(default_factory=dict)
    server_batch_size: int | None = None
    effective_concurrency: int = 1
    suite_meta: dict[str, Any] = Field(default_factory=dict)
    host: str | None = None
    finished_at: str | None = None
    outputs: list[Any] | None = None

    def finished(self) -> None:
        super().finished()
        self.finished_at = to_iso(wall_ns())

    def failed(self, message: str, fix: str | None = None, kind: str | None = None) -> bool:
        changed = super().failed(message, fix, kind)
        self.finished_at = to_iso(wall_ns())
        return changed


def read_manifest(run_dir: str | Path) -> SweepManifest:
    """The sweep manifest of ``run_dir``, every unknown key kept; a missing, broken or newer one is a clear error."""
    p = Path(run_dir) / MANIFEST
    if not p.exists():
        raise MissingFileError(
            f"{p} not found: {run_dir} is not a sweep run folder", fix="pass the folder a sweep wrote (--out)"
        )
    try:
        data = json.loads(p.read_text())
    except json.JSONDecodeError as exc:
        raise DataError(
            f"{p} is not valid JSON: {exc.msg}", fix="the manifest is written atomically; restore it from a backup"
        ) from None
    if not isinstance(data, dict) or "run_id" not in data:
        raise DataError(f"{p} is not a sweep manifest", fix="pass the folder a sweep wrote (--out)")
    schema = data.get("schema", SCHEMA)
    if not isinstance(schema, int) or isinstance(schema, bool) or schema < 1:
        raise DataError(
            f"{p}: schema {schema!r} is not a manifest schema number", fix="restore the manifest a sweep wrote"
        )
    if schema > SCHEMA:
        raise DataError(
            f"{p} has schema {schema}, newer than this harness reads ({SCHEMA})",
            fix="use the harness version that wrote this run (see the manifest's versions), or upgrade",
        )
    try:
        return SweepManifest.model_validate({"schema": schema, **data})
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(x) for x in err["loc"]) or "manifest"
        raise DataError(f"{p}: {where}: {err['msg']}", fix="restore the manifest the sweep wrote") from None


def read_options(run_dir: str | Path) -> Any:
    """The ``SweepOptions`` a run was planned with; a manifest without usable ``options`` is a DataError."""
    from harness.runs.options import SweepOptions

    manifest = read_manifest(run_dir)
    p = Path(run_dir) / MANIFEST
    if not isinstance(manifest.options, dict):
        raise DataError(
            f"{p} has no 'options' (the sweep's planned grid)",
            fix="restore the manifest the sweep wrote; without it the run cannot be resumed or checked against its plan",
        )
    from harness.core.model_options import OptionError

    try:
        return SweepOptions.model_validate(manifest.options)
    except OptionError as err:  # the value's own refusal, as at every door; the door is this manifest
        err.source = f"{p} (the run's saved options" + (f", key {err.field})" if err.field else ")")
        raise
