"""The workflow's docker runner: check the engine, build an image and record its ID, and run
one ``mnistbench train`` cell inside it. Imports no torch (the host side starts in well under a
second); it drives the ``docker`` command line and never reads the study's config.

- :func:`check_engine`: ``docker`` on PATH and a daemon that answers, or one paragraph that
  says how to get them.
- :func:`build_image`: ``docker build``, then a JSON record of the image (its ID, tag,
  Dockerfile digest, build arguments, engine version, build time), written atomically and only
  after a successful build.
- :func:`run_command` / :func:`run_cell`: ``docker run --rm`` of one cell in the recorded image
  (by ID, so a retagged image cannot change what runs): ``--gpus`` for CUDA cells, the data
  folder mounted read-only at :data:`DATA_MOUNT`, the host's results folder at
  :data:`RESULTS_MOUNT` (the image's entrypoint runs the cell as that folder's owner),
  ``--shm-size`` for DataLoader workers, ``--network none``. The trainer's exit code comes back
  unchanged; SIGTERM, SIGINT and SIGHUP are passed on to the container. When Docker cannot give
  a CUDA cell's container a GPU (``docker run`` exit 125, e.g. no NVIDIA runtime), the cell runs
  again without ``--gpus`` and records status ``unavailable`` with Docker's reason.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import datetime
import hashlib
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from mnistbench import __version__
from mnistbench.core import options, provenance, schema, study, untrusted
from mnistbench.core.atomic import write_json
from mnistbench.core.devices import cuda_hidden
from mnistbench.core.envvars import GPU_NOTE_VAR, IMAGE_ID_VAR, WORKFLOW_DIGEST_VAR

#: Seconds ``docker version`` may take before the engine counts as not answering.
ENGINE_TIMEOUT_S = 20.0
#: Seconds the short docker calls (image inspect, rm) may take.
CALL_TIMEOUT_S = 60.0
#: Where a cell's data folder is mounted in the container (read-only).
DATA_MOUNT = "/data"
#: Where the host's results folder is mounted: the image's /work/results, whose owner the
#: entrypoint runs as (docker/entrypoint.sh).
RESULTS_MOUNT = "/work/results"
#: Exit code of ``docker run`` when Docker itself failed to create or start the container.
DOCKER_RUN_FAILED = 125
#: Keys every image record holds (:func:`build_image`).
RECORD_KEYS = ("image_id", "tag", "dockerfile", "dockerfile_sha256", "context", "build_args",
               "build_options", "docker_server_version", "build_s", "built_at", "created",
               "size_bytes")
#: Label on every container :func:`run_cell` starts.
CELL_LABEL = "org.mnistbench.timed-cell"
#: Lines at the end of Docker's stderr kept to explain a failed start.
_STDERR_TAIL_LINES = 20


class ContainerError(Exception):
    """A user-facing error of the docker runner: one paragraph with the fix."""


# ---------------------------------------------------------------------------------------------
# Engine
def check_engine(docker: str = "docker", timeout: float = ENGINE_TIMEOUT_S) -> str:
    """The Docker server version; :class:`ContainerError` when ``docker`` is not on PATH or no
    daemon answers ``docker version`` within ``timeout`` seconds."""
    exe = shutil.which(docker)
    if exe is None:
        raise ContainerError(
            f"the `{docker}` command is not on PATH. Install Docker Engine (Debian/Ubuntu: "
            "apt-get install docker.io; elsewhere https://docs.docker.com/engine/install/), "
            "start it, and check that `docker version` shows a Server.")
    try:
        proc = subprocess.run([exe, "version", "--format", "{{.Server.Version}}"],
                              capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        detail = f"`docker version` got no answer from the daemon within {timeout:g} s"
    except OSError as exc:
        detail = f"`{exe} version` could not run: {exc}"
    else:
        version = proc.stdout.strip()
        if proc.returncode == 0 and version and version != "<no value>":
            return version
        said = " ".join(proc.stderr.split())[:400] or f"exit {proc.returncode}, no message"
        detail = f"`docker version` reached no Docker daemon ({said})"
    raise ContainerError(
        f"{detail}. Start the engine (systemctl start docker; without systemd, as root: "
        "dockerd &, or scripts/docker-engine start in this project), and make sure this user "
        "may use it (member of the docker group, or DOCKER_HOST naming a daemon that answers).")


# ---------------------------------------------------------------------------------------------
# Build
def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _utc_now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _option_build_args(options: Sequence[str]) -> set[str]:
    """Names of the build arguments set in raw ``docker build`` options."""
    return {value.split("=", 1)[0] for value in _option_values(options, "--build-arg") if value}


def resolved_build_args(tag: str, build_args: Mapping[str, str],
                        options: Sequence[str] = ()) -> dict[str, str]:
    """``build_args`` plus the image's bookkeeping arguments where neither they nor
    ``options`` set them: ``IMAGE_NAME`` (the tag, recorded as ``env.container``), ``VERSION``
    (the package's version, written once: ``mnistbench.__version__``), ``REVISION`` (the
    checkout's git revision, ``-dirty`` when modified) and ``CREATED`` (now, UTC)."""
    given = set(build_args) | _option_build_args(options)
    defaults = {"IMAGE_NAME": tag,
                "VERSION": __version__,
                "REVISION": provenance.git_revision() or "unknown",
                "CREATED": _utc_now()}
    return {**{k: v for k, v in defaults.items() if k not in given}, **dict(build_args)}


def build_command(dockerfile: Path, tag: str, build_args: Mapping[str, str],
                  options: Sequence[str], context: Path, iidfile: Path,
                  docker: str = "docker") -> list[str]:
    """The ``docker build`` command line (``build_args`` as given, already resolved)."""
    command = [docker, "build", "-f", str(dockerfile), "-t", tag, "--iidfile", str(iidfile)]
    for key, value in build_args.items():
        command += ["--build-arg", f"{key}={value}"]
    return [*command, *options, str(context)]


def _inspect_image(ref: str, docker: str) -> dict | None:
    """``docker image inspect`` of ``ref`` as a dict, None when there is no such image."""
    proc = subprocess.run([docker, "image", "inspect", "--format", "{{json .}}", ref],
                          capture_output=True, text=True, timeout=CALL_TIMEOUT_S, check=False)
    if proc.returncode != 0:
        return None
    try:
        info = json.loads(proc.stdout)
    except json.JSONDecodeError:
        return None
    return info if isinstance(info, dict) else None


def build_image(dockerfile: Path | str, tag: str, build_args: Mapping[str, str] | None = None,
                options: Sequence[str] = (), context: Path | str = ".",
                record_path: Path | str = "image.json", docker: str = "docker") -> dict:
    """Build ``dockerfile`` in ``context`` as ``tag`` and write the image's record to
    ``record_path``; the record. A previous record is removed first and the new one written
    (atomically) only after the build and ``docker image inspect`` succeeded, so a failed build
    never leaves a record behind. Docker's output goes to this process's stdout and stderr."""
    dockerfile, context, record_path = Path(dockerfile), Path(context), Path(record_path)
    if not dockerfile.is_file():
        raise ContainerError(f"Dockerfile {dockerfile} does not exist; give the path of one "
                             "of the project's docker/*.Dockerfile (relative paths start at "
                             "the working directory).")
    if not context.is_dir():
        raise ContainerError(f"build context {context} is not a folder; give the project's "
                             "root folder (where the Snakefile is).")
    with contextlib.suppress(FileNotFoundError):
        record_path.unlink()
    server = check_engine(docker)
    args = resolved_build_args(tag, build_args or {}, options)
    with tempfile.TemporaryDirectory(prefix="mnistbench-build-") as tmp:
        iidfile = Path(tmp) / "iid"
        command = build_command(dockerfile, tag, args, options, context, iidfile, docker)
        print(f"mnistbench docker build: {shlex.join(command)}", file=sys.stderr, flush=True)
        start = time.perf_counter()
        proc = subprocess.run(command, stdin=subprocess.DEVNULL, check=False)
        build_s = time.perf_counter() - start
        image_id = iidfile.read_text().strip() if iidfile.is_file() else ""
    if proc.returncode != 0:
        raise ContainerError(
            f"docker build of {dockerfile} as {tag} exited {proc.returncode} after "
            f"{build_s:.0f} s (Docker's output is above); fix what it reports and rerun. "
            "docs/docker.md lists the build arguments (BASE_IMAGE, WHEELHOUSE, ...).")
    info = _inspect_image(image_id or tag, docker)
    if info is None or not info.get("Id"):
        raise ContainerError(f"docker build of {tag} succeeded but `docker image inspect "
                             f"{image_id or tag}` finds no image; rerun the build.")
    record = {
        "image_id": info["Id"],
        "tag": tag,
        "dockerfile": str(dockerfile),
        "dockerfile_sha256": _sha256(dockerfile),
        "context": str(context.resolve()),
        "build_args": args,
        "build_options": list(options),
        "docker_server_version": server,
        "build_s": round(build_s, 3),
        "built_at": _utc_now(),
        "created": info.get("Created", ""),
        "size_bytes": info.get("Size"),
    }
    write_json(record_path, record)
    print(f"mnistbench docker build: {tag} is {record['image_id']} ({build_s:.1f} s); "
          f"record {record_path}", file=sys.stderr, flush=True)
    return record


def load_record(path: Path | str) -> dict:
    """An image record written by :func:`build_image`; :class:`ContainerError` when it is
    missing or not one."""
    path = Path(path)
    if not (path.exists() or path.is_symlink()):
        raise ContainerError(f"image record {path} does not exist; build the image first "
                             f"(mnistbench docker build ... --record {path}, which the "
                             "workflow's docker_image rule runs).")
    try:
        # bounded: a record nested 5000 deep was a RecursionError traceback
        text = untrusted.read_text_file(path)
        untrusted.check_json_depth(text)
        record = json.loads(text)
    except untrusted.UnsafeFile as exc:
        raise ContainerError(f"cannot read image record {path}: {exc.why}. Delete it and "
                             "build the image again.") from None
    except (ValueError, RecursionError) as exc:  # JSONDecodeError and TooComplex among them
        raise ContainerError(f"cannot read image record {path}: {exc}. Delete it and build "
                             "the image again.") from None
    if not isinstance(record, dict) or not str(record.get("image_id", "")).startswith(
            "sha256:"):
        raise ContainerError(f"{path} is not an image record (no image_id sha256:...); delete "
                             "it and build the image again.")
    return record


# ---------------------------------------------------------------------------------------------
# Run
def _option_values(args: Sequence[str], name: str) -> list[str]:
    """Every value of option ``name`` (``--name V`` or ``--name=V``) in ``args``, in order."""
    values = []
    for i, arg in enumerate(args):
        if arg == name and i + 1 < len(args):
            values.append(args[i + 1])
        elif arg.startswith(name + "="):
            values.append(arg.split("=", 1)[1])
    return values


def _train_options(args: Sequence[str]):
    """``train``'s options parsed by the CLI's own parser (mnistbench.core.options), or a
    :class:`ContainerError` with argparse's message."""
    parser = options.train_parser()
    try:
        return parser.parse_args(args)
    except SystemExit:  # argparse has printed the usage and its message to stderr
        raise ContainerError(
            f"the train command {shlex.join(['train', *args])} is not valid (argparse's message "
            "above); `mnistbench train --help` lists every option.") from None


def _peak_options(args: Sequence[str]) -> argparse.Namespace:
    """The options of ``peak`` that the container needs (its device and ``--out`` file; it
    reads no data), or a :class:`ContainerError`; the rest pass through to ``mnistbench peak``
    inside the image, which checks them."""
    parser = argparse.ArgumentParser(prog="mnistbench peak", add_help=False)
    parser.add_argument("--device", required=True)
    parser.add_argument("--out", required=True)
    try:
        parsed, _ = parser.parse_known_args(args)
    except SystemExit:
        raise ContainerError(
            f"the peak command {shlex.join(['peak', *args])} is not valid (argparse's message "
            "above): it needs --device and --out; `mnistbench peak --help` lists every "
            "option.") from None
    return argparse.Namespace(device=parsed.device, out=parsed.out, data=None)


def _mount(source: Path, target: str, readonly: bool) -> list[str]:
    """A ``--mount`` bind option (unlike ``-v``, it never creates a missing host folder, which
    Docker would create owned by root)."""
    text = str(source)
    if any(c in text for c in ',"\n'):
        raise ContainerError(f"cannot mount {text!r} into a container: the path holds a comma, "
                             "quote or newline. Move or link the folder to a plain path.")
    return ["--mount", f"type=bind,source={text},target={target}"
            + (",readonly" if readonly else "")]


def gpu_request(device: str) -> str | None:
    """The ``--gpus`` value of a cell: None for cpu; for cuda ``all``, or the devices in
    ``$CUDA_VISIBLE_DEVICES`` when it is set (None when it hides every GPU, as it would for a
    local run)."""
    if device != "cuda" or cuda_hidden():
        return None
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    return "all" if visible is None else f'"device={visible.strip()}"'


def container_name(out: Path) -> str:
    """A container name unique to the cell's output folder: ``mnistbench-<cell>-<hash>``."""
    digest = hashlib.sha256(str(out.resolve()).encode()).hexdigest()[:10]
    return f"mnistbench-{study.safe_name(out.name, default='cell')[:60]}-{digest}"


def run_command(record: Mapping, args: Sequence[str], results_dir: Path | str = "results",
                shm_size: str = "2g", run_options: Sequence[str] = (), gpus: bool = True,
                gpu_note: str = "", docker: str = "docker") -> list[str]:
    """The ``docker run`` command line of one ``mnistbench train`` cell (``args`` start with
    ``train``), or of one ``mnistbench peak`` measurement (``peak``: no data mounted, its
    ``--out`` file under ``results_dir``), in the image of ``record``.

    ``--data`` of ``args`` is mounted read-only at :data:`DATA_MOUNT`; ``--out`` must lie in
    ``results_dir``, which is mounted at :data:`RESULTS_MOUNT`; both are rewritten to their
    container paths. ``--gpus`` is given to cuda cells unless ``gpus`` is false; ``gpu_note``
    (why there is no GPU) is passed to the trainer, which adds it to an unavailable reason."""
    args = list(args)
    if not args or args[0] not in ("train", "peak"):
        raise ContainerError("mnistbench docker run runs one cell or one peak measurement: the "
                             "command after `--` must be `train ...` or `peak ...`, got "
                             f"{shlex.join(args) or 'nothing'}.")
    parsed = _train_options(args[1:]) if args[0] == "train" else _peak_options(args[1:])
    data, out = parsed.data, parsed.out
    data_dir = Path(data).resolve() if data else None
    out_dir, results = Path(out).resolve(), Path(results_dir).resolve()
    if data_dir is not None and not data_dir.is_dir():
        raise ContainerError(f"data folder {data} does not exist; fetch MNIST into it first "
                             "(mnistbench fetch --dest DIR).")
    if not results.is_dir():
        raise ContainerError(f"results folder {results_dir} does not exist; create it as the "
                             "user who should own the cell's files (mkdir -p).")
    try:
        inside = out_dir.relative_to(results)
    except ValueError:
        raise ContainerError(f"--out {out} is not inside the results folder {results_dir}, the "
                             "only host folder the container writes to; give an --out under "
                             "it or another --results.") from None
    # The container's paths, given last: argparse takes the last value of an option.
    args += [*(["--data", DATA_MOUNT] if data_dir else []),
             "--out", f"{RESULTS_MOUNT}/{inside.as_posix()}".rstrip("/.")]
    device = parsed.device
    request = gpu_request(device) if gpus else None
    command = [docker, "run", "--rm", "--name", container_name(out_dir),
               "--label", f"{CELL_LABEL}={out_dir}",
               "--hostname", socket.gethostname().split(".")[0] or "container",
               "--network", "none", "--shm-size", shm_size]
    if request:
        command += ["--gpus", request]
    command += _mount(results, RESULTS_MOUNT, readonly=False)
    if data_dir is not None:  # peak reads no data
        command += _mount(data_dir, DATA_MOUNT, readonly=True)
    command += ["-e", f"{IMAGE_ID_VAR}={record['image_id']}"]
    if os.environ.get(WORKFLOW_DIGEST_VAR):  # the bench rule's digest, recorded by the cell
        command += ["-e", f"{WORKFLOW_DIGEST_VAR}={os.environ[WORKFLOW_DIGEST_VAR]}"]
    if gpu_note:
        command += ["-e", f"{GPU_NOTE_VAR}={gpu_note}"]
    return [*command, *run_options, str(record["image_id"]), "mnistbench", *args]


def _quiet(command: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(command, capture_output=True, text=True, timeout=CALL_TIMEOUT_S,
                          check=False)


class _Forwarder:
    """While active, SIGTERM, SIGINT and SIGHUP of this process go to the running child."""

    SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None
        self.received: int | None = None
        self._previous: dict = {}

    def _handle(self, signum, frame) -> None:
        self.received = signum
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signum)  # docker run's sig-proxy passes it to the container

    def __enter__(self) -> _Forwarder:
        if threading.current_thread() is threading.main_thread():
            for sig in self.SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


def _attempt(command: list[str], forwarder: _Forwarder) -> tuple[int, list[str]]:
    """Run ``command`` (stdout inherited, stderr copied through); its exit code and the last
    lines of its stderr."""
    tail: collections.deque[str] = collections.deque(maxlen=_STDERR_TAIL_LINES)
    # Its own process group: a Ctrl-C reaches it once, through the forwarder, not twice.
    proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, errors="replace", bufsize=1, process_group=0)
    forwarder.proc = proc
    if forwarder.received is not None:  # a signal came while it started
        proc.send_signal(forwarder.received)

    def copy() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            sys.stderr.write(line)
            sys.stderr.flush()
            tail.append(line.rstrip("\n"))

    copier = threading.Thread(target=copy, daemon=True)
    copier.start()
    while True:
        try:
            code = proc.wait()
            break
        except KeyboardInterrupt:  # SIGINT before the forwarder was installed: pass it on
            proc.send_signal(signal.SIGINT)
    copier.join(timeout=5)
    forwarder.proc = None
    return code, list(tail)


def _docker_message(tail: Sequence[str]) -> str:
    """Docker's own error line (``docker: Error response ...``) from the end of a failed
    ``docker run``'s stderr, else its last line that is not a pointer to ``--help``."""
    lines = [line.strip() for line in tail if line.strip()]
    errors = [line for line in lines if line.startswith("docker: ")]
    others = [line for line in lines if "--help" not in line]
    message = (errors or others or ["no message"])[-1]
    return message.removeprefix("docker: ")[:300]


def run_cell(record_path: Path | str, args: Sequence[str], results_dir: Path | str = "results",
             shm_size: str = "2g", run_options: Sequence[str] = (),
             docker: str = "docker") -> int:
    """Run one ``mnistbench train`` cell in the recorded image (see :func:`run_command`); the
    trainer's exit code, unchanged (0, 10, 11, 12; anything else is a failure). A CUDA cell whose
    container Docker cannot start with ``--gpus`` (exit 125) runs again without it, with the
    reason passed on, so that it records status unavailable."""
    record = load_record(record_path)
    exe = shutil.which(docker)
    if exe is None:
        check_engine(docker)  # raises with the fix
        exe = docker
    command = run_command(record, args, results_dir, shm_size, run_options, docker=exe)
    if _inspect_image(record["image_id"], exe) is None:
        check_engine(exe)  # a daemon that stopped answering says so
        raise ContainerError(
            f"image {record['image_id']} of record {record_path} (built as {record.get('tag')}) "
            "is not in Docker's image store (removed or pruned, or another engine); delete "
            f"{record_path} and rerun the workflow, which builds it again.")
    name = command[command.index("--name") + 1]
    _quiet([exe, "rm", "--force", name])  # a container left by a killed run of this cell
    with _Forwarder() as forwarder:
        print(f"mnistbench docker run: {shlex.join(command)}", file=sys.stderr, flush=True)
        code, tail = _attempt(command, forwarder)
        if code == DOCKER_RUN_FAILED and forwarder.received is None and "--gpus" in command:
            reason = _docker_message(tail)
            print(f"mnistbench docker run: Docker could not start the container with a GPU "
                  f"({reason}); running the cell again without --gpus, so that it records "
                  "status unavailable.", file=sys.stderr, flush=True)
            note = (f"docker could not give the container a GPU (docker run --gpus: {reason}); "
                    "a GPU container needs an NVIDIA GPU and driver on the host and the NVIDIA "
                    "Container Toolkit (restart dockerd after installing it)")
            _quiet([exe, "rm", "--force", name])
            command = run_command(record, args, results_dir, shm_size, run_options, gpus=False,
                                  gpu_note=note, docker=exe)
            code, tail = _attempt(command, forwarder)
        if forwarder.received is not None or code not in schema.EXIT_CODES.values():
            _quiet([exe, "rm", "--force", name])  # never leave the cell's container running
    if forwarder.received is not None:
        return 128 + forwarder.received
    return code
