# mnistbench, Intel XPU image (UNTESTED: no Intel GPU, and PyTorch's XPU wheel index is not
# reachable from the machine this was written on, so it has never been built): the package, the
# Snakemake workflow and the pinned dependencies, with the XPU build of PyTorch (torch
# 2.14.1+xpu, --device xpu). Needs a discrete Intel GPU (Arc, Data Center GPU Flex/Max) and its
# kernel driver (i915 or xe) on the host; the container gets the GPU through /dev/dri. Build from
# the repository root (docs/docker.md):
#
#   docker build -f docker/xpu.Dockerfile -t mnistbench:xpu \
#     --build-arg REVISION="$(git rev-parse HEAD)" \
#     --build-arg CREATED="$(date -u +%Y-%m-%dT%H:%M:%SZ)" .
#   docker run --rm --device /dev/dri --user "$(id -u):$(id -g)" \
#     --group-add "$(getent group render | cut -d: -f3)" \
#     --hostname "$(hostname)" -v "$PWD/results:/work/results" \
#     -v "$PWD/resources:/work/resources" mnistbench:xpu
#
# This file is docker/cpu.Dockerfile with other defaults on the lines marked "(variant)";
# tests/workflow/test_docker.py checks that they stay identical everywhere else.
#
# Stages: base (base image + python3, setpriv, tini, the unprivileged user and an empty
# virtual environment) -> package (builds the mnistbench wheel) -> the image (base + the pinned
# dependencies + that wheel + the workflow). Layers go from rarely to often changed: a code
# change rebuilds the package stage and the last few layers, never the dependencies.

# Base image: any Debian or Ubuntu image that holds Intel's GPU compute runtime (the Level Zero
# GPU driver, libze-intel-gpu / intel-level-zero-gpu), which the XPU torch wheels need beside
# the SYCL runtime they bring; python3, python3-venv, setpriv and tini are installed from its
# archive when missing. Default: Intel's oneAPI runtime image, which installs that runtime from
# Intel's graphics repository (its "latest" tag: no tag could be checked from here). (variant)
ARG BASE_IMAGE=intel/oneapi-runtime:latest

# --------------------------------------------------------------------------------------------
FROM ${BASE_IMAGE} AS base
SHELL ["/bin/bash", "-o", "pipefail", "-euc"]
ARG DEBIAN_FRONTEND=noninteractive
# Archive packages are not version-pinned: the base image fixes the distribution release.
# hadolint ignore=DL3008
RUN set --; \
    command -v python3 >/dev/null || set -- "$@" python3; \
    python3 -c "import ensurepip, venv" 2>/dev/null || set -- "$@" python3-venv; \
    command -v setpriv >/dev/null || set -- "$@" util-linux; \
    command -v tini >/dev/null || set -- "$@" tini; \
    command -v g++ >/dev/null || set -- "$@" g++; \
    python3 -c "import sysconfig, os, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()['include'], 'Python.h')))" 2>/dev/null || set -- "$@" python3-dev; \
    ldconfig -p | grep -q libjemalloc.so.2 || set -- "$@" libjemalloc2; \
    ldconfig -p | grep -q libtcmalloc_minimal.so.4 || set -- "$@" libtcmalloc-minimal4; \
    if [ "$#" -gt 0 ]; then \
      apt-get update; \
      apt-get install -y --no-install-recommends "$@"; \
      rm -rf /var/lib/apt/lists/*; \
    fi; \
    groupadd --gid 10001 mnistbench; \
    useradd --uid 10001 --gid 10001 --create-home --shell /usr/sbin/nologin mnistbench; \
    install -d -m 1777 /work; \
    install -d -m 1777 -o mnistbench -g mnistbench /work/results /work/resources; \
    python3 -m venv /opt/mnistbench
ENV PATH=/opt/mnistbench/bin:$PATH

# --------------------------------------------------------------------------------------------
FROM base AS package
# CI only: a folder or http:// URL of wheels holding every dependency (scripts/ci-docker serves
# one from the host); when set, pip uses it alone and no package index.
ARG WHEELHOUSE=""
# The package index (here: for the build backend, setuptools).
ARG PIP_INDEX_URL=https://pypi.org/simple
WORKDIR /tmp/src
COPY pyproject.toml README.m[d] LICENS[E] ./
COPY src/ src/
RUN pip wheel --no-cache-dir --disable-pip-version-check --no-deps \
      ${WHEELHOUSE:+--no-index --find-links "$WHEELHOUSE"} --wheel-dir /tmp/dist .

# --------------------------------------------------------------------------------------------
FROM base
ARG BASE_IMAGE
# Where torch and torchvision come from (a pip index URL): PyTorch's XPU index, whose wheels
# bring the SYCL runtime and oneMKL for Intel GPUs. (variant)
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/xpu
# Where everything else comes from.
ARG PIP_INDEX_URL=https://pypi.org/simple
ARG WHEELHOUSE=""
ARG PIP_ROOT_USER_ACTION=ignore
# torch first and on its own, from TORCH_INDEX_URL only: nothing else may pull another build.
COPY envs/pip/torch.txt /tmp/requirements/torch.txt
RUN pip install --no-cache-dir --disable-pip-version-check \
      ${WHEELHOUSE:+--no-index --find-links "$WHEELHOUSE"} \
      --index-url "$TORCH_INDEX_URL" -r /tmp/requirements/torch.txt
# The runtime dependencies and the workflow engine (the snakemake and jsonschema pins of
# dev.txt; the image needs none of the other development tools), torch held where it is.
# requirements.lock records every installed version.
COPY envs/pip/base.txt envs/pip/dev.txt /tmp/requirements/
RUN grep -E '^(snakemake|jsonschema)==' /tmp/requirements/dev.txt >/tmp/requirements/workflow.txt; \
    pip install --no-cache-dir --disable-pip-version-check \
      ${WHEELHOUSE:+--no-index --find-links "$WHEELHOUSE"} \
      -r /tmp/requirements/base.txt -r /tmp/requirements/workflow.txt \
      -c /tmp/requirements/torch.txt; \
    pip check; \
    pip freeze --all >/opt/mnistbench/requirements.lock; \
    rm -rf /tmp/requirements
# The package itself, from the wheel the package stage built.
COPY --from=package /tmp/dist/ /tmp/dist/
RUN pip install --no-cache-dir --disable-pip-version-check --no-deps --no-index /tmp/dist/*.whl; \
    rm -rf /tmp/dist; \
    mnistbench --version
# Image name recorded in every cell's summary (env.container) and in its environment name.
# (variant)
ARG IMAGE_NAME=mnistbench:xpu
# The package version for the label: `mnistbench docker build` and scripts/ci-docker pass
# mnistbench.__version__ (its one home).
ARG VERSION=unknown
# git revision and build time (ISO 8601, UTC) for the labels and the summaries.
ARG REVISION=unknown
ARG CREATED=unknown
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    MNISTBENCH_CONTAINER=${IMAGE_NAME} \
    MNISTBENCH_GIT_REVISION=${REVISION}
WORKDIR /work
COPY Snakefile /work/
COPY workflow/ /work/workflow/
COPY config/ /work/config/
# The rules' conda environment (their conda: directives name it; Snakemake reads it).
COPY envs/conda.yaml /work/envs/conda.yaml
COPY src/ /work/src/
COPY docker/entrypoint.sh /usr/local/bin/mnistbench-entrypoint
LABEL org.opencontainers.image.title="mnistbench" \
      org.opencontainers.image.description="How much faster, and at what cost, does a GPU train a CNN than a CPU: the mnistbench study, ready to run." \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.licenses="MIT" \
      org.opencontainers.image.base.name="${BASE_IMAGE}" \
      org.opencontainers.image.ref.name="${IMAGE_NAME}"
# The entrypoint starts as root only to read who owns /work/results, then runs everything as
# that user (as root only when root owns the folder) under tini, which passes signals on
# (docker stop ends a study at once) and reaps orphans; see docs/docker.md.
ENTRYPOINT ["/usr/local/bin/mnistbench-entrypoint"]
CMD []
