# Images of the harness. Targets:
#   cpu      harness[report,export]: twin, sampler, sweep, report, dataset tools on a plain Python base (ARG BASE_IMAGE)
#   sampler  small telemetry sidecar: the core install only (nvidia-ml-py, typer, rich, pydantic, httpx, numpy, prometheus_client, pyyaml)
#   train    harness[all]: cpu + torch, scikit-learn, joblib (policy training)
#   gpu      an official engine image (ARG ENGINE_IMAGE: sglang's, pinned by ARG SGLANG_TAG, by default; compose's
#            profile "vllm" passes vllm/vllm-openai:${VLLM_TAG}) + harness[all] on the engine's own torch, so a sweep
#            launches the engine per config
# Dependencies come from pyproject.toml's core list and extras only (see docs/containers.md).
#
# Offline/CI builds: put wheels into .e2e/wheels/ (pip wheel/download on the host) and build with
# --build-arg PIP_INSTALL_FLAGS=--no-index; pip then installs only from that folder. Without it, pip uses its index.
# The gpu stage is LAST on purpose: the legacy builder runs every stage up to --target, so building cpu/sampler/train
# never touches an engine image. No secrets are copied: .dockerignore admits only the sources and the wheelhouse.

ARG BASE_IMAGE=python:3.11-slim-bookworm
ARG SGLANG_TAG=v0.5.2-cu126
ARG ENGINE_IMAGE=lmsysorg/sglang:${SGLANG_TAG}

# ------------------------------------------------------------------------------------------------------------ pybase
FROM ${BASE_IMAGE} AS pybase
ARG HARNESS_UID=1000
ENV PATH=/opt/harness/bin:$PATH \
    HOME=/home/harness \
    PYTHONUNBUFFERED=1 \
    HARBOR_TELEMETRY=0
# A non-root user (useradd when the base has it, else /etc/passwd directly: a debootstrap minbase lacks passwd).
# HOME and /work are world-writable so compose's `user:` may name any uid (results keep the caller's ownership).
RUN set -eu; \
    if command -v useradd >/dev/null 2>&1; then \
      groupadd -g "$HARNESS_UID" harness && useradd -u "$HARNESS_UID" -g "$HARNESS_UID" -d /home/harness -s /bin/sh harness; \
    else \
      echo "harness:x:$HARNESS_UID:$HARNESS_UID:harness:/home/harness:/bin/sh" >>/etc/passwd; \
      echo "harness:x:$HARNESS_UID:" >>/etc/group; \
    fi; \
    mkdir -p /home/harness/.cache /work/results /work/.harbor-venv; \
    chown -R "$HARNESS_UID:$HARNESS_UID" /home/harness /work; \
    chmod 0777 /home/harness /home/harness/.cache /work /work/results /work/.harbor-venv; \
    python3 -m venv /opt/harness
WORKDIR /work

# ------------------------------------------------------------------------------------------------- build stages
# The wheelhouse and the sources exist only in these stages; the final images copy the finished venv, so no image
# carries the wheels (torch alone is 190 MB of them).
FROM pybase AS build-base
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_FIND_LINKS=/wheels
COPY pyproject.toml .e2e/wheel[s] /wheels/
# /deps: the project metadata alone (pyproject.toml, README, the version's source harness/__init__.py). Installing
# '/deps[extras]' and then removing that stub installs exactly the dependencies of those extras, in a layer that
# source changes do not invalidate; the real sources follow with --no-deps.
COPY pyproject.toml README.md /deps/
COPY harness/__init__.py /deps/harness/__init__.py

FROM build-base AS build-cpu
ARG PIP_INSTALL_FLAGS=
RUN pip install $PIP_INSTALL_FLAGS '/deps[report,export,stats]' && pip uninstall -y -q eagle-energy-harness
COPY README.md pyproject.toml /src/
COPY harness /src/harness
COPY pilots /src/pilots
COPY policies /src/policies
RUN pip install $PIP_INSTALL_FLAGS --no-deps /src

FROM build-base AS build-sampler
ARG PIP_INSTALL_FLAGS=
RUN pip install $PIP_INSTALL_FLAGS /deps && pip uninstall -y -q eagle-energy-harness
COPY README.md pyproject.toml /src/
COPY harness /src/harness
COPY pilots /src/pilots
COPY policies /src/policies
RUN pip install $PIP_INSTALL_FLAGS --no-deps /src

FROM build-cpu AS build-train
ARG PIP_INSTALL_FLAGS=
# [policies] accepts any torch >= 2.4 (so it can share sglang's); this image pins the one the suite is verified with
ARG TORCH_REQUIREMENT="torch==2.13.0"
RUN pip install $PIP_INSTALL_FLAGS '/src[all]' "$TORCH_REQUIREMENT"

# --------------------------------------------------------------------------------------------------------------- cpu
FROM pybase AS cpu
COPY --from=build-cpu /opt/harness /opt/harness
RUN harness --help >/dev/null
USER harness
ENTRYPOINT ["harness"]
CMD ["--help"]

# ----------------------------------------------------------------------------------------------------------- sampler
FROM pybase AS sampler
COPY --from=build-sampler /opt/harness /opt/harness
RUN harness sampler serve --help >/dev/null
USER harness
ENTRYPOINT ["harness", "sampler", "serve"]
CMD ["--help"]

# ------------------------------------------------------------------------------------------------------------- train
FROM pybase AS train
COPY --from=build-train /opt/harness /opt/harness
RUN harness train --help >/dev/null && python3 -c "import torch"
USER harness
ENTRYPOINT ["harness"]
CMD ["--help"]

# --------------------------------------------------------------------------------------------------------------- gpu
# Keep LAST (see the top). The harness goes into the engine's own interpreter (the sweep runs `python -m
# sglang.launch_server` or `python -m vllm.entrypoints.cli.main serve` with it) with every extra, constrained to
# every version the image already has (torch included: [policies] takes the engine's), so installing the harness never
# changes a package the engine depends on. pip fails the build if that is impossible. The sglang variables below are
# inert in a vLLM image.
FROM ${ENGINE_IMAGE} AS gpu
ARG PIP_INSTALL_FLAGS=
ARG HARNESS_UID=1000
ENV HOME=/home/harness \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_BREAK_SYSTEM_PACKAGES=1 \
    PIP_ROOT_USER_ACTION=ignore \
    PIP_FIND_LINKS=/wheels \
    HARBOR_TELEMETRY=0 \
    SGLANG_RECORD_STEP_TIME=1 \
    SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 \
    XDG_CACHE_HOME=/home/harness/.cache \
    TRITON_CACHE_DIR=/home/harness/.cache/triton \
    TORCHINDUCTOR_CACHE_DIR=/home/harness/.cache/torchinductor \
    CUDA_CACHE_PATH=/home/harness/.cache/nv/ComputeCache
RUN python3 -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "the harness needs Python >= 3.11; this engine image has " + sys.version.split()[0] + ": pick another SGLANG_TAG / VLLM_TAG")'
COPY pyproject.toml .e2e/wheel[s] /wheels/
# the same /deps stub as in build-base (copying it from there would build pybase, i.e. pull its base)
COPY pyproject.toml README.md /deps/
COPY harness/__init__.py /deps/harness/__init__.py
RUN python3 -m pip freeze | { grep -v -E ' @ |^-e ' || true; } >/tmp/engine-constraints.txt \
 && python3 -m pip install $PIP_INSTALL_FLAGS -c /tmp/engine-constraints.txt '/deps[all]' \
 && python3 -m pip uninstall -y -q eagle-energy-harness
COPY README.md pyproject.toml /src/
COPY harness /src/harness
COPY pilots /src/pilots
COPY policies /src/policies
RUN python3 -m pip install $PIP_INSTALL_FLAGS --no-deps /src && rm -rf /src /deps
# Non-root: the GPU stack runs as an ordinary user with HOME (HF, flashinfer and triton caches) writable; HOME and
# /work are world-writable so `user:` may name any uid. Reuse an existing user with that uid (Ubuntu 24.04 has one).
# Every JIT cache points into /home/harness/.cache (the `harness-cache` volume; the ENV above moves the ones that live
# elsewhere by default: triton's ~/.triton/cache, inductor's /tmp/torchinductor_<user>, CUDA's ~/.nv/ComputeCache),
# and whatever the engine image warmed as root under /root is copied there (a new named volume starts from it).
RUN set -eu; \
    mkdir -p /home/harness/.cache/triton; \
    for d in /root/.cache/*; do \
      case "$d" in */pip|*/huggingface|'/root/.cache/*') ;; *) cp -a "$d" /home/harness/.cache/;; esac; \
    done; \
    if [ -d /root/.triton/cache ]; then cp -a /root/.triton/cache/. /home/harness/.cache/triton/; fi; \
    if ! getent passwd "$HARNESS_UID" >/dev/null; then \
      getent group "$HARNESS_UID" >/dev/null || groupadd -g "$HARNESS_UID" harness 2>/dev/null \
        || echo "harness:x:$HARNESS_UID:" >>/etc/group; \
      useradd -u "$HARNESS_UID" -g "$HARNESS_UID" -d /home/harness -s /bin/bash harness 2>/dev/null \
        || echo "harness:x:$HARNESS_UID:$HARNESS_UID:harness:/home/harness:/bin/bash" >>/etc/passwd; \
    fi; \
    mkdir -p /home/harness/.cache /work/results /work/.harbor-venv; \
    chown -R "$HARNESS_UID:$HARNESS_UID" /home/harness /work; \
    chmod 0777 /home/harness /home/harness/.cache /work /work/results /work/.harbor-venv; \
    harness --help >/dev/null
USER ${HARNESS_UID}
WORKDIR /work
ENTRYPOINT ["harness"]
CMD ["--help"]
