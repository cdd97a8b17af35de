"""A Harbor environment that runs a task on this host in an isolated root (no container runtime needed).

Harbor imports this file inside its own venv (``--env tb_local_sandbox:LocalSandboxEnvironment`` with this folder on
``PYTHONPATH``); the harness never imports it. Design, per trial:

* a per-trial root ``<sandbox_base>/<session_id>/root`` with plain, writable ``/app /logs /tests /solution /tmp /root
  /var /run /home /opt /srv /mnt``;
* one long-lived *holder* process started with ``unshare --mount --pid --fork`` (private mount namespace, private PID
  namespace). Inside it the host's ``/usr /bin /sbin /lib* /etc`` are bind-mounted **read-only** into the root, ``/dev``
  is bind-mounted from the host and a fresh ``/proc`` is mounted, so ``ps`` shows only the trial's processes;
* every ``exec`` runs ``nsenter --mount --pid --target <holder> chroot <root> /bin/bash -c ...`` with a clean
  environment, so tmux servers started by Terminus 2 live on in the trial's namespace between calls;
* ``stop`` kills the holder (the kernel then kills every process of the trial's PID namespace and drops its mounts)
  and, with ``delete``, removes the root.

Task ``environment/Dockerfile`` support is a small subset: ``FROM`` (recorded, not pulled), ``WORKDIR``, ``ENV``,
``COPY``/``ADD`` of local files, and ``RUN`` (executed inside the sandbox, so it only succeeds when it needs nothing
beyond the host's read-only system). Limits: needs root and util-linux ``unshare``/``nsenter``; the network is the
host's (no isolation, so ``no-network`` tasks are rejected); no CPU/memory limits; system directories are the host's,
read-only (``apt-get install`` fails); ``/dev`` is the host's.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import shutil
import signal
import subprocess
import time
from pathlib import Path, PurePosixPath
from typing import Any

from harbor.environments.base import BaseEnvironment, ExecResult
from harbor.environments.capabilities import EnvironmentCapabilities

SYSTEM_DIRS = ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc")
PLAIN_DIRS = (
    "app",
    "logs/agent",
    "logs/verifier",
    "logs/artifacts",
    "tests",
    "solution",
    "tmp",
    "root",
    "var/tmp",
    "run",
    "home",
    "opt",
    "srv",
    "mnt",
    "proc",
    "dev",
)
BASE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class SandboxError(RuntimeError):
    """The local sandbox could not be set up or used."""


def parse_dockerfile(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, argument) pairs of a Dockerfile; continuation lines joined, comments dropped."""
    out: list[tuple[str, str]] = []
    buf = ""
    for raw in text.splitlines():
        line = raw.rstrip()
        if not buf and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        buf += line
        parts = buf.strip().split(None, 1)
        out.append((parts[0].upper(), parts[1] if len(parts) > 1 else ""))
        buf = ""
    if buf.strip():
        parts = buf.strip().split(None, 1)
        out.append((parts[0].upper(), parts[1] if len(parts) > 1 else ""))
    return out


class LocalSandboxEnvironment(BaseEnvironment):
    """Runs each trial in a chroot with private mount and PID namespaces on this host (root only)."""

    def __init__(self, *args: Any, sandbox_base: str | None = None, keep_root: bool = False, **kwargs: Any) -> None:
        self._sandbox_base_arg = sandbox_base
        self._keep_root = bool(keep_root)
        self._holder: subprocess.Popen | None = None
        self._ns_pid: int | None = None
        self._env_from_dockerfile: dict[str, str] = {}
        self._workdir = "/"
        super().__init__(*args, **kwargs)
        base = Path(sandbox_base) if sandbox_base else self.trial_paths.trial_dir.parent / ".sandboxes"
        self.sandbox_dir = (base / self.session_id).resolve()
        self.root = self.sandbox_dir / "root"

    @staticmethod
    def type() -> str:
        return "local-sandbox"

    @property
    def capabilities(self) -> EnvironmentCapabilities:
        return EnvironmentCapabilities()

    @classmethod
    def preflight(cls) -> None:
        if os.geteuid() != 0:
            raise SystemExit("local-sandbox environment: must run as root (it uses unshare, mount and chroot)")
        for tool in ("unshare", "nsenter", "chroot", "mount"):
            if shutil.which(tool) is None:
                raise SystemExit(f"local-sandbox environment: {tool} not found (install util-linux/coreutils)")

    def _validate_definition(self) -> None:
        dockerfile = self.environment_dir / "Dockerfile"
        if not dockerfile.exists() and not self.task_env_config.docker_image:
            raise FileNotFoundError(f"{dockerfile} not found (the local sandbox reads WORKDIR/ENV/COPY/RUN from it)")

    # ---- paths -------------------------------------------------------------------------------------------------
    def _host_path(self, env_path: str) -> Path:
        """Host path of an absolute sandbox path; refuses paths under the read-only system mounts."""
        pure = PurePosixPath("/") / PurePosixPath(env_path)
        parts = [p for p in pure.parts[1:] if p not in ("", ".")]
        if ".." in parts:
            raise SandboxError(f"path {env_path!r} escapes the sandbox")
        if parts and parts[0] in SYSTEM_DIRS:
            raise SandboxError(f"{env_path!r} is on the host's read-only system mounts of the local sandbox")
        return self.root.joinpath(*parts)

    # ---- lifecycle ---------------------------------------------------------------------------------------------
    async def start(self, force_build: bool) -> None:
        self.preflight()
        if self.root.exists():
            shutil.rmtree(self.sandbox_dir)
        for d in PLAIN_DIRS:
            (self.root / d).mkdir(parents=True, exist_ok=True)
        for d in ("tmp", "logs/agent", "logs/verifier", "logs/artifacts"):
            (self.root / d).chmod(0o777)
        (self.root / "tmp").chmod(0o1777)
        (self.root / "var" / "tmp").chmod(0o1777)
        script = ["set -e", f"R={shlex.quote(str(self.root))}"]
        for name in SYSTEM_DIRS:
            host = Path("/") / name
            target = self.root / name
            if host.is_symlink():
                target.symlink_to(os.readlink(host))
            elif host.is_dir():
                target.mkdir(exist_ok=True)
                script.append(f'mount --bind /{name} "$R/{name}" && mount -o remount,bind,ro "$R/{name}"')
        script += [
            'mount --rbind /dev "$R/dev"',
            'mount -t proc proc "$R/proc"',
            'touch "$R/tmp/.sandbox-ready"',
            "exec sleep infinity",
        ]
        self._holder = subprocess.Popen(
            ["unshare", "--mount", "--pid", "--fork", "--propagation", "private", "/bin/sh", "-c", "\n".join(script)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=open(self.sandbox_dir / "holder.log", "wb"),
        )  # same process group as Harbor: if Harbor's group is killed, the trial's namespace goes with it
        deadline = time.monotonic() + 20
        while not (self.root / "tmp" / ".sandbox-ready").exists():
            if self._holder.poll() is not None or time.monotonic() > deadline:
                log = (self.sandbox_dir / "holder.log").read_text(errors="replace")[-2000:]
                await self._kill_holder()
                raise SandboxError(f"local sandbox failed to start: {log.strip() or 'timeout'}")
            await asyncio.sleep(0.05)
        self._ns_pid = self._namespace_init_pid()
        await self._build()

    def _namespace_init_pid(self) -> int:
        """Host PID of the holder's forked child (PID 1 of the trial's PID namespace)."""
        assert self._holder is not None
        for _ in range(100):
            children = Path(f"/proc/{self._holder.pid}/task/{self._holder.pid}/children").read_text().split()
            if children:
                return int(children[0])
            time.sleep(0.02)
        raise SandboxError("local sandbox: cannot find the namespace's init process")

    async def _build(self) -> None:
        dockerfile = self.environment_dir / "Dockerfile"
        steps = parse_dockerfile(dockerfile.read_text()) if dockerfile.exists() else []
        for instr, arg in steps:
            if instr == "FROM":
                self.logger.debug(f"local sandbox ignores FROM {arg} (the host system is used, read-only)")
            elif instr == "WORKDIR":
                self._workdir = str(PurePosixPath(self._workdir) / arg.strip())
                self._host_path(self._workdir).mkdir(parents=True, exist_ok=True)
            elif instr == "ENV":
                self._env_from_dockerfile.update(_parse_env(arg))
            elif instr in ("COPY", "ADD"):
                items = [a for a in shlex.split(arg) if not a.startswith("--")]
                *sources, dest = items
                dest_abs = dest if dest.startswith("/") else str(PurePosixPath(self._workdir) / dest)
                for src in sources:
                    await self._copy_in(self.environment_dir / src, dest_abs, dest.endswith("/") or len(sources) > 1)
            elif instr == "RUN":
                result = await self.exec(arg, timeout_sec=int(self.task_env_config.build_timeout_sec))
                if result.return_code != 0:
                    raise SandboxError(
                        f"RUN {arg!r} failed in the local sandbox ({result.return_code}): {result.stdout}"
                    )
            else:
                self.logger.warning(f"local sandbox ignores Dockerfile instruction {instr}")
        if self.task_env_config.workdir:
            self._workdir = self.task_env_config.workdir
            self._host_path(self._workdir).mkdir(parents=True, exist_ok=True)

    async def _copy_in(self, src: Path, dest: str, dest_is_dir: bool) -> None:
        if src.is_dir():
            await self.upload_dir(src, dest)
        elif dest_is_dir:
            await self.upload_file(src, str(PurePosixPath(dest) / src.name))
        else:
            await self.upload_file(src, dest)

    async def stop(self, delete: bool) -> None:
        await self._kill_holder()
        if delete and not self._keep_root and self.sandbox_dir.exists():
            for name in SYSTEM_DIRS + ("dev", "proc"):
                p = self.root / name
                if os.path.ismount(p):  # only possible if the holder's namespace leaked; never delete through it
                    raise SandboxError(f"{p} is still a mount point; not deleting the sandbox")
            shutil.rmtree(self.sandbox_dir, ignore_errors=True)

    async def _kill_holder(self) -> None:
        holder, self._holder = self._holder, None
        ns_pid, self._ns_pid = self._ns_pid, None
        if holder is None or holder.poll() is not None:
            return
        for pid in (ns_pid, holder.pid):  # PID 1 of the namespace first: it takes every trial process with it
            if pid:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        holder.wait(timeout=10)

    # ---- exec and file transfer --------------------------------------------------------------------------------
    async def exec(
        self,
        command: str,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout_sec: int | None = None,
        user: str | int | None = None,
    ) -> ExecResult:
        if self._ns_pid is None:
            raise SandboxError("local sandbox is not started")
        user = self._resolve_user(user)
        run_env = {"PATH": BASE_PATH, "HOME": "/root", "LANG": "C.UTF-8", "TERM": "xterm-256color"}
        run_env.update(self._env_from_dockerfile)
        run_env.update(self._merge_env(env) or {})
        workdir = cwd or self._workdir
        chroot = ["chroot"]
        if user not in (None, "root", 0, "0"):
            chroot.append(f"--userspec={user}")
        argv = [
            "nsenter",
            f"--target={self._ns_pid}",
            "--mount",
            "--pid",
            *chroot,
            str(self.root),
            "/bin/bash",
            "-c",
            f"cd {shlex.quote(workdir)} && {{\n{command}\n}}",
        ]
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=run_env,
            start_new_session=True,
        )
        try:
            out, err = await asyncio.wait_for(proc.communicate(), timeout=timeout_sec or None)
        except asyncio.TimeoutError:
            _kill_group(proc.pid)
            await proc.wait()
            raise RuntimeError(f"Command timed out after {timeout_sec} seconds") from None
        except BaseException:
            _kill_group(proc.pid)
            raise
        with open(self.sandbox_dir / "exec.log", "a") as log:
            log.write(
                f"--- rc={proc.returncode} user={user} cwd={workdir} env={sorted((env or {}).keys())}\n{command}\n"
                f"stderr: {err.decode(errors='replace')[-500:]}\n"
            )
        return ExecResult(
            stdout=out.decode(errors="replace") or None,
            stderr=err.decode(errors="replace") or None,
            return_code=proc.returncode or 0,
        )

    async def upload_file(self, source_path: Path | str, target_path: str) -> None:
        dest = self._host_path(target_path)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source_path, dest)

    async def upload_dir(self, source_dir: Path | str, target_dir: str) -> None:
        dest = self._host_path(target_dir)
        dest.mkdir(parents=True, exist_ok=True)
        _copy_tree(Path(source_dir), dest)

    async def download_file(self, source_path: str, target_path: Path | str) -> None:
        src = self._host_path(source_path)
        Path(target_path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, target_path)

    async def download_dir(self, source_dir: str, target_dir: Path | str) -> None:
        src = self._host_path(source_dir)
        Path(target_dir).mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            _copy_tree(src, Path(target_dir))


def _parse_env(arg: str) -> dict[str, str]:
    items = shlex.split(arg)
    if len(items) >= 2 and "=" not in items[0]:
        return {items[0]: " ".join(items[1:])}
    return dict(item.split("=", 1) for item in items if "=" in item)


def _copy_tree(src: Path, dest: Path) -> None:
    """Copy a tree (symlinks as links), skipping sockets, FIFOs and devices (tmux leaves a socket behind)."""
    dest.mkdir(parents=True, exist_ok=True)
    for entry in os.scandir(src):
        target = dest / entry.name
        if entry.is_symlink():
            if target.is_symlink() or target.exists():
                target.unlink()
            target.symlink_to(os.readlink(entry.path))
        elif entry.is_dir():
            _copy_tree(Path(entry.path), target)
        elif entry.is_file():
            shutil.copy2(entry.path, target)


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
