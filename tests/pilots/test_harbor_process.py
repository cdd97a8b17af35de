"""Harbor as a child of the Terminal-Bench pilot (issue 38 C4): progress while it runs, and a stopped pilot never
leaves `harbor run` orphaned. Harbor here is a stand-in script that behaves like it: its own children, one trial
``result.json`` at a time; the pilot's real ``_run_harbor`` runs it in a real Python process that gets SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

FAKE_HARBOR = textwrap.dedent(
    """\
    #!/bin/sh
    # stand-in for `harbor run`: a long-lived child (a sandbox holder), then one trial result every 0.5 s
    sleep 300 &
    echo $! > "$1/child.pid"
    i=0
    while true; do
      i=$((i+1)); mkdir -p "$1/job/t$i"; echo '{}' > "$1/job/t$i/result.json"; sleep 0.5
    done
    """
)

DRIVER = textwrap.dedent(
    """\
    import sys
    from pathlib import Path
    from pilots.terminalbench import runner
    runner.PROGRESS_EVERY_S = 0.4
    work = Path(sys.argv[1])
    print("started", flush=True)
    runner._run_harbor([sys.argv[2], str(work)], work / "harbor.log", env=dict(__import__("os").environ), cwd=work,
                       timeout_s=120, progress=lambda s: runner._progress_line("no_spec", work / "job", 5, s, work / "harbor.log"))
    """
)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").exists() and "Z" not in Path(f"/proc/{pid}/stat").read_text().split()[2]


def test_sigterm_stops_harbors_process_group_and_progress_is_printed(tmp_path: Path) -> None:
    harbor = tmp_path / "harbor"
    harbor.write_text(FAKE_HARBOR)
    harbor.chmod(0o755)
    pilot = subprocess.Popen(
        [sys.executable, "-c", DRIVER, str(tmp_path), str(harbor)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[2],
    )  # fmt: skip
    try:
        assert pilot.stdout is not None and pilot.stdout.readline().strip() == "started"
        deadline = time.monotonic() + 30
        while not (tmp_path / "child.pid").exists() or len(list((tmp_path / "job").glob("*/result.json"))) < 3:
            assert time.monotonic() < deadline and pilot.poll() is None, "the stand-in harbor never got going"
            time.sleep(0.1)
        child = int((tmp_path / "child.pid").read_text())
        assert _alive(child)
        pilot.send_signal(signal.SIGTERM)
        _, err = pilot.communicate(timeout=60)
    finally:
        if pilot.poll() is None:
            pilot.kill()
    assert pilot.returncode == 128 + signal.SIGTERM, err
    assert "[terminalbench] no_spec: " in err and "/5 trials finished" in err and "Traceback" not in err
    deadline = time.monotonic() + 10
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(child), "harbor's child survived the pilot's SIGTERM (orphaned)"
