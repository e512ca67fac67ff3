"""Tests of the container images (docker/*.Dockerfile, docker/entrypoint.sh): the two Dockerfiles
stay in step and pass hadolint (no engine needed), and, against a real Docker engine (marker
``docker``): the image's contents, labels and environment, the mnistbench CLI inside it, who
owns the files it writes, prompt ``docker stop`` and exit codes passed back, its environment
name, arguments passed through to Snakemake, a tiny study run by the default entrypoint on a
read-only data folder, a cell that matches a local run of the same cell, a rebuild after
a code change that reuses the dependency layers, and the workflow's docker runner (runner:
docker builds the images and runs each cell in one) against the local runner.

Image under test: ``$MNISTBENCH_DOCKER_IMAGE`` when set (scripts/ci-docker builds it once
before pytest), else the session builds docker/cpu.Dockerfile as ``mnistbench:pytest`` with
the extra ``docker build`` arguments in ``$MNISTBENCH_DOCKER_BUILD_ARGS``. Without an engine
the ``docker`` tests skip, unless ``MNISTBENCH_REQUIRE_DOCKER=1``: then they fail.
"""

from __future__ import annotations

import csv
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from mnistbench import __version__
from mnistbench.core import schema, study
from mnistbench.data import mnist as data
from mnistbench.measure import sysinfo

REPO = Path(__file__).resolve().parents[2]
CPU_DOCKERFILE = REPO / "docker" / "cpu.Dockerfile"
CUDA_DOCKERFILE = REPO / "docker" / "cuda.Dockerfile"
#: The images for the other vendors' GPUs (untested: their wheels are not reachable here).
VENDOR_DOCKERFILES = {"rocm": REPO / "docker" / "rocm.Dockerfile",
                      "xpu": REPO / "docker" / "xpu.Dockerfile"}
IMAGE_VAR = "MNISTBENCH_DOCKER_IMAGE"
BUILD_ARGS_VAR = "MNISTBENCH_DOCKER_BUILD_ARGS"
REQUIRE_VAR = "MNISTBENCH_REQUIRE_DOCKER"
SESSION_IMAGE = "mnistbench:pytest"
BUILD_TIMEOUT_S = 3600  # s, a cold build downloads torch
RUN_TIMEOUT_S = 600  # s, the most one container of these tests may take
#: Non-root owner of the host folders the containers write to: a foreign uid when the tests run
#: as root (the container must take it over), else the user running the tests.
OWNER = 12345 if os.geteuid() == 0 else os.geteuid()
OWNER_GID = 12345 if os.geteuid() == 0 else os.getegid()
#: What the image's /work holds: the workflow, the package source, the two mount points.
WORK_CONTENTS = {"Snakefile", "workflow", "config", "envs", "src", "results", "resources"}


# --------------------------------------------------------------------------------------------
# No engine needed.
def _instructions(path: Path) -> list[tuple[bool, str]]:
    """The Dockerfile's non-comment lines, each flagged when a comment ending in "(variant)"
    directly precedes it."""
    out, variant = [], False
    for line in path.read_text().splitlines():
        if line.startswith("#"):
            variant = line.rstrip().endswith("(variant)")
            continue
        if line.strip():
            out.append((variant, line))
        variant = False
    return out


def test_dockerfiles_differ_only_in_variant_lines():
    """cuda.Dockerfile is cpu.Dockerfile except the values of the lines marked (variant)."""
    cpu, cuda = _instructions(CPU_DOCKERFILE), _instructions(CUDA_DOCKERFILE)
    assert len(cpu) == len(cuda), "the Dockerfiles have different instructions"
    variants = 0
    for (cpu_variant, cpu_line), (cuda_variant, cuda_line) in zip(cpu, cuda, strict=True):
        assert cpu_variant == cuda_variant, (cpu_line, cuda_line)
        if cpu_variant:
            variants += 1
            assert cpu_line.split("=", 1)[0] == cuda_line.split("=", 1)[0]
            assert cpu_line != cuda_line, f"variant line equal in both: {cpu_line}"
        else:
            assert cpu_line == cuda_line
    assert variants == 3  # BASE_IMAGE, TORCH_INDEX_URL, IMAGE_NAME


@pytest.mark.parametrize("kind", sorted(VENDOR_DOCKERFILES))
def test_vendor_dockerfiles_follow_the_cpu_image(kind):
    """rocm.Dockerfile and xpu.Dockerfile are cpu.Dockerfile except the three (variant)
    lines: PyTorch's ROCm or XPU wheel index, their base image and image name; each says in
    its header that it is untested and how its container gets the GPU."""
    path = VENDOR_DOCKERFILES[kind]
    cpu, other = _instructions(CPU_DOCKERFILE), _instructions(path)
    assert len(cpu) == len(other), f"{path.name} has other instructions than cpu.Dockerfile"
    for (cpu_variant, cpu_line), (variant, line) in zip(cpu, other, strict=True):
        assert cpu_variant == variant, (cpu_line, line)
        if variant:
            assert cpu_line.split("=", 1)[0] == line.split("=", 1)[0]
        else:
            assert cpu_line == line
    args = dict(line.split(" ", 1)[1].split("=", 1) for variant, line in other if variant)
    assert args["TORCH_INDEX_URL"].startswith(f"https://download.pytorch.org/whl/{kind}")
    assert args["IMAGE_NAME"] == f"mnistbench:{kind}"
    header = path.read_text().split("\n\n", 1)[0]
    assert "UNTESTED" in header and "--device /dev/dri" in header
    if kind == "rocm":
        assert "--device /dev/kfd" in header


def test_dockerfile_variant_defaults():
    """The CPU image takes the CPU-only torch wheels, the CUDA image PyPI's CUDA build on a
    base image of the same CUDA version as the torch build pinned in envs/pip/torch.txt
    (the .venv's), and both pin their base image to a release."""
    def args(path: Path) -> dict[str, str]:
        return dict(line.split(" ", 1)[1].split("=", 1) for variant, line in _instructions(path)
                    if variant)

    cpu, cuda = args(CPU_DOCKERFILE), args(CUDA_DOCKERFILE)
    assert cpu["TORCH_INDEX_URL"] == "https://download.pytorch.org/whl/cpu"
    assert cuda["TORCH_INDEX_URL"] == "https://pypi.org/simple"
    assert re.fullmatch(r"python:3\.11\.\d+-slim-bookworm", cpu["BASE_IMAGE"])
    base = re.fullmatch(r"nvidia/cuda:(\d+\.\d+)\.\d+-[a-z-]+-ubuntu24\.04", cuda["BASE_IMAGE"])
    assert base, cuda["BASE_IMAGE"]
    assert (cpu["IMAGE_NAME"], cuda["IMAGE_NAME"]) == ("mnistbench:cpu", "mnistbench:cuda")
    # The pinned torch's CUDA version, from the .venv, which holds that pin's PyPI wheel.
    torch_pin = re.search(r"^torch==(\S+)", (REPO / "envs" / "pip" / "torch.txt").read_text(),
                          re.MULTILINE)
    assert torch_pin, "envs/pip/torch.txt pins no torch"
    import torch

    installed = torch.__version__.split("+")[0]
    assert installed == torch_pin[1], (
        f"the .venv holds torch {torch.__version__}, envs/pip/torch.txt pins "
        f"{torch_pin[1]}: run scripts/setup")
    if torch.version.cuda is None:
        pytest.skip(f"torch {torch.__version__} here is a CPU-only build: its CUDA version, "
                    "which the CUDA base image must match, is unknown")
    assert base[1] == torch.version.cuda, (
        f"torch {torch_pin[1]} is built for CUDA {torch.version.cuda}, the CUDA image's base "
        f"for CUDA {base[1]}")


def test_hadolint_passes_on_both_dockerfiles():
    """hadolint (envs/pip/dev.txt) reports nothing on either Dockerfile."""
    hadolint = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or \
        shutil.which("hadolint")
    if hadolint is None:
        pytest.skip("hadolint is not installed (pip install -r envs/pip/dev.txt)")
    proc = subprocess.run([hadolint, str(CPU_DOCKERFILE), str(CUDA_DOCKERFILE),
                           *map(str, VENDOR_DOCKERFILES.values())],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


# --------------------------------------------------------------------------------------------
# Engine and image.
def _docker(*args: str, timeout: float = RUN_TIMEOUT_S, check: bool = True,
            env: dict | None = None) -> subprocess.CompletedProcess:
    """Run ``docker ARGS``; with ``check`` a non-zero exit fails the test with the output."""
    proc = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout,
                          check=False, env=env)
    if check and proc.returncode != 0:
        pytest.fail(f"docker {shlex.join(args)} exited {proc.returncode}:\n"
                    f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc


@pytest.fixture(scope="session")
def engine() -> None:
    """A Docker engine that answers; else skip (fail with MNISTBENCH_REQUIRE_DOCKER=1)."""
    reason = None
    if shutil.which("docker") is None:
        reason = "no docker command on PATH"
    else:
        try:
            proc = subprocess.run(["docker", "info", "--format", "{{.ServerVersion}}"],
                                  capture_output=True, text=True, timeout=60, check=False)
        except subprocess.TimeoutExpired:
            reason = "docker info did not answer within 60 s"
        else:
            if proc.returncode != 0 or not proc.stdout.strip():
                reason = f"no Docker engine answers: {proc.stderr.strip()[:300]}"
    if reason is None:
        return
    reason += " (start one with scripts/docker-engine start)"
    if os.environ.get(REQUIRE_VAR) == "1":
        pytest.fail(f"{REQUIRE_VAR}=1 but {reason}")
    pytest.skip(reason)


def _build_args() -> list[str]:
    return shlex.split(os.environ.get(BUILD_ARGS_VAR, ""))


def _legacy_builder_env() -> dict:
    """The environment for ``docker build`` with the classic builder, whose per-step output
    ("---> Using cache") the rebuild test reads."""
    return dict(os.environ, DOCKER_BUILDKIT="0")


@pytest.fixture(scope="session")
def image(engine) -> str:
    """The image under test: $MNISTBENCH_DOCKER_IMAGE, else docker/cpu.Dockerfile built once."""
    name = os.environ.get(IMAGE_VAR, "").strip()
    if name:
        if _docker("image", "inspect", name, check=False).returncode != 0:
            pytest.fail(f"{IMAGE_VAR}={name}: no such image; build it (scripts/ci-docker) or "
                        f"unset {IMAGE_VAR} to let the tests build one")
        return name
    _docker("build", "-f", str(CPU_DOCKERFILE), "-t", SESSION_IMAGE,
            "--build-arg", f"VERSION={__version__}", *_build_args(),
            str(REPO), timeout=BUILD_TIMEOUT_S, env=_legacy_builder_env())
    return SESSION_IMAGE


@pytest.fixture(scope="session")
def image_env(image) -> dict[str, str]:
    """The image's configured environment variables."""
    config = json.loads(_docker("image", "inspect", image, "--format", "{{json .Config}}").stdout)
    return dict(item.split("=", 1) for item in config["Env"])


def _owned_dir(path: Path) -> Path:
    """``path`` created and owned by the non-root :data:`OWNER`."""
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        os.chown(path, OWNER, OWNER_GID)
    return path


def _run(image: str, *args: str, volumes: dict[Path, str] | None = None,
         options: tuple[str, ...] = (), check: bool = True) -> subprocess.CompletedProcess:
    """``docker run --rm`` of ``image`` with host folders mounted (``{host: "/dest[:ro]"}``)."""
    mounts = []
    for host, dest in (volumes or {}).items():
        mounts += ["-v", f"{host}:{dest}"]
    return _docker("run", "--rm", *mounts, *options, image, *args, check=check)


def _tree_owners(root: Path) -> set[tuple[int, int]]:
    """(uid, gid) of ``root`` and of everything below it."""
    owners = {(root.stat().st_uid, root.stat().st_gid)}
    for path in root.rglob("*"):
        st = path.lstat()
        owners.add((st.st_uid, st.st_gid))
    return owners


@pytest.fixture(scope="session")
def ro_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Synthetic MNIST files (2048 train, 512 test samples) in a folder anyone may read."""
    root = tmp_path_factory.mktemp("docker_data")
    data.make_synthetic(root, n_train=2048, n_test=512, seed=0)
    for path in [root, *root.iterdir()]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return root


# --------------------------------------------------------------------------------------------
@pytest.mark.docker
def test_image_holds_workflow_and_package(image):
    """/work holds the workflow, config and source and nothing else of the checkout, and the
    installed mnistbench is this checkout's version."""
    assert set(_run(image, "sh", "-c", "ls -A /work").stdout.split()) == WORK_CONTENTS
    assert _run(image, "mnistbench", "--version").stdout.split() == ["mnistbench", __version__]


@pytest.mark.docker
def test_image_labels_and_environment(image, image_env):
    """The image carries the OCI labels and names itself and its revision in the environment
    that every cell's summary records."""
    labels = json.loads(_docker("image", "inspect", image, "--format",
                                "{{json .Config.Labels}}").stdout)
    for key in ("title", "description", "version", "revision", "created", "licenses",
                "base.name"):
        assert labels.get(f"org.opencontainers.image.{key}"), key
    assert labels["org.opencontainers.image.version"] == __version__
    assert image_env["MNISTBENCH_CONTAINER"]
    assert image_env["MNISTBENCH_GIT_REVISION"] == labels["org.opencontainers.image.revision"]


@pytest.mark.docker
def test_mnistbench_cli_in_container(image):
    """A first argument ``mnistbench`` runs the CLI: --help lists every subcommand."""
    out = _run(image, "mnistbench", "--help").stdout
    for command in ("fetch", "train", "env", "aggregate", "report"):
        assert command in out


@pytest.mark.docker
def test_files_belong_to_owner_of_results_folder(image, tmp_path):
    """Started as root (the default), the container runs as the owner of the mounted results
    folder, with no capabilities and a writable HOME, so what it writes belongs to that user."""
    results = _owned_dir(tmp_path / "results")
    script = ("id -u; id -g; grep CapEff /proc/self/status; touch \"$HOME/probe\"; "
              "mkdir -p /work/results/runs/x && echo hi > /work/results/runs/x/file")
    out = _run(image, "sh", "-c", script, volumes={results: "/work/results"}).stdout.split("\n")
    assert out[0] == str(OWNER) and out[1] == str(OWNER_GID)
    assert out[2].split() == ["CapEff:", "0000000000000000"]
    assert (results / "runs" / "x" / "file").read_text() == "hi\n"
    assert _tree_owners(results) == {(OWNER, OWNER_GID)}


@pytest.mark.docker
def test_user_flag_and_unmounted_results(image):
    """``--user`` is kept as given; without a mounted results folder the container runs as the
    image's unprivileged user ``mnistbench`` (uid 10001)."""
    assert _run(image, "sh", "-c", "id -u; id -g", options=("--user", "23456:23457")) \
        .stdout.split() == ["23456", "23457"]
    assert _run(image, "sh", "-c", "id -un; id -u").stdout.split() == ["mnistbench", "10001"]


@pytest.mark.docker
def test_root_owned_results_folder_runs_as_root_and_says_so(image, tmp_path):
    """When root owns the mounted results folder, the container stays root (the folder's
    owner) and says on stderr how to run unprivileged."""
    if os.geteuid() != 0:
        pytest.skip("needs a folder owned by root, which only root can create here")
    results = tmp_path / "results"
    results.mkdir()
    proc = _run(image, "sh", "-c", "id -u", volumes={results: "/work/results"})
    assert proc.stdout.strip() == "0"
    assert "root owns /work/results" in proc.stderr and "--user" in proc.stderr


@pytest.mark.docker
def test_docker_stop_is_prompt(image):
    """``docker stop`` ends the command at once (tini passes SIGTERM on), where a Python
    process as PID 1 would ignore it until the 10 s grace period ran out."""
    name = f"mnistbench-pytest-stop-{os.getpid()}"
    _docker("run", "-d", "--rm", "--name", name, image, "python", "-c",
            "import time; print('up', flush=True); time.sleep(120)")
    try:
        for _ in range(100):  # wait (at most 10 s) until the command runs
            if "up" in _docker("logs", name, check=False).stdout:
                break
            time.sleep(0.1)
        grace = 10  # s docker waits after SIGTERM before it kills
        start = time.perf_counter()
        _docker("stop", "--time", str(grace), name)
        assert time.perf_counter() - start < grace / 2  # ended by SIGTERM, not the kill
    finally:
        _docker("rm", "-f", name, check=False)


@pytest.mark.docker
def test_cell_exit_code_passes_through(image, ro_data, tmp_path):
    """A cell that cannot run exits with its status code through the entrypoint (10: a CUDA
    cell where torch sees no GPU) and still writes its summary, as the workflow expects."""
    results = _owned_dir(tmp_path / "results")
    proc = _run(image, "mnistbench", "train", "--device", "cuda", "--data", "/data", "--out",
                "results/runs/x/adhoc/cuda-cell", "--quiet",
                volumes={results: "/work/results", ro_data: "/data:ro"}, check=False,
                options=("-e", "CUDA_VISIBLE_DEVICES="))
    assert proc.returncode == schema.EXIT_CODES["unavailable"], proc.stderr
    summary = json.loads((results / "runs/x/adhoc/cuda-cell" / schema.SUMMARY_FILE).read_text())
    assert summary["status"] == "unavailable"


@pytest.mark.docker
def test_environment_name(image, image_env, monkeypatch):
    """MNISTBENCH_ENV is "<host>-docker-<image>" as mnistbench.measure.sysinfo names it, with
    "container" for Docker's random host name, and an explicit value wins."""
    show = ("sh", "-c", 'echo "$MNISTBENCH_ENV"')
    monkeypatch.setenv("MNISTBENCH_CONTAINER", image_env["MNISTBENCH_CONTAINER"])
    monkeypatch.delenv("MNISTBENCH_ENV", raising=False)
    for host in ("bench-host", "gpu_box.example.org"):
        monkeypatch.setattr(sysinfo.socket, "gethostname", lambda host=host: host)
        got = _run(image, *show, options=("--hostname", host)).stdout.strip()
        assert got == study.environment_name()
    monkeypatch.setattr(sysinfo.socket, "gethostname", lambda: "container")
    assert _run(image, *show).stdout.strip() == study.environment_name()
    odd = "registry.example.org:5000/team/Mnist Bench:v1.0+cuda"
    monkeypatch.setenv("MNISTBENCH_CONTAINER", odd)
    got = _run(image, *show, options=("-e", f"MNISTBENCH_CONTAINER={odd}")).stdout.strip()
    assert got == study.environment_name()
    assert _run(image, *show, options=("-e", "MNISTBENCH_ENV=mine")).stdout.strip() == "mine"


@pytest.mark.docker
def test_arguments_pass_through_to_snakemake(image, tmp_path):
    """Arguments after the image go to ``snakemake --cores all``: --version prints the pinned
    Snakemake, and a dry run of config/quick.yaml plans this environment's cells."""
    pin = re.search(r"^snakemake==(\S+)$", (REPO / "envs" / "pip" / "dev.txt").read_text(),
                    re.MULTILINE)
    assert pin is not None
    assert _run(image, "--version").stdout.strip() == pin.group(1)
    results = _owned_dir(tmp_path / "results")
    proc = _run(image, "--dry-run", "--configfile", "config/quick.yaml",
                volumes={results: "/work/results"}, options=("-e", "MNISTBENCH_ENV=dry"))
    planned = re.findall(r"results/runs/([^/\s]+)/(convergence|sweep)/[^/\s]+/summary\.json",
                         proc.stdout)
    assert planned and {env for env, _ in planned} == {"dry"}
    assert not any(results.iterdir())  # a dry run writes nothing


def _tiny_study_config() -> dict:
    """One convergence cell on the synthetic data mounted at /data (read-only)."""
    return {
        "data_dir": "/data",
        "default_mirrors": False,
        "devices": ["cpu"],
        "experiments": {
            "convergence": {"loaders": ["resident"], "repeats": 1, "epochs": 1,
                            "train_limit": 512, "test_limit": 256, "warmup_steps": 1},
            "sweep": {"enabled": False},
            # The tips and scale experiments are on by default: without these two lines the
            # "tiny" study timed 44 cells (600 s on a 2-core AVX2 machine: the test timed out).
            "tips": {"enabled": False},
            "scale": {"enabled": False},
            "headline": {"enabled": False},
            "threads": {"enabled": False},
        },
    }


@pytest.mark.docker
def test_study_in_container(image, ro_data, tmp_path, monkeypatch):
    """The default command runs the whole study on a read-only data folder: its cells land in
    results/runs/{env}, the aggregate tables and report follow, and every file belongs to the
    owner of the results folder."""
    results = _owned_dir(tmp_path / "results")
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(_tiny_study_config()))
    config.chmod(0o644)
    before = {p.name: p.read_bytes() for p in ro_data.iterdir()}
    _run(image, "--configfile", "/cfg/tiny.yaml",
         volumes={results: "/work/results", ro_data: "/data:ro", config: "/cfg/tiny.yaml:ro"},
         options=("--hostname", "study-host"))
    monkeypatch.setenv("MNISTBENCH_CONTAINER", _image_name(image))
    monkeypatch.delenv("MNISTBENCH_ENV", raising=False)
    monkeypatch.setattr(sysinfo.socket, "gethostname", lambda: "study-host")
    env = study.environment_name()
    assert env.startswith("study-host-docker-")
    cell = results / "runs" / env / "convergence" / "cpu-fp32-resident-b128-r0"
    summary = json.loads((cell / schema.SUMMARY_FILE).read_text())
    assert summary["status"] == "ok"
    assert summary["env"]["container"] == _image_name(image)
    ran = {p.name for p in (results / "runs" / env).iterdir() if p.is_dir()}
    assert ran == {"convergence", "peak"}, f"the tiny study ran more than its one cell: {ran}"
    assert (results / "summary.csv").is_file()
    assert (results / "report" / "index.html").is_file()
    assert _tree_owners(results) == {(OWNER, OWNER_GID)}
    assert {p.name: p.read_bytes() for p in ro_data.iterdir()} == before


def _image_name(image: str) -> str:
    """The MNISTBENCH_CONTAINER of ``image``."""
    config = json.loads(_docker("image", "inspect", image, "--format", "{{json .Config}}").stdout)
    return dict(item.split("=", 1) for item in config["Env"])["MNISTBENCH_CONTAINER"]


def _csv_header(path: Path) -> list[str]:
    with path.open(newline="") as fh:
        return next(csv.reader(fh))


def _csv_rows(path: Path) -> int:
    with path.open(newline="") as fh:
        return sum(1 for _ in csv.reader(fh)) - 1


@pytest.mark.docker
def test_cell_in_container_matches_local_run(image, ro_data, tmp_path):
    """``mnistbench train`` in the container on the read-only data folder writes the same
    files, columns, status and parameters as the same cell run locally."""
    cell_args = ["--train-limit", "512", "--test-limit", "256", "--epochs", "2",
                 "--warmup-steps", "1", "--env", "cmp", "--experiment", "adhoc", "--quiet"]
    local_out = tmp_path / "local" / "cell"
    subprocess.run([sys.executable, "-m", "mnistbench.cli", "train", "--data", str(ro_data),
                    "--out", str(local_out), *cell_args], check=True, timeout=RUN_TIMEOUT_S)
    results = _owned_dir(tmp_path / "results")
    _run(image, "mnistbench", "train", "--data", "/data", "--out", "results/runs/cmp/adhoc/cell",
         *cell_args, volumes={results: "/work/results", ro_data: "/data:ro"})
    box_out = results / "runs" / "cmp" / "adhoc" / "cell"
    assert sorted(p.name for p in box_out.iterdir()) == sorted(p.name for p in
                                                               local_out.iterdir())
    for name in (schema.EPOCHS_FILE, schema.RESOURCES_FILE):
        assert _csv_header(box_out / name) == _csv_header(local_out / name)
    assert _csv_rows(box_out / schema.EPOCHS_FILE) == _csv_rows(local_out / schema.EPOCHS_FILE)
    box = json.loads((box_out / schema.SUMMARY_FILE).read_text())
    local = json.loads((local_out / schema.SUMMARY_FILE).read_text())
    assert box.keys() == local.keys()
    assert box["status"] == local["status"] == "ok"
    for part in ("env", "results", "timing"):
        assert box[part].keys() == local[part].keys(), part
    assert box["params"] == local["params"]
    assert box["env"]["container"] == _image_name(image) and local["env"]["container"] == ""
    assert _tree_owners(results) == {(OWNER, OWNER_GID)}


@pytest.mark.docker
@pytest.mark.docker_long
def test_code_change_rebuild_reuses_dependency_layers(image, tmp_path):
    """After a change to the package's source, a rebuild takes the torch and dependency layers
    from the cache and rebuilds only the package and the layers after it."""
    if os.environ.get(IMAGE_VAR) and BUILD_ARGS_VAR not in os.environ:
        pytest.skip(f"{IMAGE_VAR} is set without {BUILD_ARGS_VAR}: the build arguments of "
                    "that image, which the cache depends on, are unknown")
    context = tmp_path / "context"
    context.mkdir()
    for name in ("Snakefile", "pyproject.toml", "README.md", "LICENSE", "envs", "src",
                 "workflow", "config", "docker"):
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, context / name,
                            ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        elif source.exists():
            shutil.copy2(source, context / name)
    shutil.copy2(REPO / ".dockerignore", context / ".dockerignore")
    init = context / "src" / "mnistbench" / "__init__.py"
    # A change no earlier build has seen (else the package stage would come from the cache).
    init.write_text(init.read_text() + f"# a code change {time.time_ns()}\n")
    tag = "mnistbench:pytest-rebuild"
    proc = _docker("build", "-f", str(context / "docker" / "cpu.Dockerfile"), "-t", tag,
                   *_build_args(), str(context), timeout=BUILD_TIMEOUT_S,
                   env=_legacy_builder_env())
    try:
        steps = re.split(r"^Step \d+/\d+ : ", proc.stdout, flags=re.MULTILINE)[1:]
        cached = {step.split("\n", 1)[0]: "---> Using cache" in step for step in steps}
        deps = [s for s in cached if s.startswith("RUN ") and "requirements" in s]
        assert len(deps) == 2 and all(cached[s] for s in deps), cached
        package = [s for s in cached if s.startswith("RUN ") and "wheel-dir" in s]
        assert package and not cached[package[0]]
    finally:
        _docker("rmi", tag, check=False)


# --------------------------------------------------------------------------------------------
# The workflow's docker runner (runner: docker) against the same study run locally.
def _runner_study(data_dir: Path, workdir: Path, runner: str) -> dict:
    """One cpu and one cuda sweep cell of a few steps; with runner docker, both devices' images
    are docker/cpu.Dockerfile (built by the workflow with the CI build arguments, so from the
    cache) under their own tags."""
    options = _build_args()
    for i in range(len(options) - 1, 0, -1):  # the workflow names each image after its tag
        if options[i - 1] == "--build-arg" and options[i].startswith("IMAGE_NAME="):
            del options[i - 1:i + 1]
    return {
        "env": "",
        "data_dir": str(data_dir),
        "default_mirrors": False,
        "devices": ["cpu", "cuda"],
        "runner": runner,
        "lock_file": str(workdir / "timed-cell.lock"),
        "experiments": {
            "convergence": {"enabled": False},
            "sweep": {"batch_sizes": [32], "precisions": ["fp32"], "loaders": ["resident"],
                      "repeats": 1, "max_steps": 2, "train_limit": 256, "test_limit": 128,
                      "warmup_steps": 1},
        },
        "docker": {
            "images": {device: {"dockerfile": "docker/cpu.Dockerfile",
                                "tag": f"mnistbench:pytest-runner-{device}"}
                       for device in ("cpu", "cuda")},
            "build_options": options,
        },
    }


def _snakemake_study(workdir: Path, config: dict) -> subprocess.CompletedProcess:
    """``snakemake --cores 2 results/summary.csv`` of the project in ``workdir``, with the
    default environment name and the classic builder (whose cache the image fixture filled)."""
    workdir.mkdir(parents=True, exist_ok=True)
    configfile = workdir / "config.yaml"
    configfile.write_text(yaml.safe_dump(config))
    env = dict(os.environ, DOCKER_BUILDKIT="0")
    env.pop("MNISTBENCH_ENV", None)
    snakemake = Path(sys.executable).parent / "snakemake"
    return subprocess.run([str(snakemake), "--snakefile", str(REPO / "Snakefile"), "--directory",
                           str(workdir), "--configfile", str(configfile), "--cores", "2",
                           "results/summary.csv"], capture_output=True, text=True,
                          timeout=BUILD_TIMEOUT_S, check=False, env=env)


def _summary_rows(results: Path) -> tuple[list[str], dict[str, dict]]:
    """summary.csv's header and its rows by cell."""
    with (results / "summary.csv").open(newline="") as fh:
        reader = csv.DictReader(fh)
        return list(reader.fieldnames or []), {row["cell"]: row for row in reader}


@pytest.mark.docker
@pytest.mark.docker_long
def test_workflow_docker_runner_matches_local_runner(image, ro_data, tmp_path):
    """runner: docker builds each device's image, records its ID and runs each cell in it: the
    same summary.csv columns and statuses per cell as runner: local (cuda unavailable where
    Docker cannot give a container a GPU, with Docker's reason), files owned by the invoking
    user, and each cell records the ID of its image."""
    if os.environ.get(IMAGE_VAR) and BUILD_ARGS_VAR not in os.environ:
        pytest.skip(f"{IMAGE_VAR} is set without {BUILD_ARGS_VAR}: the workflow's builds would "
                    "not come from the cache of that image")
    tags = {device: f"mnistbench:pytest-runner-{device}" for device in ("cpu", "cuda")}
    host = study.host_name()
    try:
        boxed = _snakemake_study(tmp_path / "docker", _runner_study(ro_data, tmp_path,
                                                                    "docker"))
        assert boxed.returncode == 0, boxed.stdout[-5000:] + boxed.stderr[-5000:]
        local = _snakemake_study(tmp_path / "local", _runner_study(ro_data, tmp_path, "local"))
        assert local.returncode == 0, local.stdout[-5000:] + local.stderr[-5000:]
        results = tmp_path / "docker" / "results"
        header, rows = _summary_rows(results)
        local_header, local_rows = _summary_rows(tmp_path / "local" / "results")
        assert header == local_header
        assert {cell: row["status"] for cell, row in rows.items()} == {
            cell: row["status"] for cell, row in local_rows.items()}
        assert {row["env"] for row in rows.values()} == {f"{host}-docker"}
        assert {row["env"] for row in local_rows.values()} == {f"{host}-local"}
        assert rows["cpu-fp32-resident-b32-r0"]["status"] == "ok"
        runtimes = _docker("info", "--format", "{{json .Runtimes}}").stdout
        cuda = rows["cuda-fp32-resident-b32-r0"]
        if "nvidia" not in runtimes:  # --gpus fails: the cell ran again without a GPU
            assert cuda["status"] == "unavailable"
            assert "docker could not give the container a GPU" in cuda["reason"], cuda["reason"]
        for device, tag in tags.items():
            record = json.loads((results / "images" / f"{device}.json").read_text())
            assert record["tag"] == tag
            assert record["image_id"] == _docker("image", "inspect", "--format", "{{.Id}}",
                                                 tag).stdout.strip()
            summary = json.loads((results / "runs" / f"{host}-docker" / "sweep" /
                                  f"{device}-fp32-resident-b32-r0" / schema.SUMMARY_FILE)
                                 .read_text())
            assert summary["env"]["container_image_id"] == record["image_id"]
            assert summary["env"]["container"] == tag
        assert {row["container_image_id"] for row in local_rows.values()} == {""}
        assert (results / "logs" / "images" / "cpu.log").is_file()
        assert _tree_owners(results) == {(os.geteuid(), os.getegid())}
    finally:
        for tag in tags.values():
            _docker("rmi", tag, check=False)
