"""compose.yaml and the Dockerfile, checked without a Docker daemon.

Needs the Compose v2 CLI (``docker compose`` or a v2 ``docker-compose``): `.ci/e2e.sh --install-only` installs it.
Every check runs the real compose binary on the real files (``config`` needs no daemon) and the real ``harness`` CLI.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
COMPOSE_FILE = ROOT / "compose.yaml"
DOCKERFILE = ROOT / "Dockerfile"
CI_BASE_IMAGE = "harness-e2e/base:bookworm"  # what .ci/e2e.sh imports from debootstrap
WORLDS = ("gpu", "twin")
SGLANG_ENGINE, VLLM_ENGINE = "lmsysorg/sglang", "vllm/vllm-openai"  # the official engine images the gpu stage builds on


def _compose_cmd() -> list[str] | None:
    candidates = []
    if shutil.which("docker"):
        candidates.append(["docker", "compose"])
    if shutil.which("docker-compose"):
        candidates.append(["docker-compose"])
    for cmd in candidates:
        try:
            out = subprocess.run(
                [*cmd, "version", "--short"], capture_output=True, text=True, timeout=20, env=_env(), check=False
            )
        except (OSError, subprocess.TimeoutExpired):
            continue
        if out.returncode == 0 and re.match(r"v?2\.", out.stdout.strip()):
            return cmd
    return None


def _env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("HARNESS_", "COMPOSE_", "SGLANG_TAG", "VLLM_TAG", "PIP_INSTALL"))
    }
    env.update(DOCKER_HOST="unix:///nonexistent/docker.sock", DOCKER_CONFIG=str(ROOT / ".e2e" / "no-docker-config"))
    env.update(extra)
    return env


COMPOSE = _compose_cmd()
needs_compose = pytest.mark.skipif(
    COMPOSE is None, reason="Compose v2 CLI absent: run `bash .ci/e2e.sh --install-only` first"
)


def compose(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    assert COMPOSE is not None
    return subprocess.run(
        [*COMPOSE, "-f", str(COMPOSE_FILE), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=_env(**env),
        check=False,
    )


def config(world: str, *profiles: str, **env: str) -> dict:
    flags = [f for p in profiles for f in ("--profile", p)]
    out = compose(*flags, "config", "--format", "json", HARNESS_WORLD=world, **env)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


# ------------------------------------------------------------------------------------------------ Dockerfile model
def dockerfile_stages(text: str) -> tuple[dict[str, str], list[dict]]:
    """Global ARG defaults and the stages in order: ``{"name", "from", "copy_from": [...]}``."""
    lines = re.sub(r"\\\n", " ", text).splitlines()
    global_args: dict[str, str] = {}
    stages: list[dict] = []
    for raw in lines:
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        word = line.split()[0].upper()
        if word == "ARG" and not stages:
            name, _, default = line.split(None, 1)[1].partition("=")
            global_args[name.strip()] = default.strip().strip('"')
        elif word == "FROM":
            m = re.match(r"FROM\s+(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?", line, re.I)
            assert m, line
            stages.append({"name": (m.group(2) or str(len(stages))).lower(), "from": m.group(1), "copy_from": []})
        elif word in ("COPY", "ADD"):
            m = re.search(r"--from=(\S+)", line)
            if m:
                stages[-1]["copy_from"].append(m.group(1).lower())
    return global_args, stages


def _expand(ref: str, values: dict[str, str]) -> str:
    """``ref`` with ``$VAR``/``${VAR}`` replaced, repeatedly (a global ARG's default may name an earlier ARG)."""
    for _ in range(8):
        ref, n = re.subn(r"\$\{?(\w+)\}?", lambda m: values.get(m.group(1), ""), ref)
        if n == 0:
            break
    return ref


def external_images(target: str, build_args: dict[str, str], text: str) -> list[str]:
    """Every image outside the Dockerfile that building ``target`` needs (FROM and COPY --from chains)."""
    global_args, stages = dockerfile_stages(text)
    values = {**global_args, **{k: v for k, v in build_args.items() if v is not None}}
    by_name = {s["name"]: s for s in stages}
    assert target in by_name, f"no stage {target!r}"
    needed, todo, seen = [], [target], set()
    while todo:
        stage = by_name[todo.pop()]
        if stage["name"] in seen:
            continue
        seen.add(stage["name"])
        for ref in [stage["from"], *stage["copy_from"]]:
            ref = _expand(ref, values).lower()
            if ref in by_name:
                todo.append(ref)
            else:
                needed.append(ref)
    return needed


def pull_problems(cfg: dict, dockerfile_text: str, local_images: set[str]) -> list[str]:
    """Why bringing up this (resolved) stack could make the daemon contact a registry; [] when it cannot."""
    problems = []
    _, stages = dockerfile_stages(dockerfile_text)
    stage_order = [s["name"] for s in stages]
    for name, svc in cfg["services"].items():
        if svc.get("pull_policy") != "never":
            problems.append(f"{name}: pull_policy is {svc.get('pull_policy')!r}, not 'never'")
        build = svc.get("build")
        if not build:
            if svc.get("image") not in local_images:
                problems.append(f"{name}: image {svc.get('image')!r} is neither built here nor a local base")
            continue
        target = build.get("target")
        if target is None:
            problems.append(f"{name}: build has no target")
            continue
        for ref in external_images(target, build.get("args") or {}, dockerfile_text):
            if ref not in local_images:
                problems.append(f"{name}: target {target} needs image {ref!r}, which would be pulled")
        if "gpu" in stage_order and target != "gpu" and stage_order.index(target) > stage_order.index("gpu"):
            problems.append(f"{name}: target {target} comes after the gpu stage (the legacy builder would pull sglang)")
    return problems


# ---------------------------------------------------------------------------------------------------------- tests
@needs_compose
@pytest.mark.parametrize("world", WORLDS)
def test_config_quiet_passes_for_both_stacks(world: str) -> None:
    for profiles in ([], ["*"]):
        flags = [f for p in profiles for f in ("--profile", p)]
        out = compose(*flags, "config", "-q", HARNESS_WORLD=world)
        assert out.returncode == 0, f"{world} {profiles}: {out.stderr}"
        assert out.stdout == ""


@needs_compose
def test_a_broken_compose_file_is_rejected(tmp_path: Path) -> None:
    """The linter is real: the same file with ports given as a string fails validation."""
    bad = tmp_path / "compose.yaml"
    bad.write_text(COMPOSE_FILE.read_text().replace("  sampler-twin:\n", '  sampler-twin:\n    ports: "1:1"\n', 1))
    out = subprocess.run(
        [*COMPOSE, "-f", str(bad), "config", "-q"],
        capture_output=True,
        text=True,
        timeout=60,
        env=_env(HARNESS_WORLD="twin"),
        check=False,
    )
    assert out.returncode != 0 and "ports" in out.stderr


@needs_compose
def test_worlds_share_service_names_and_switch_commands() -> None:
    gpu, twin = config("gpu", "jobs"), config("twin", "jobs")
    public = {"sampler", "sweep", "pilot", "train", "report", "gpu-twin", "reproduce", "serve", "gpu-check"}
    assert set(gpu["services"]) == public and set(twin["services"]) == public
    assert gpu["services"]["gpu-twin"]["scale"] == 0, "the twin device must be inert on a GPU box"
    assert "--probe" in (s := twin["services"]["sampler"]["entrypoint"]) and s[s.index("--probe") + 1] == "twin"
    assert (s := gpu["services"]["sampler"]["entrypoint"])[s.index("--probe") + 1] == "nvml"
    assert (e := twin["services"]["sweep"]["entrypoint"])[e.index("--engine") + 1] == "twin" and "--twin-gpu" in e
    assert (e := gpu["services"]["sweep"]["entrypoint"])[e.index("--engine") + 1] == "sglang"
    for world in (gpu, twin):
        for name, svc in world["services"].items():
            assert svc["network_mode"] == "host" and svc["init"] is True, name
    # only GPU-world services reserve a GPU, so the twin stack runs on any machine
    assert not any(s.get("deploy") for s in twin["services"].values())
    for name in ("sampler", "sweep", "pilot", "reproduce", "serve", "gpu-check"):
        devices = gpu["services"][name]["deploy"]["resources"]["reservations"]["devices"]
        assert devices[0]["driver"] == "nvidia" and "gpu" in devices[0]["capabilities"], name


@needs_compose
def test_gpu_services_follow_the_official_sglang_runtime() -> None:
    gpu = config("gpu", "jobs")
    for name in ("sweep", "pilot", "reproduce", "serve"):
        svc = gpu["services"][name]
        assert svc["ipc"] == "host"
        assert svc["ulimits"]["memlock"] == -1 or svc["ulimits"]["memlock"] == {"soft": -1, "hard": -1}
        assert svc["ulimits"]["stack"] == 67108864 or svc["ulimits"]["stack"]["soft"] == 67108864
        assert "HF_TOKEN" in svc["environment"]
        assert any(v["target"] == "/home/harness/.cache" for v in svc["volumes"])
        results = [v for v in svc["volumes"] if v["target"].endswith("/results")]
        assert results and results[0]["target"] == ("/work/results" if name != "pilot" else results[0]["source"])
    assert gpu["services"]["sweep"]["depends_on"]["sampler"]["condition"] == "service_healthy"
    health = gpu["services"]["sampler"]["healthcheck"]
    assert "/-/ready" in " ".join(health["test"]) and health["start_period"] not in (None, "0s")
    assert any(v["source"] == "/var/run/docker.sock" for v in gpu["services"]["pilot"]["volumes"])
    # HF_TOKEN is passed through, never given a value in the file
    assert "HF_TOKEN=" not in COMPOSE_FILE.read_text()


@needs_compose
def test_twin_stack_needs_no_pull_in_ci() -> None:
    """Every image of the twin stack is built here from a base CI makes locally, with pull_policy never."""
    text = DOCKERFILE.read_text()
    cfg = config("twin", "jobs", "vllm", HARNESS_BASE_IMAGE=CI_BASE_IMAGE)
    assert "sweep-vllm" in cfg["services"] and pull_problems(cfg, text, {CI_BASE_IMAGE}) == []
    # the check itself bites: a pulled image, a missing pull_policy, a non-local base are all reported
    broken = json.loads(json.dumps(cfg))
    broken["services"]["sampler"]["pull_policy"] = "missing"
    broken["services"]["report"] = {"image": "python:3.11", "pull_policy": "never"}
    broken["services"]["sweep"]["build"]["args"]["BASE_IMAGE"] = "python:3.11-slim"
    found = "\n".join(pull_problems(broken, text, {CI_BASE_IMAGE}))
    assert "sampler: pull_policy" in found and "report: image 'python:3.11'" in found and "python:3.11-slim" in found
    # with the default base (a GPU box with a registry) the same check names the base that would be pulled
    default = config("twin", "jobs")
    assert any("python:3.11-slim-bookworm" in p for p in pull_problems(default, text, {CI_BASE_IMAGE}))


def test_dockerfile_pins_sglang_by_tag_through_an_arg() -> None:
    global_args, stages = dockerfile_stages(DOCKERFILE.read_text())
    tag = global_args["SGLANG_TAG"]
    assert re.fullmatch(r"v\d+\.\d+\.\d+(\.post\d+)?-cu\d+", tag), f"SGLANG_TAG default {tag!r} is not a pinned version"
    gpu_stage = next(s for s in stages if s["name"] == "gpu")
    assert gpu_stage["from"] == "${ENGINE_IMAGE}" and global_args["ENGINE_IMAGE"] == SGLANG_ENGINE + ":${SGLANG_TAG}"
    assert stages[-1]["name"] == "gpu", "the gpu stage must stay last (legacy builder runs all stages up to --target)"
    # building the gpu target needs the sglang image and nothing else (no python base pulled on the GPU box)
    assert external_images("gpu", {}, DOCKERFILE.read_text()) == [f"{SGLANG_ENGINE}:{tag}"]
    assert external_images("gpu", {"SGLANG_TAG": "v9"}, DOCKERFILE.read_text()) == [f"{SGLANG_ENGINE}:v9"]
    for target in ("cpu", "sampler", "train"):
        assert external_images(target, {}, DOCKERFILE.read_text()) == [global_args["BASE_IMAGE"]], target


@needs_compose
def test_gpu_stack_builds_from_the_pinned_sglang_tag() -> None:
    global_args, _ = dockerfile_stages(DOCKERFILE.read_text())
    tag = global_args["SGLANG_TAG"]
    cfg = config("gpu", "jobs")
    for name in ("sweep", "pilot", "train", "report"):
        build = cfg["services"][name]["build"]
        assert build["target"] == "gpu" and build["args"]["SGLANG_TAG"] == tag, name
        assert cfg["services"][name]["image"] == f"eagle-harness:gpu-{tag}"
        assert external_images("gpu", build["args"], DOCKERFILE.read_text()) == [f"{SGLANG_ENGINE}:{tag}"]
    other = config("gpu", "jobs", SGLANG_TAG="v0.5.23-cu130")["services"]["sweep"]
    assert (
        other["build"]["args"]["SGLANG_TAG"] == "v0.5.23-cu130" and other["image"] == "eagle-harness:gpu-v0.5.23-cu130"
    )
    assert other["build"]["args"]["ENGINE_IMAGE"] == f"{SGLANG_ENGINE}:v0.5.23-cu130"


@needs_compose
def test_vllm_profile_sweeps_vllm_from_the_official_image_with_the_same_sampler() -> None:
    from harness.engine.vllm_argv import VLLM_SUPPORTED_RANGE

    text = DOCKERFILE.read_text()
    gpu, gpu_plain = config("gpu", "vllm"), config("gpu")
    assert set(gpu["services"]) == set(gpu_plain["services"]) | {"sweep-vllm"}
    assert gpu["services"]["sampler"] == gpu_plain["services"]["sampler"], "the sidecar must be the sglang stack's"
    svc = gpu["services"]["sweep-vllm"]
    assert (e := svc["entrypoint"])[e.index("--engine") + 1] == "vllm" and "--sampler-url" in e
    assert svc["depends_on"]["sampler"]["condition"] == "service_healthy" and svc["ipc"] == "host"
    assert svc["pull_policy"] == "never" and svc["network_mode"] == "host" and svc["init"] is True
    devices = svc["deploy"]["resources"]["reservations"]["devices"]
    assert devices[0]["driver"] == "nvidia" and "compute" in devices[0]["capabilities"]
    build = svc["build"]
    image, _, tag = build["args"]["ENGINE_IMAGE"].partition(":")
    assert build["target"] == "gpu" and image == VLLM_ENGINE and svc["image"] == f"eagle-harness:gpu-vllm-{tag}"
    assert external_images("gpu", build["args"], text) == [f"{VLLM_ENGINE}:{tag}"]  # sglang's image is not pulled
    version = tuple(int(x) for x in tag.lstrip("v").split("."))
    low, high = (tuple(int(x) for x in v.split(".")) for v in VLLM_SUPPORTED_RANGE)
    assert low <= version <= high, f"VLLM_TAG default {tag} is outside the supported range {VLLM_SUPPORTED_RANGE}"
    other = config("gpu", "vllm", VLLM_TAG="v0.34.0")["services"]["sweep-vllm"]
    assert other["build"]["args"]["ENGINE_IMAGE"] == f"{VLLM_ENGINE}:v0.34.0" and other["image"].endswith("v0.34.0")
    twin = config("twin", "vllm")["services"]["sweep-vllm"]
    e = twin["entrypoint"]
    assert e[e.index("--engine") + 1] == "twin" and e[e.index("--twin-emulate") + 1] == "vllm" and "--twin-gpu" in e
    assert not twin.get("deploy") and twin["depends_on"]["sampler"]["condition"] == "service_healthy"


def test_images_carry_no_secrets_and_the_context_is_an_allow_list() -> None:
    text = DOCKERFILE.read_text()
    assert not re.search(r"^\s*(ARG|ENV)\s+[^\n]*(TOKEN|SECRET|PASSWORD|API_KEY)", text, re.M | re.I)
    ignore = [
        ln.strip() for ln in (ROOT / ".dockerignore").read_text().splitlines() if ln.strip() and not ln.startswith("#")
    ]
    assert ignore[0] == "*", ".dockerignore must exclude everything by default"
    admitted = {ln[1:].rstrip("/") for ln in ignore if ln.startswith("!")}
    assert admitted <= {"pyproject.toml", "README.md", "harness", "pilots", "policies", ".e2e/wheels"}
    assert re.search(r"^USER\s+harness\s*$", text, re.M) and "USER ${HARNESS_UID}" in text


def _service_argvs() -> list[tuple[str, str, list[str]]]:
    if COMPOSE is None:
        return []
    out = []
    for world in WORLDS:
        for name, svc in config(world, "jobs", "vllm")["services"].items():
            if svc.get("scale") == 0:
                continue
            out.append((world, name, [*svc["entrypoint"], *(svc.get("command") or [])]))
    return out


@needs_compose
@pytest.mark.parametrize(("world", "name", "argv"), _service_argvs(), ids=lambda v: v if isinstance(v, str) else None)
def test_service_commands_are_accepted_by_the_harness_cli(world: str, name: str, argv: list[str]) -> None:
    """Each service's argv (entrypoint + default command) names real commands and flags of this checkout's CLI."""
    if argv[:3] == ["python3", "-u", "benchmarks/gpu_check.py"]:  # the proof kit, mounted from the checkout
        out = subprocess.run(
            [sys.executable, *argv[1:], "--help"], capture_output=True, text=True, timeout=60, cwd=ROOT
        )
        assert out.returncode == 0 and "--full" in out.stdout, out.stderr
        return
    assert argv[0] == "harness"
    args = [a for a in argv[1:] if a != "--help"]
    if name == "pilot":  # what `docker compose run pilot --suite terminalbench` runs
        args += ["--suite", "terminalbench"]
    out = subprocess.run(
        [sys.executable, "-m", "harness", *args, "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        check=False,
    )
    assert out.returncode == 0, (
        f"{world}/{name}: harness {' '.join(args)} --help -> {out.stdout[-600:]}{out.stderr[-600:]}"
    )
    assert "Usage" in out.stdout


@needs_compose
def test_only_the_settings_agent_runs_as_root_and_it_mounts_nothing() -> None:
    """NVML's power-limit and clock setters need root and, in a container, CAP_SYS_ADMIN (NVML_ERROR_NO_PERMISSION
    otherwise). A sweep as root left root-owned caches and run folders behind (sglang 0.5.23 keeps flashinfer's JIT
    workspace and locks under ~/.cache/sglang: srt/environ.py), which a uid-1000 sweep cannot use (issue 46 item 1):
    the "settings" profile's sweep is uid 1000 and sets caps and clocks through the settings agent, the only root
    service, which mounts no volume; the key reaches the two, never a value in the file."""
    default = config("gpu", "jobs")["services"]["sweep"]
    assert default["user"] == "1000:1000" and not default.get("cap_add") and not default.get("privileged")
    for world in ("gpu", "twin"):
        services = config(world, "settings")["services"]
        settings = services["sweep-settings"]
        assert settings["user"] == "1000:1000" and not settings.get("cap_add") and not settings.get("privileged")
        assert settings["entrypoint"][:2] == ["harness", "sweep"]
    gpu = config("gpu", "settings")["services"]
    agent, sweep = gpu["gpu-settings"], gpu["sweep-settings"]
    assert agent["user"] == "0:0" and agent["cap_add"] == ["SYS_ADMIN"] and not agent.get("privileged")
    assert not agent.get("volumes"), "the root agent must not mount (and so write) results or caches"
    assert (
        agent["entrypoint"][:3] == ["harness", "gpu-settings", "serve"]
        and "HARNESS_SETTINGS_KEY" in agent["environment"]
    )
    assert agent["deploy"]["resources"]["reservations"]["devices"][0]["driver"] == "nvidia"
    e = sweep["entrypoint"]
    assert e[e.index("--engine") + 1] == "sglang" and e[e.index("--gpu-settings-url") + 1].endswith(":18300")
    assert sweep["depends_on"]["gpu-settings"]["condition"] == "service_healthy"
    assert "HARNESS_SETTINGS_KEY" in sweep["environment"]
    assert (
        agent["environment"]["HARNESS_SETTINGS_KEY"] is None is sweep["environment"]["HARNESS_SETTINGS_KEY"]
    )  # passed through
    twin = config("twin", "settings")["services"]
    assert twin["gpu-settings"]["scale"] == 0 and "--gpu-settings-url" not in twin["sweep-settings"]["entrypoint"]


@needs_compose
def test_the_pilots_results_have_the_same_path_inside_and_out(tmp_path: Path) -> None:
    """Harbor's docker environment bind-mounts each trial's folders by their path in the pilot's container, and the
    host's daemon resolves that path on the host (issue 46 item 8): the pilot's results are mounted at the path they
    have on the host, and the pilot works in the folder above them, so `results/<run>` is one folder for both."""
    for world in WORLDS:
        pilot = config(world, "jobs", PWD=str(tmp_path))["services"]["pilot"]
        results = [v for v in pilot["volumes"] if v["target"].endswith("/results")]
        assert results and results[0]["source"] == results[0]["target"] == str(tmp_path / "results"), world
        assert pilot["working_dir"] == str(tmp_path), world
        venv = [v for v in pilot["volumes"] if v["target"].endswith(".harbor-venv")]
        assert venv and venv[0]["target"] == str(tmp_path / ".harbor-venv"), world  # harbor_install.default_venv
    sock = [
        v
        for v in config("gpu", "jobs", HARNESS_DOCKER_SOCK="/run/user/1000/docker.sock")["services"]["pilot"]["volumes"]
        if v["target"] == "/var/run/docker.sock"
    ]
    assert sock and sock[0]["source"] == "/run/user/1000/docker.sock"  # a rootless daemon's socket


@needs_compose
def test_harness_gpus_limits_the_boards_ray_schedules_on(tmp_path: Path) -> None:
    """Device ids cannot come from one variable as a list (under CDI a "0,1" id names no device: moby
    daemon/nvidia_linux.go, normalizeDeviceID), so the Ray services see the box's boards and HARNESS_GPUS becomes
    CUDA_VISIBLE_DEVICES, which Ray's GPU count reads; unset, every board. The script is run by a real sh, with a
    recorder on PATH in ray's place."""
    fake = tmp_path / "ray"
    fake.write_text('#!/bin/sh\necho "CUDA=${CUDA_VISIBLE_DEVICES-unset} ARGS=$*"\n')
    fake.chmod(0o755)
    for name in ("ray-head", "ray-worker"):
        svc = config("gpu", "ray")["services"][name]
        assert svc["deploy"]["resources"]["reservations"]["devices"][0]["count"] in ("all", -1)
        assert "HARNESS_GPUS" in svc["environment"]
        script = svc["entrypoint"][2].replace("$$", "$")
        for gpus, seen in (("0,1,2,3", "CUDA=0,1,2,3"), (None, "CUDA=unset")):
            env = {"PATH": f"{tmp_path}:/usr/bin:/bin", **({"HARNESS_GPUS": gpus} if gpus else {})}
            out = subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=20, env=env)
            assert out.returncode == 0 and out.stdout.startswith(seen) and "start" in out.stdout, (name, out)


def gpu_stage_env(text: str) -> dict[str, str]:
    """The ENV the Dockerfile's gpu stage sets (``KEY=VALUE`` pairs of its ENV lines)."""
    stage = re.sub(r"\\\n", " ", text).split("AS gpu", 1)[1].split("\nFROM ", 1)[0]
    env: dict[str, str] = {}
    for line in stage.splitlines():
        if line.strip().upper().startswith("ENV "):
            env.update(pair.split("=", 1) for pair in line.split()[1:] if "=" in pair)
    return env


# Where each JIT/model cache of the engines lives for a user, by its own code (env var, default) with HOME and the
# user name substituted: HF (huggingface_hub constants), triton (triton/knobs.py: $TRITON_HOME/.triton/cache),
# inductor (torch/_inductor/runtime/cache_dir_utils.py: /tmp/torchinductor_<user>), CUDA's PTX JIT
# (~/.nv/ComputeCache), flashinfer (flashinfer/jit/env.py: $FLASHINFER_WORKSPACE_BASE or HOME + /.cache/flashinfer),
# sglang's own JIT and deep_gemm (srt/environ.py: ~/.cache/sglang, ~/.cache/deep_gemm), vLLM ($XDG_CACHE_HOME/vllm).
ENGINE_CACHES = {
    "huggingface": ("HF_HOME", "{home}/.cache/huggingface"),
    "triton": ("TRITON_CACHE_DIR", "{home}/.triton/cache"),
    "torchinductor": ("TORCHINDUCTOR_CACHE_DIR", "/tmp/torchinductor_harness"),
    "cuda": ("CUDA_CACHE_PATH", "{home}/.nv/ComputeCache"),
    "flashinfer": ("", "{home}/.cache/flashinfer"),
    "sglang": ("", "{home}/.cache/sglang"),
    "vllm": ("", "{xdg}/vllm"),
}


@needs_compose
def test_every_engine_cache_of_the_gpu_image_lies_in_the_cache_volume() -> None:
    """Non-root moves HOME; every JIT and model cache must still land in the mounted cache volume (issue 39 item 10),
    so a restart neither downloads nor compiles again."""
    env = gpu_stage_env(DOCKERFILE.read_text())
    cfg = config("gpu", "jobs", "vllm")
    for name in ("sweep", "pilot", "train", "sweep-vllm"):
        service = cfg["services"][name]
        service_env = {**env, **{k: v for k, v in (service.get("environment") or {}).items() if v is not None}}
        home = service_env["HOME"]
        xdg = service_env.get("XDG_CACHE_HOME", f"{home}/.cache")
        volumes = [v["target"] for v in service["volumes"] if v.get("type") == "volume" or "cache" in str(v["source"])]
        cache_targets = [t for t in volumes if t.endswith("/.cache")]
        assert cache_targets, f"{name}: no cache volume"
        for tool, (var, default) in ENGINE_CACHES.items():
            where = service_env.get(var) if var else None
            where = where or default.format(home=home, xdg=xdg)
            assert any(where.startswith(t + "/") for t in cache_targets), f"{name}: {tool} caches at {where}"
