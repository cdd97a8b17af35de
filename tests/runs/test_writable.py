"""Folders another user owns (a run as root left them) are found before the first launch: the run folder of a
``--resume`` and the engines' caches (issue 46 item 1). The real CLI runs as an unprivileged user against folders
it cannot write (this process reading its identity as uid 1000, the folders really another user's)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from harness.cli import main
from harness.core.errors import OutputError
from harness.runs.writable import check_writable, engine_cache_roots, unwritable


def test_unwritable_reads_owner_and_mode_bits(tmp_path: Path) -> None:
    cache = tmp_path / ".cache"
    (cache / "sglang" / "flashinfer").mkdir(parents=True)
    (cache / "sglang" / "flashinfer" / "lock").write_text("")
    owner = os.geteuid()
    other = owner + 1000 if owner else 1000
    found = unwritable([cache / "sglang"], uid=other, gids={other})
    assert {p.name for p, _ in found} == {"sglang", "flashinfer", "lock"} and {u for _, u in found} == {owner}
    assert unwritable([cache / "sglang"], uid=owner, gids=set()) == []  # the owner may (0755 / 0644)
    assert unwritable([cache / "sglang"], uid=0, gids=set()) == []  # root may
    for p in (cache / "sglang", cache / "sglang" / "flashinfer", cache / "sglang" / "flashinfer" / "lock"):
        p.chmod(p.stat().st_mode | 0o002)
    assert unwritable([cache / "sglang"], uid=other, gids={other}) == []
    (cache / "sglang").chmod(0o755)
    with pytest.raises(OutputError) as exc:
        check_writable([cache / "sglang"], "the engines' caches", uid=other, gids={other})
    err = exc.value
    assert err.exit_code == 6 and f"uid {other} cannot write the engines' caches" in err.message
    assert f"owner uid {owner}" in err.message and f"chown -R {other}:{other} {cache / 'sglang'}" in (err.fix or "")
    assert unwritable([tmp_path / "absent"], uid=other, gids=set()) == []


def test_engine_cache_roots_follow_the_environment(tmp_path: Path) -> None:
    roots = engine_cache_roots({"HOME": str(tmp_path), "HF_HOME": "/models/hf"})
    assert tmp_path / ".cache" / "sglang" in roots and Path("/models/hf") in roots
    assert engine_cache_roots({"XDG_CACHE_HOME": "/c"})[0] == Path("/c/sglang")
    offline = engine_cache_roots({"HOME": str(tmp_path), "HF_HOME": "/models/hf", "HF_HUB_OFFLINE": "1"})
    assert Path("/models/hf") not in offline and tmp_path / ".cache" / "huggingface" not in offline  # only read
    assert tmp_path / ".cache" / "sglang" in offline


@pytest.fixture
def as_uid_1000(monkeypatch: pytest.MonkeyPatch) -> int:
    """This process reads its identity as uid/gid 1000 (the images' user) when it decides what it may write: a child
    process as another user cannot start here (the interpreter lies under root's 0700 home), and root may write
    anything, so the identity the check reads is set instead; the folders, their owners and modes are real."""
    uid = 1000 if os.geteuid() != 1000 else 1001
    monkeypatch.setattr(os, "geteuid", lambda: uid)
    monkeypatch.setattr(os, "getegid", lambda: uid)
    monkeypatch.setattr(os, "getgroups", lambda: [])
    return uid


def _run(argv: list[str], capsys) -> tuple[int, str]:
    code = main(argv)
    cap = capsys.readouterr()
    return code, cap.out + cap.err


@pytest.mark.integration  # the sweep's CLI (it may start probes such as uname)
def test_a_resume_of_a_folder_another_user_wrote_is_refused_naming_owner_and_fix(
    tmp_path: Path, as_uid_1000: int, capsys
) -> None:
    run = tmp_path / "run"
    run.mkdir()
    manifest = {
        "schema": 1,
        "run_id": "x",
        "status": "interrupted",
        "options": {"engine": "twin", "configs": [[0, 0, 0]], "batch_sizes": [1]},
    }
    (run / "manifest.json").write_text(json.dumps(manifest))
    (run / "rows.jsonl").write_text("")
    code, out = _run(["sweep", "--resume", str(run)], capsys)
    assert code == 6, out
    assert f"uid {as_uid_1000} cannot write the run folder" in out and f"owner uid {os.stat(run).st_uid}" in out, out
    assert f"chown -R {as_uid_1000}:{as_uid_1000} {run}" in out and "Traceback" not in out
    assert json.loads((run / "manifest.json").read_text())["status"] == "interrupted"  # refused before any write


@pytest.mark.integration
def test_a_real_engine_sweep_refuses_a_root_owned_cache_before_any_launch(
    tmp_path: Path, as_uid_1000: int, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    home = tmp_path / "home"
    (home / ".cache" / "sglang").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    for k in (
        "XDG_CACHE_HOME",
        "HF_HOME",
        "HF_HUB_CACHE",
        "TRITON_CACHE_DIR",
        "TORCHINDUCTOR_CACHE_DIR",
        "CUDA_CACHE_PATH",
    ):
        monkeypatch.delenv(k, raising=False)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    out_dir.chmod(0o777)  # the run folder itself is this user's to write
    argv = [
        "sweep",
        "--engine",
        "sglang",
        "--sglang-version",
        "0.5.23",
        "--configs",
        "0:0:0",
        "--batch-sizes",
        "1",
        "--plain",
        "--out",
        str(out_dir / "run"),
    ]
    code, out = _run(argv, capsys)
    assert code == 6, out
    assert "cannot write the engines' caches" in out and str(home / ".cache" / "sglang") in out, out
    assert "Traceback" not in out and not (out_dir / "run" / "engine-logs").exists()
    manifest = json.loads((out_dir / "run" / "manifest.json").read_text())
    assert manifest["status"] == "failed" and "engines' caches" in json.dumps(manifest["error"])
