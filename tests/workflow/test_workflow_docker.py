"""Tests of the workflow's docker runner (runner: docker; workflow/rules/docker.smk, images.smk
and the runners of mnistbench.launch.plan) without a Docker engine: a dry run plans the image
builds and runs every cell through ``mnistbench docker run`` in its device's image, and a real
run stops before any job, with the fix, when ``docker`` is missing. Unit-tested without
Snakemake in tests/launch/test_plan.py: the launcher, a daemon that does not answer, a missing
Dockerfile or a bad tag, devices without an image; that runner local builds no image, in
tests/workflow/test_workflow.py's dry run. The runner against a real engine:
tests/workflow/test_docker.py."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

from mnistbench.core import study
from tests.workflow.test_workflow import jobs_of_rule, planned_cells, snakemake, tiny_config


def docker_config(data_dir: Path, workdir: Path, **overrides) -> dict:
    """The tiny study (one cpu and one cuda sweep cell) with runner: docker."""
    config = tiny_config(data_dir, workdir, **{"devices": ["cpu", "cuda"], "runner": "docker",
                                               **overrides})
    config["experiments"]["convergence"]["enabled"] = False
    return config


def path_without_docker(tmp_path: Path) -> str:
    """A PATH holding every command of this PATH but ``docker``, then the venv's."""
    bin_dir = tmp_path / "nodocker-bin"
    bin_dir.mkdir()
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        if not folder or not os.path.isdir(folder):
            continue
        for name in os.listdir(folder):
            target = bin_dir / name
            if name != "docker" and not target.exists() and not target.is_symlink():
                target.symlink_to(Path(folder, name))
    return f"{Path(sys.executable).parent}{os.pathsep}{bin_dir}"


@pytest.mark.slow
def test_dry_run_plans_image_builds_and_cells_in_them(tmp_path, tiny_mnist):
    """A dry run needs no engine: it plans one image per device and runs each cell through
    `mnistbench docker run` with its device's image record, in `<host>-docker`."""
    config = docker_config(tiny_mnist, tmp_path, env="")
    config["docker"] = {"shm_size": "1g", "run_options": ["--cpuset-cpus", "0"],
                        "build_args": {"BASE_IMAGE": "deb:12"},
                        "build_options": ["--network", "host"]}
    env = dict(os.environ, PATH=path_without_docker(tmp_path))
    env.pop("MNISTBENCH_ENV", None)
    proc = snakemake(tmp_path, config, "--dry-run", "--printshellcmds", "--cores", "2",
                     env=env)
    assert proc.returncode == 0, proc.stdout
    host = study.host_name()
    assert planned_cells(proc.stdout) == {(f"{host}-docker", "sweep", f"{d}-fp32-resident-b32-r0")
                                          for d in ("cpu", "cuda")}
    assert jobs_of_rule(proc.stdout, "docker_image") == 2
    for device in ("cpu", "cuda"):
        assert re.search(
            rf"--launcher 'mnistbench docker run --record results/images/{device}\.json "
            rf"--results results --shm-size 1g --docker-option=--cpuset-cpus "
            rf"--docker-option=0 --' .* -- --threads \d+ --allocator \S+ --workers \d+ "
            rf"--\S*pin-memory --device {device} ", proc.stdout), device
        assert re.search(
            rf"mnistbench docker build --dockerfile \S+/docker/{device}\.Dockerfile --tag "
            rf"mnistbench:{device} .*--build-arg=BASE_IMAGE=deb:12 --docker-option=--network "
            rf"--docker-option=host .*--record results/images/{device}\.json", proc.stdout,
            re.DOTALL), device
    assert not (tmp_path / "results").exists()


@pytest.mark.slow
def test_missing_docker_stops_the_run_before_any_job(tmp_path, tiny_mnist):
    """runner: docker without a docker command fails at once with the fix, and writes nothing
    under results/."""
    config = docker_config(tiny_mnist, tmp_path)
    env = dict(os.environ, PATH=path_without_docker(tmp_path))
    proc = snakemake(tmp_path, config, "--cores", "1", env=env)
    assert proc.returncode != 0
    message = next(line for line in proc.stdout.splitlines() if "config key runner" in line)
    assert "the `docker` command is not on PATH" in message
    assert "apt-get install docker.io" in message and "runner: local" in message
    assert "Finished jobid" not in proc.stdout
    assert not (tmp_path / "results").exists()
