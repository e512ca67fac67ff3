"""Tests of mnistbench.measure.sysinfo: the environment capture, git revision, env names."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mnistbench import __version__
from mnistbench.core import provenance, schema
from mnistbench.measure import sysinfo

REPO = Path(__file__).resolve().parents[2]
ENV_VARS = ("MNISTBENCH_ENV", "MNISTBENCH_CONTAINER", "MNISTBENCH_GIT_REVISION", "SLURM_JOB_ID",
            "SLURM_JOB_PARTITION", "SLURMD_NODENAME", "APPTAINER_CONTAINER",
            "SINGULARITY_CONTAINER")


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    """Run every test without the variables sysinfo reads, whatever the caller's shell set."""
    for name in ENV_VARS:
        monkeypatch.delenv(name, raising=False)


def test_capture_has_exactly_the_schema_keys_and_serialises():
    """capture() returns every ENV_FIELDS key, in order, with JSON-serialisable plain values."""
    info = sysinfo.capture()
    assert list(info) == list(schema.ENV_FIELDS)
    assert json.loads(json.dumps(info)) == info
    for key, value in info.items():
        if key in sysinfo.NUMERIC_FIELDS:
            assert value is None or (isinstance(value, int | float)
                                     and not isinstance(value, bool)), key
        else:
            assert isinstance(value, str), key


def test_capture_values_describe_this_machine():
    """Versions, cores and memory match what Python, torch and psutil report here."""
    import platform

    import psutil
    import torch

    info = sysinfo.capture()
    assert info["python"] == platform.python_version()
    assert info["torch"] == torch.__version__
    assert info["cuda"] == (torch.version.cuda or "")
    assert info["torch_threads"] == torch.get_num_threads()
    assert info["cpu_cores_logical"] == psutil.cpu_count()
    assert info["memory_gb"] == pytest.approx(psutil.virtual_memory().total / 2**30, abs=0.01)
    assert info["mnistbench"] == __version__
    assert info["cpu_model"]
    assert platform.release() in info["os"]
    if not torch.cuda.is_available():
        assert (info["cudnn"], info["gpu_name"], info["gpu_count"], info["gpu_memory_gb"]) == (
            "", "", 0, None)
    else:
        assert info["gpu_count"] >= 1 and info["gpu_name"] and info["gpu_memory_gb"] > 0
        assert info["cudnn"] and info["gpu_driver"]


def test_capture_runs_git_once_and_then_nothing(monkeypatch):
    """What keeps a capture cheap (its seconds: benchmarks/bench_setup.py): with its caches
    cleared it starts only git, for the revision; captured again it starts no process."""
    sysinfo.capture()
    started: list[list[str]] = []
    popen_init = subprocess.Popen.__init__

    def recording_init(self, args, *rest, **kwargs):
        started.append(list(args) if not isinstance(args, str) else [args])
        popen_init(self, args, *rest, **kwargs)

    monkeypatch.setattr(subprocess.Popen, "__init__", recording_init)
    provenance.git_revision_from_checkout.cache_clear()
    sysinfo.capture()
    assert {cmd[0] for cmd in started} <= {"git"}, started
    started.clear()
    sysinfo.capture()
    assert started == []


@pytest.mark.skipif(shutil.which("git") is None or not (REPO / ".git").exists(),
                    reason="needs git and a git checkout of the project")
def test_git_revision_matches_head():
    """The recorded revision is this checkout's HEAD, optionally marked -dirty."""
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True,
                          text=True, check=True).stdout.strip()
    provenance.git_revision_from_checkout.cache_clear()
    revision = sysinfo.capture()["git_revision"]
    assert re.fullmatch(r"[0-9a-f]{40}(-dirty)?", revision)
    assert revision.removesuffix("-dirty") == head


def test_git_revision_falls_back_to_env_var_then_empty(monkeypatch):
    """Outside a git checkout the revision is $MNISTBENCH_GIT_REVISION, else empty."""
    monkeypatch.setattr(provenance, "git_revision_from_checkout", lambda: None)
    assert sysinfo.capture()["git_revision"] == ""
    monkeypatch.setenv("MNISTBENCH_GIT_REVISION", "0123abc")
    assert sysinfo.capture()["git_revision"] == "0123abc"


def test_run_git_outside_a_repository_gives_none(tmp_path):
    """git run in a folder that is no checkout yields None instead of raising."""
    assert provenance._run_git(["rev-parse", "HEAD"], tmp_path) is None
    assert provenance._run_git(["rev-parse", "HEAD"], tmp_path / "missing") is None


def test_container_and_slurm_come_from_env_vars(monkeypatch):
    """MNISTBENCH_CONTAINER and the SLURM variables are recorded as given."""
    monkeypatch.setenv("MNISTBENCH_CONTAINER", "ghcr.io/me/mnistbench:cuda")
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    monkeypatch.setenv("SLURM_JOB_PARTITION", "gpu")
    monkeypatch.setenv("SLURMD_NODENAME", "node07")
    info = sysinfo.capture()
    assert info["container"] == "ghcr.io/me/mnistbench:cuda"
    assert (info["slurm_job_id"], info["slurm_partition"], info["slurm_node"]) == (
        "4242", "gpu", "node07")


def test_container_image_id_comes_from_the_docker_runner(monkeypatch):
    """$MNISTBENCH_CONTAINER_IMAGE_ID (set by the docker runner) is recorded; empty without."""
    monkeypatch.delenv(sysinfo.IMAGE_ID_VAR, raising=False)
    assert sysinfo.capture()["container_image_id"] == ""
    monkeypatch.setenv(sysinfo.IMAGE_ID_VAR, "sha256:" + "0f" * 32)
    assert sysinfo.capture()["container_image_id"] == "sha256:" + "0f" * 32


def test_capture_never_raises_without_torch(monkeypatch):
    """With torch unimportable the torch fields are empty and the rest is still captured."""
    monkeypatch.setitem(sys.modules, "torch", None)  # makes `import torch` raise ImportError
    info = sysinfo.capture()
    assert list(info) == list(schema.ENV_FIELDS)
    assert (info["torch"], info["cuda"], info["cudnn"], info["gpu_name"]) == ("", "", "", "")
    assert info["torch_threads"] is None and info["gpu_count"] is None
    assert info["python"] and info["hostname"] is not None
