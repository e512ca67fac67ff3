"""Tests of mnistbench.launch.container (the workflow's docker runner) without a Docker
engine: a fake ``docker`` executable, first on PATH, logs every call and answers as the
engine would. Command lines of a cell (GPU only for CUDA, read-only data, results mount,
shared memory, no network,
image by ID), the engine check's errors, the image record (and none after a failed build), the
rerun without ``--gpus`` when Docker cannot give a container a GPU, exit codes passed back and
SIGTERM passed on to the container."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mnistbench import cli
from mnistbench.core import options, provenance, schema
from mnistbench.core.envvars import GPU_NOTE_VAR, IMAGE_ID_VAR
from mnistbench.launch import container

IMAGE_ID = "sha256:" + "ab" * 32
NO_GPU_ERROR = ('docker: Error response from daemon: could not select device driver "" with '
                "capabilities: [[gpu]].")

FAKE_DOCKER = '''\
#!{python}
"""A stand-in for the docker CLI: logs its arguments, answers per $FAKE_DOCKER_* variables."""
import json, os, signal, sys, time

args = sys.argv[1:]
env = os.environ
with open(env["FAKE_DOCKER_LOG"], "a") as log:
    log.write(json.dumps(args) + "\\n")
command = args[0] if args else ""
if command == "version":
    if env.get("FAKE_DOCKER_DAEMON") == "down":
        print("Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the "
              "docker daemon running?", file=sys.stderr)
        sys.exit(1)
    print("27.3.1")
elif command == "build":
    print("Step 1/2 : FROM base")
    if env.get("FAKE_DOCKER_BUILD") == "fail":
        print("The command '/bin/sh -c false' returned a non-zero code: 1", file=sys.stderr)
        sys.exit(1)
    with open(args[args.index("--iidfile") + 1], "w") as handle:
        handle.write("{image_id}")
elif command == "image":
    if env.get("FAKE_DOCKER_IMAGE") == "missing":
        print("Error: No such image", file=sys.stderr)
        sys.exit(1)
    print(json.dumps({{"Id": "{image_id}", "Created": "2026-12-02T10:00:00Z", "Size": 1234}}))
elif command == "run":
    if "--gpus" in args and env.get("FAKE_DOCKER_GPU") == "none":
        print({no_gpu!r}, file=sys.stderr)
        print(env.get("FAKE_DOCKER_HINT", "See 'docker run --help'."), file=sys.stderr)
        sys.exit(125)
    if env.get("FAKE_DOCKER_RUN") == "sleep":
        def stop(signum, frame):
            with open(env["FAKE_DOCKER_LOG"], "a") as log:
                log.write(json.dumps(["signal", signum]) + "\\n")
            sys.exit(128 + signum)
        signal.signal(signal.SIGTERM, stop)
        print("started", flush=True)
        time.sleep(60)
    print("container says hi", file=sys.stderr)
    device = args[args.index("--device") + 1] if "--device" in args else "cpu"
    default = 10 if device == "cuda" and "--gpus" not in args else 0
    sys.exit(int(env.get("FAKE_DOCKER_EXIT", default)))
'''


@pytest.fixture
def fake_docker(tmp_path, monkeypatch) -> Path:
    """A fake ``docker`` first on PATH; returns the file its calls are logged to."""
    bin_dir = tmp_path / "fakebin"
    bin_dir.mkdir()
    exe = bin_dir / "docker"
    exe.write_text(FAKE_DOCKER.format(python=sys.executable, image_id=IMAGE_ID,
                                      no_gpu=NO_GPU_ERROR))
    exe.chmod(0o755)
    log = tmp_path / "docker-calls.jsonl"
    log.touch()
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_DOCKER_LOG", str(log))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return log


def calls(log: Path) -> list[list[str]]:
    """Every argument list the fake docker was called with, in order."""
    return [json.loads(line) for line in log.read_text().splitlines()]


@pytest.fixture
def cell(tmp_path, monkeypatch) -> dict:
    """A working directory with results/ and a data folder; the train args of one cell."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "results").mkdir()
    (tmp_path / "data").mkdir()
    record = {"image_id": IMAGE_ID, "tag": "mnistbench:cpu"}
    (tmp_path / "results" / "cpu.json").write_text(json.dumps(record))
    args = ["train", "--device", "cpu", "--data", "data", "--out",
            "results/runs/box/sweep/cpu-cell", "--env", "box", "--quiet"]
    return {"record": record, "record_path": tmp_path / "results" / "cpu.json", "args": args,
            "root": tmp_path}


def _value(command: list[str], option: str) -> str:
    return command[command.index(option) + 1]


def _mounts(command: list[str]) -> list[str]:
    return [command[i + 1] for i, arg in enumerate(command) if arg == "--mount"]


# --------------------------------------------------------------------------- command lines
def test_cpu_cell_command(cell):
    """A CPU cell runs the recorded image by ID without GPUs or network, with shared memory,
    the results folder mounted read-write, the data read-only, and rewritten paths."""
    root = cell["root"].resolve()
    command = container.run_command(cell["record"], cell["args"], "results", "512m",
                                    ["--cpuset-cpus", "0-1"])
    assert command[:3] == ["docker", "run", "--rm"]
    assert "--gpus" not in command
    assert _value(command, "--network") == "none"
    assert _value(command, "--shm-size") == "512m"
    assert _mounts(command) == [
        f"type=bind,source={root / 'results'},target=/work/results",
        f"type=bind,source={root / 'data'},target=/data,readonly",
    ]
    assert _value(command, "-e") == f"{IMAGE_ID_VAR}={IMAGE_ID}"
    image_at = command.index(IMAGE_ID)
    assert command[image_at - 2:image_at] == ["--cpuset-cpus", "0-1"]
    assert command[image_at + 1:] == [
        "mnistbench", "train", "--device", "cpu", "--data", "data", "--out",
        "results/runs/box/sweep/cpu-cell", "--env", "box", "--quiet",
        "--data", "/data", "--out", "/work/results/runs/box/sweep/cpu-cell"]
    parsed = options.train_parser().parse_args(command[image_at + 3:])  # as the trainer reads
    assert (str(parsed.data), str(parsed.out)) == ("/data", "/work/results/runs/box/sweep/cpu-cell")
    assert "mnistbench:cpu" not in command  # by ID: a retag cannot change what runs
    assert _value(command, "--name").startswith("mnistbench-cpu-cell-")


def test_cuda_cell_asks_for_the_gpus_torch_would_see(cell, monkeypatch):
    """A CUDA cell gets --gpus all, or the devices of $CUDA_VISIBLE_DEVICES, or none when that
    hides every GPU; without GPUs a note for the trainer can be passed."""
    args = ["train", "--device=cuda", "--data=data", "--out=results/x"]
    command = container.run_command(cell["record"], args)
    assert _value(command, "--gpus") == "all"
    assert command[-4:] == ["--data", "/data", "--out", "/work/results/x"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,2")
    assert _value(container.run_command(cell["record"], args), "--gpus") == '"device=1,2"'
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert "--gpus" not in container.run_command(cell["record"], args)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    command = container.run_command(cell["record"], args, gpus=False, gpu_note="no runtime")
    assert "--gpus" not in command and f"{GPU_NOTE_VAR}=no runtime" in command


def test_peak_command_mounts_no_data_and_writes_under_results(cell):
    """A peak measurement (the workflow's peak job under the docker runner) runs in the same
    image with only the results folder mounted, its --out file rewritten to the container's
    path, and the GPUs of its device."""
    root = cell["root"].resolve()
    args = ["peak", "--device", "cpu", "--precision", "fp32", "--threads", "2", "--out",
            "results/runs/box/peak/cpu.json"]
    command = container.run_command(cell["record"], args)
    assert _mounts(command) == [f"type=bind,source={root / 'results'},target=/work/results"]
    assert "--gpus" not in command
    assert command[command.index(IMAGE_ID) + 1:] == [
        "mnistbench", *args, "--out", "/work/results/runs/box/peak/cpu.json"]
    cuda = ["peak", "--device", "cuda", "--out", "results/runs/box/peak/cuda.json"]
    assert _value(container.run_command(cell["record"], cuda), "--gpus") == "all"


def test_container_name_is_unique_per_output_folder(tmp_path):
    """Two cells of the same id in different results folders get different container names."""
    first = container.container_name(tmp_path / "a" / "cpu-cell")
    second = container.container_name(tmp_path / "b" / "cpu-cell")
    assert first != second and first.startswith("mnistbench-cpu-cell-")


@pytest.mark.parametrize(("args", "message"), [
    (["fetch", "--dest", "x"], "must be `train ...` or `peak ...`"),
    (["peak", "--device", "cpu"], "needs --device and --out"),
    (["peak", "--device", "cpu", "--out", "elsewhere/cpu.json"], "not inside the results"),
    (["train", "--data", "data"], "is not valid"),  # no --out
    (["train", "--data", "data", "--out", "results/x", "--device", "tpu"], "is not valid"),
    (["train", "--data", "data", "--out", "elsewhere/x"], "not inside the results folder"),
    (["train", "--data", "nodata", "--out", "results/x"], "data folder nodata does not exist"),
])
def test_command_errors_name_the_fix(cell, args, message):
    """A command the container cannot run as given is refused with the reason."""
    with pytest.raises(container.ContainerError, match=message):
        container.run_command(cell["record"], args)


def test_host_side_does_not_import_torch():
    """The container module and the CLI's parser start without importing torch."""
    code = ("import sys; from mnistbench import cli; from mnistbench.launch import container; "
            "cli.build_parser(); "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60).stdout
    assert out.strip() == "False"


# --------------------------------------------------------------------------- engine check
def test_engine_check_without_docker_on_path(tmp_path, monkeypatch):
    """No docker command: the error says so and how to install an engine."""
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(container.ContainerError, match="not on PATH") as info:
        container.check_engine()
    assert "apt-get install docker.io" in str(info.value)


def test_engine_check_with_a_stopped_daemon(fake_docker, monkeypatch):
    """A daemon that does not answer: Docker's message and how to start the engine."""
    monkeypatch.setenv("FAKE_DOCKER_DAEMON", "down")
    with pytest.raises(container.ContainerError) as info:
        container.check_engine()
    message = str(info.value)
    assert "Cannot connect to the Docker daemon" in message
    assert "systemctl start docker" in message and "scripts/docker-engine start" in message


def test_engine_check_returns_the_server_version(fake_docker):
    """An engine that answers gives its server version."""
    assert container.check_engine() == "27.3.1"
    assert calls(fake_docker) == [["version", "--format", "{{.Server.Version}}"]]


# --------------------------------------------------------------------------- build
def test_build_writes_the_image_record(fake_docker, tmp_path, monkeypatch):
    """A build passes the Dockerfile, tag, build arguments (bookkeeping ones added) and options
    to docker build and records the inspected image ID and what it was built from."""
    monkeypatch.setattr(provenance, "git_revision", lambda: "f00d-dirty")
    dockerfile = tmp_path / "cpu.Dockerfile"
    dockerfile.write_text("FROM scratch\n")
    record_path = tmp_path / "images" / "cpu.json"
    record = container.build_image(dockerfile, "mnistbench:cpu", {"BASE_IMAGE": "deb:12"},
                                   ["--network", "host"], tmp_path, record_path)
    assert json.loads(record_path.read_text()) == record
    assert tuple(record) == container.RECORD_KEYS
    assert record["image_id"] == IMAGE_ID and record["tag"] == "mnistbench:cpu"
    assert record["dockerfile_sha256"] == hashlib.sha256(b"FROM scratch\n").hexdigest()
    assert record["docker_server_version"] == "27.3.1"
    args = record["build_args"]
    assert args["BASE_IMAGE"] == "deb:12" and args["IMAGE_NAME"] == "mnistbench:cpu"
    assert args["REVISION"] == "f00d-dirty" and args["CREATED"].endswith("Z")
    build = next(c for c in calls(fake_docker) if c[0] == "build")
    assert build[1:5] == ["-f", str(dockerfile), "-t", "mnistbench:cpu"]
    assert build[-3:] == ["--network", "host", str(tmp_path)]
    assert "BASE_IMAGE=deb:12" in build


def test_build_arguments_given_are_not_overridden(fake_docker, tmp_path):
    """IMAGE_NAME, REVISION or CREATED given as build arguments or options are kept."""
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text("FROM scratch\n")
    record = container.build_image(dockerfile, "x:y", {"REVISION": "abc"},
                                   ["--build-arg", "IMAGE_NAME=ci"], tmp_path,
                                   tmp_path / "r.json")
    assert record["build_args"]["REVISION"] == "abc"
    assert "IMAGE_NAME" not in record["build_args"]


def test_failed_build_leaves_no_record(fake_docker, tmp_path, monkeypatch):
    """A failed build raises, removes an earlier record and leaves no partial file."""
    monkeypatch.setenv("FAKE_DOCKER_BUILD", "fail")
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text("FROM scratch\n")
    images = tmp_path / "images"
    images.mkdir()
    (images / "cpu.json").write_text(json.dumps({"image_id": IMAGE_ID}))
    with pytest.raises(container.ContainerError, match="exited 1"):
        container.build_image(dockerfile, "x:y", {}, [], tmp_path, images / "cpu.json")
    assert list(images.iterdir()) == []


def test_build_cli_writes_the_record_and_prints_the_id(fake_docker, tmp_path, capsys):
    """`mnistbench docker build` parses KEY=VALUE and raw options, and prints the image ID."""
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text("FROM scratch\n")
    code = cli.main(["docker", "build", "--dockerfile", str(dockerfile), "--tag", "x:y",
                     "--context", str(tmp_path), "--build-arg", "A=1=2",
                     "--docker-option=--network", "--docker-option=host",
                     "--record", str(tmp_path / "r.json")])
    assert code == 0 and capsys.readouterr().out.strip() == IMAGE_ID
    assert json.loads((tmp_path / "r.json").read_text())["build_args"]["A"] == "1=2"
    assert calls(fake_docker)[-2][-3:] == ["--network", "host", str(tmp_path)]


def test_load_record_errors(tmp_path):
    """A missing or foreign record is refused with how to make one."""
    with pytest.raises(container.ContainerError, match="build the image first"):
        container.load_record(tmp_path / "none.json")
    (tmp_path / "bad.json").write_text('{"tag": "x"}')
    with pytest.raises(container.ContainerError, match="not an image record"):
        container.load_record(tmp_path / "bad.json")


def test_a_record_nested_deep_or_that_is_a_folder_is_one_paragraph(tmp_path, capsys):
    """Weak case of the sweep of issue 41 (deep nesting): `docker run --record R` with R
    nested 5000 deep ended in a RecursionError traceback; a folder said "[Errno 21] Is a
    directory", non-UTF-8 bytes a codec error. Each is now one paragraph naming the record
    and the fix (read through the bounded reader of core.untrusted)."""
    deep, folder, binary = tmp_path / "deep.json", tmp_path / "records", tmp_path / "b.json"
    deep.write_text("[" * 5000 + "]" * 5000)
    folder.mkdir()
    binary.write_bytes(b"\xff\xfe")
    for path, words in ((deep, "nested deeper than 64 levels"),
                        (folder, "not a regular file but a folder"),
                        (binary, "not UTF-8 text (byte 0)")):
        with pytest.raises(container.ContainerError) as info:
            container.load_record(path)
        assert str(info.value).startswith(f"cannot read image record {path}: {words}")
        assert "Delete it and build the image again" in str(info.value)
    assert cli.main(["docker", "run", "--record", str(deep), "--", "train", "--out", "x"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "nested deeper than 64 levels" in err[0], err


# --------------------------------------------------------------------------- run
@pytest.mark.parametrize("code", [0, 10, 11, 12, 1, 137])
def test_exit_code_of_the_cell_comes_back(fake_docker, cell, monkeypatch, code):
    """The trainer's exit code is returned unchanged, whatever it is."""
    monkeypatch.setenv("FAKE_DOCKER_EXIT", str(code))
    assert container.run_cell(cell["record_path"], cell["args"]) == code


def test_cli_run_passes_the_exit_code_and_docker_output(fake_docker, cell):
    """`mnistbench docker run ... -- train ...` exits with the cell's code and copies the
    container's stderr through."""
    command = [sys.executable, "-m", "mnistbench.cli", "docker", "run", "--record",
               str(cell["record_path"]), "--shm-size", "1g", "--docker-option=--cpus",
               "--docker-option=1", "--", *cell["args"]]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False,
                          env=dict(os.environ, FAKE_DOCKER_EXIT="11"))
    assert proc.returncode == schema.EXIT_CODES["oom"], proc.stderr
    assert "container says hi" in proc.stderr
    run = next(c for c in calls(fake_docker) if c[0] == "run")
    assert _value(run, "--shm-size") == "1g" and run[run.index(IMAGE_ID) - 2:][:2] == [
        "--cpus", "1"]


def test_cli_run_rejects_a_bad_shm_size(cell, capsys):
    """--shm-size must be a size docker understands."""
    code = cli.main(["docker", "run", "--record", str(cell["record_path"]), "--shm-size",
                     "lots", "--", *cell["args"]])
    assert code == 1 and "--shm-size 'lots'" in capsys.readouterr().err


@pytest.mark.parametrize("hint", ["See 'docker run --help'.",
                                  "Run 'docker run --help' for more information"])
def test_cuda_cell_without_a_gpu_runtime_runs_again_without_gpus(fake_docker, cell,
                                                                 monkeypatch, capsys, hint):
    """Docker's exit 125 for --gpus: the cell runs again without it, with Docker's reason for
    the trainer (not its pointer to --help, in either engine version's wording), and returns
    the trainer's unavailable code."""
    monkeypatch.setenv("FAKE_DOCKER_GPU", "none")
    monkeypatch.setenv("FAKE_DOCKER_HINT", hint)
    args = [*cell["args"][:2], "cuda", *cell["args"][3:]]
    assert container.run_cell(cell["record_path"], args) == schema.EXIT_CODES["unavailable"]
    runs = [c for c in calls(fake_docker) if c[0] == "run"]
    assert len(runs) == 2 and "--gpus" in runs[0] and "--gpus" not in runs[1]
    note = next(a for a in runs[1] if a.startswith(GPU_NOTE_VAR + "="))
    assert "docker could not give the container a GPU" in note
    assert "could not select device driver" in note and "--help" not in note
    assert "running the cell again without --gpus" in capsys.readouterr().err


def test_failed_start_of_a_cpu_cell_is_not_retried(fake_docker, cell, monkeypatch):
    """Exit 125 of a CPU cell (no --gpus involved) is returned as it is."""
    monkeypatch.setenv("FAKE_DOCKER_EXIT", "125")
    assert container.run_cell(cell["record_path"], cell["args"]) == 125
    assert len([c for c in calls(fake_docker) if c[0] == "run"]) == 1


def test_removed_image_is_a_clear_error(fake_docker, cell, monkeypatch):
    """An image no longer in Docker's store: delete the record so the workflow rebuilds it."""
    monkeypatch.setenv("FAKE_DOCKER_IMAGE", "missing")
    with pytest.raises(container.ContainerError, match=r"delete \S+cpu\.json and rerun"):
        container.run_cell(cell["record_path"], cell["args"])
    assert not [c for c in calls(fake_docker) if c[0] == "run"]


def test_sigterm_reaches_the_container_and_it_is_removed(fake_docker, cell):
    """SIGTERM to `mnistbench docker run` is passed to docker run (whose sig-proxy passes it to
    the container), the command exits 143 and removes the container by name."""
    command = [sys.executable, "-m", "mnistbench.cli", "docker", "run", "--record",
               str(cell["record_path"]), "--", *cell["args"]]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env=dict(os.environ, FAKE_DOCKER_RUN="sleep")) as proc:
        deadline = time.monotonic() + 30
        assert proc.stdout is not None
        while time.monotonic() < deadline and "started" not in proc.stdout.readline():
            pass
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 128 + signal.SIGTERM, err
    log = calls(fake_docker)
    assert ["signal", signal.SIGTERM] in log
    name = _value(next(c for c in log if c[0] == "run"), "--name")
    assert log[-1] == ["rm", "--force", name]
