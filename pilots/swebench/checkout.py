"""Local repository checkouts (``--repos-dir/<owner>__<name>``), read through git without touching the work tree.

Files are read at a revision with ``git ls-tree`` / ``git cat-file --batch``; ``git apply --check`` runs against a
throw-away index built from that revision, so a checkout at any branch can serve any base commit it contains.
The project's fixture repository is built from ``fixtures/repo_astropy__astropy.json`` into a real git repository;
its instances' upstream base commits are not in it, so they are read at the fixture's HEAD (recorded as such).
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from harness.core.errors import DataError
from pilots.swebench.instances import FIXTURE_REPO_FILE, Instance, fixture_path

GIT_ENV = {
    "GIT_AUTHOR_NAME": "swebench-pilot fixture",
    "GIT_AUTHOR_EMAIL": "fixture@localhost",
    "GIT_COMMITTER_NAME": "swebench-pilot fixture",
    "GIT_COMMITTER_EMAIL": "fixture@localhost",
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00+00:00",
    "GIT_COMMITTER_DATE": "2026-01-01T00:00:00+00:00",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_TERMINAL_PROMPT": "0",
}


def _git(
    repo: Path, *args: str, input: bytes | None = None, env: dict[str, str] | None = None, check: bool = True
) -> subprocess.CompletedProcess[bytes]:
    full_env = {**os.environ, **GIT_ENV, "HOME": os.environ.get("HOME", "/tmp"), **(env or {})}
    proc = subprocess.run(["git", "-C", str(repo), *args], input=input, capture_output=True, env=full_env, timeout=120)
    if check and proc.returncode != 0:
        raise DataError(
            f"git {' '.join(args[:3])} failed in {repo}: {proc.stderr.decode(errors='replace').strip()[:300]}",
            fix="check that the folder is a git repository with the instance's base commit",
        )
    return proc


def build_fixture_repo(dest_dir: str | Path) -> Path:
    """Create (or reuse) ``dest_dir/astropy__astropy``: a one-commit git repository of the project's fixture files."""
    spec = json.loads(fixture_path(FIXTURE_REPO_FILE).read_text())
    repo = Path(dest_dir) / spec["repo"].replace("/", "__")
    if (repo / ".git").exists():
        return repo
    repo.mkdir(parents=True, exist_ok=True)
    for rel, text in spec["files"].items():
        p = repo / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "project-written fixture tree (not upstream code)")
    _git(repo, "tag", "fixture-base")
    return repo


@dataclass
class Checkout:
    """A repository folder and the revision an instance is read at."""

    path: Path
    rev: str
    note: str = ""

    def commit(self) -> str:
        return _git(self.path, "rev-parse", f"{self.rev}^{{commit}}").stdout.decode().strip()

    def list_files(self) -> list[tuple[str, int]]:
        """``(path, size)`` of every blob at the revision, in git order."""
        out = _git(self.path, "ls-tree", "-r", "-l", "--full-tree", self.rev).stdout.decode(errors="replace")
        files = []
        for line in out.splitlines():
            meta, _, path = line.partition("\t")
            parts = meta.split()
            if len(parts) >= 4 and parts[1] == "blob":
                files.append((path, int(parts[3]) if parts[3].isdigit() else 0))
        return files

    def read_many(self, paths: list[str]) -> dict[str, str | None]:
        """File texts at the revision in one ``git cat-file --batch`` call; binaries (NUL bytes) read as None."""
        if not paths:
            return {}
        query = "".join(f"{self.rev}:{p}\n" for p in paths).encode()
        raw = _git(self.path, "cat-file", "--batch", input=query).stdout
        out: dict[str, str | None] = {}
        pos = 0
        for p in paths:
            nl = raw.index(b"\n", pos)
            header = raw[pos:nl].decode(errors="replace").split()
            pos = nl + 1
            if len(header) < 3 or header[1] == "missing":
                out[p] = None
                continue
            size = int(header[2])
            blob = raw[pos : pos + size]
            pos += size + 1
            out[p] = None if b"\0" in blob else blob.decode("utf-8", errors="replace")
        return out

    def apply_check(self, patch: str) -> tuple[bool, str]:
        """``git apply --check`` of ``patch`` against the revision (a temporary index; the work tree is untouched)."""
        with tempfile.TemporaryDirectory(prefix="swe-apply-") as tmp:
            env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
            _git(self.path, "read-tree", self.rev, env=env)
            proc = _git(
                self.path,
                "apply",
                "--check",
                "--cached",
                "--whitespace=nowarn",
                "-",
                input=patch.encode(),
                env=env,
                check=False,
            )
        msg = (proc.stderr or proc.stdout).decode(errors="replace").strip()
        return proc.returncode == 0, msg[:500]


def find_checkout(repos_dir: str | Path | None, inst: Instance) -> tuple[Checkout | None, str]:
    """The checkout of ``inst`` under ``repos_dir`` and why (or why not)."""
    if repos_dir is None:
        return None, "no --repos-dir given"
    path = Path(repos_dir) / inst.repo_dirname
    if not (path / ".git").exists() and not (path / "HEAD").exists():
        return None, f"no git repository at {path}"
    ok = _git(path, "cat-file", "-e", f"{inst.base_commit}^{{commit}}", check=False).returncode == 0
    if ok:
        return Checkout(path, inst.base_commit, "base_commit"), "base_commit found"
    if inst.is_fixture:
        return Checkout(path, "HEAD", "fixture repository: upstream base_commit absent, read at HEAD"), "fixture HEAD"
    return None, f"base commit {inst.base_commit[:12]} not in {path} (fetch it: git fetch origin {inst.base_commit})"
