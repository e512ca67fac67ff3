"""Realistic fake study results, written exactly as ``mnistbench train`` writes them.

Every cell gets ``results/runs/{env}/{experiment}/{cell}/`` with ``summary.json`` (the
top-level keys and the key sets of :mod:`mnistbench.core.schema`), ``epochs.csv``
(:data:`~mnistbench.core.schema.EPOCH_COLUMNS`) and ``resources.csv``
(:data:`~mnistbench.core.schema.RESOURCE_COLUMNS`). Timings follow a simple cost model of the
MNIST CNN (per-sample and per-step costs per device, precision and loader, with a few
percent of noise), so the numbers look like a real study: the CPU takes about a minute per
epoch at batch 128 with the DataLoader, a GPU a few seconds.

Options cover the cases the aggregator and the report must survive: CPU-only studies
(``devices=("cpu",)``), machines without a GPU (``gpu=False``: every cuda cell is
``unavailable``), one repeat, injected ``failed``/``oom``/``unavailable`` cells with any
reason text (``overrides``), several environments (``envs``), and measured or absent
energy counters (``energy``). Machines (``machines``) carry the hardware record too (ISA,
CPU flags, bf16 path), so two environments can differ in it alone.
"""

from __future__ import annotations

import csv
import json
import math
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC
from pathlib import Path

import numpy as np

from mnistbench import __version__
from mnistbench.core import schema
from mnistbench.core.devices import LOADERS, PRECISIONS, is_supported
from mnistbench.core.study import cell_id  # re-exported: the tests import it from here

TRAIN_SAMPLES = 60_000
TEST_SAMPLES = 10_000
#: Batch sizes of the sweep experiment (samples).
SWEEP_BATCH_SIZES = (32, 64, 128, 256, 512, 1024, 2048, 4096)
BLOG_BATCH_SIZE = 128
CONVERGENCE_EPOCHS = 10
#: Sweep cells are short: this many timed epochs, each capped at SWEEP_MAX_STEPS steps.
SWEEP_EPOCHS = 2
SWEEP_MAX_STEPS = 50
#: Headline and threads cells (issue 38): one short epoch of this many timed steps.
SHORT_MAX_STEPS = 80
#: Thread counts of the fake threads experiment (CPU only).
THREAD_COUNTS = (1, 2, 4)
START_UNIX = 1_767_225_600.0  # 2026-01-01T00:00:00Z, s
#: Devices of a fake study by default: the CPU and an NVIDIA GPU (xpu, mps on request).
FAKE_DEVICES = ("cpu", "cuda")


@dataclass(frozen=True)
class Machine:
    """A fake host: its environment capture and how fast its CPU and GPU are (1.0 = the
    reference i7-12700K / RTX 4090 pair; larger is faster)."""

    hostname: str
    cpu_model: str
    cores_logical: int
    cores_physical: int
    memory_gb: float
    gpu_name: str
    gpu_memory_gb: float
    cpu_speed: float
    gpu_speed: float
    # The hardware record (mnistbench.measure.hardware): these CPUs have AVX2 and no bf16 hardware.
    cpu_capability: str = "AVX2"
    cpu_flags: str = "avx2"
    gpu_bf16: str = "native"  # bf16 tensor cores (Ampere and later)

    def isa(self, capability: str, flags: str) -> Machine:
        """This machine with another ISA: the same model name, cores, memory and speeds."""
        return replace(self, cpu_capability=capability, cpu_flags=flags)


#: Machines given to the environments in order (cycled when there are more environments).
MACHINES = (
    Machine("alpha-ws", "12th Gen Intel(R) Core(TM) i7-12700K", 20, 12, 62.6,
            "NVIDIA GeForce RTX 4090", 23.99, 1.0, 1.0),
    Machine("beta-node", "AMD EPYC 7763 64-Core Processor", 32, 16, 251.4,
            "NVIDIA A100-SXM4-40GB", 39.5, 1.35, 0.8),
    Machine("gamma-laptop", "Intel(R) Core(TM) i5-8250U CPU @ 1.60GHz", 8, 4, 15.5,
            "NVIDIA GeForce MX150", 2.0, 0.45, 0.12, gpu_bf16="emulated"),
)


def make_study(runs: Path, *, envs: Sequence[str] = ("alpha",),
               gpu: bool | Mapping[str, bool] = True,
               devices: Sequence[str] = FAKE_DEVICES,
               precisions: Sequence[str] = PRECISIONS,
               loaders: Sequence[str] = LOADERS,
               batch_sizes: Sequence[int] = SWEEP_BATCH_SIZES,
               experiments: Sequence[str] = ("convergence", "sweep"),
               repeats: int = 3,
               convergence_epochs: int = CONVERGENCE_EPOCHS,
               energy: bool = True,
               overrides: Mapping[str, tuple[str, str]] | None = None,
               hostnames: Mapping[str, str] | None = None,
               machines: Mapping[str, Machine] | None = None,
               sample_interval: float = 0.5,
               params: Mapping[str, object] | None = None,
               seed: int = 0) -> list[Path]:
    """Write a fake study under ``runs`` and return the cell folders.

    ``gpu``: whether the machine has a GPU (per environment when a mapping); without one,
    cuda cells are written with status ``unavailable``. ``devices``: devices in the matrix
    (``("cpu",)``: a CPU-only study, no cuda cells at all). ``overrides``: cell id (see
    :func:`cell_id`) -> (status, reason) forced onto that cell in every environment.
    ``hostnames``: env -> host name recorded in the environment capture. ``machines``: env ->
    :class:`Machine` (default: :data:`MACHINES` in turn). ``energy``: whether
    the NVML/RAPL energy counters are present (else null). ``sample_interval``: resource
    sampler period, s. ``params``: train params set on every cell (e.g. ``train_limit``,
    ``test_limit``, ``max_steps`` of a quick study; ``train_limit`` shortens the epochs).
    """
    overrides = dict(overrides or {})
    hostnames = dict(hostnames or {})
    extra_params = dict(params or {})
    cells: list[Path] = []
    for index, env in enumerate(envs):
        machine = (machines or {}).get(env, MACHINES[index % len(MACHINES)])
        has_gpu = gpu.get(env, True) if isinstance(gpu, Mapping) else bool(gpu)
        host = hostnames.get(env, machine.hostname)
        for experiment in experiments:
            for device, precision, loader, batch_size, epochs, threads in _matrix(
                    experiment, devices, precisions, loaders, batch_sizes, convergence_epochs):
                for repeat in range(repeats):
                    cid = cell_id(device, precision, loader, batch_size, repeat,
                                  f"t{threads}" if threads else "")
                    status, reason = overrides.get(cid, ("ok", ""))
                    if status == "ok" and device == "cuda" and not has_gpu:
                        status = "unavailable"
                        reason = ("no CUDA GPU is visible to torch "
                                  "(this torch build has no CUDA support)")
                    params = {
                        "env": env, "experiment": experiment, "cell": cid, "repeat": repeat,
                        "device": device, "precision": precision, "loader": loader,
                        "batch_size": batch_size, "epochs": epochs, "lr": 0.001,
                        "seed": seed + repeat, "threads": threads or 0,
                        "threads_asked": threads or 0,
                        "loader_threads": 1 if loader == "dataloader" else 0, "workers": 0,
                        "pin_memory": False, "compile": False, "cuda_graphs": False,
                        "warmup_steps": 3,
                        "max_steps": {"sweep": SWEEP_MAX_STEPS, "headline": SHORT_MAX_STEPS,
                                      "threads": SHORT_MAX_STEPS}.get(experiment, 0),
                        "train_limit": 0, "test_limit": 0, "eval_batch_size": 1000,
                        "sample_interval": sample_interval, "time_limit": 0,
                        "bf16_path": _bf16_path(device, precision, machine, status),
                    }
                    params.setdefault("allocator", "auto")  # the CPU runtime (cpuruntime)
                    params.update({"implementation": "tuned", "cudnn_benchmark": True,
                                   "max_batch": False, "max_batch_stop": None, "tip": "",
                                   "width": 1})
                    if experiment in ("headline", "threads") and loader == "dataloader":
                        params.update(implementation="stock", allocator="glibc",
                                      cudnn_benchmark=False)  # the blog's code
                    # The math that ran (schema 5): torch's defaults under the fp32 policy.
                    params.update({"math_tf32_matmul": False, "math_tf32_cudnn": False,
                                   "math_matmul_precision": "highest",
                                   "math_cudnn_benchmark": device == "cuda",
                                   "math_deterministic": "det=off cudnn=off",
                                   # Profiled on CUDA only (one warm-up step's kernels).
                                   "math_conv_kernels": (
                                       "conv: cudnn::winograd_fprop; matmul: sm90_gemm_f32"
                                       if device == "cuda" else None)})
                    params.update(extra_params)
                    folder = runs / env / experiment / cid
                    write_cell(folder, params, status=status, reason=reason, machine=machine,
                               hostname=host, has_gpu=has_gpu, energy=energy,
                               seed=zlib.crc32(f"{seed}/{env}/{experiment}/{cid}".encode()))
                    cells.append(folder)
    return cells


def _bf16_path(device: str, precision: str, machine: Machine, status: str) -> str:
    """params.bf16_path as the trainer records it: native or emulated for a bf16 cell that
    reached its device, else empty."""
    if precision != "bf16" or status == "unavailable":
        return ""
    if device == "cpu":
        native = {"avx512_bf16", "amx_bf16"} & set(machine.cpu_flags.split())
        return "native" if native else "emulated"
    return machine.gpu_bf16


def _matrix(experiment, devices, precisions, loaders, batch_sizes, convergence_epochs):
    """(device, precision, loader, batch size, epochs) of every cell of one experiment."""
    if experiment == "convergence":
        for device in devices:
            for loader in loaders:
                yield device, "fp32", loader, BLOG_BATCH_SIZE, convergence_epochs, None
    elif experiment == "headline":
        for device in devices:
            for loader in loaders:
                yield device, "fp32", loader, BLOG_BATCH_SIZE, 1, None
    elif experiment == "threads":
        for threads in THREAD_COUNTS if "cpu" in devices else ():
            for loader in loaders:
                yield "cpu", "fp32", loader, BLOG_BATCH_SIZE, 1, threads
    elif experiment == "sweep":
        for device in devices:
            for precision in precisions:
                if not is_supported(device, precision):
                    continue
                for loader in loaders:
                    for batch_size in batch_sizes:
                        yield device, precision, loader, batch_size, SWEEP_EPOCHS, None
    else:
        raise ValueError(f"unknown experiment {experiment!r}; allowed: convergence, sweep, "
                         "headline, threads")


def _step_costs(device: str, precision: str, loader: str, batch_size: int,
                machine: Machine) -> dict[str, float]:
    """Seconds per training step of each phase (data, forward, backward, optimizer)."""
    b = batch_size
    if device == "cpu":
        slow = {"fp32": 1.0, "bf16": 1.45}[precision] / machine.cpu_speed
        data = (0.25e-3 * b if loader == "dataloader" else 5e-6 * b + 2e-5) / machine.cpu_speed
        return {"data": data, "forward": (0.3e-3 + 0.22e-3 * b) * slow,
                "backward": (0.5e-3 + 0.40e-3 * b) * slow,
                "optimizer": 1.5e-3 / machine.cpu_speed}
    fast = {"fp32": 1.0, "tf32": 0.7, "bf16": 0.55, "fp16": 0.5}[precision]
    data = 0.08e-3 * b / machine.cpu_speed if loader == "dataloader" else 5e-5
    return {"data": data, "forward": (0.6e-3 + 4e-6 * b * fast) / machine.gpu_speed,
            "backward": (1.0e-3 + 8e-6 * b * fast) / machine.gpu_speed,
            "optimizer": 0.4e-3 / machine.gpu_speed}


def write_cell(folder: Path, params: dict, *, status: str, reason: str, machine: Machine,
               hostname: str, has_gpu: bool, energy: bool, seed: int) -> None:
    """Write one cell's summary.json, epochs.csv and resources.csv the way the trainer does."""
    if status not in schema.STATUSES:
        raise ValueError(f"unknown status {status!r}; allowed: {', '.join(schema.STATUSES)}")
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    device = params["device"]
    env_capture = _env_capture(machine, hostname, has_gpu)
    start = START_UNIX + (seed % 100_000)
    startup_s = float(2.4 * rng.lognormal(0, 0.05))
    data_load_s = float((1.1 if params["loader"] == "resident" else 0.6) * rng.lognormal(0, 0.05))
    warmup_s = float((1.6 if device == "cuda" else 0.3) * rng.lognormal(0, 0.05))

    epochs: list[dict] = []
    if status == "ok":
        epochs = _epoch_rows(params, machine, rng)
    timed_s = sum(row["epoch_s"] for row in epochs)
    # overhead_s excludes the warm-up and the timed epochs (schema.TIMING_FIELDS).
    if status == "ok":
        overhead_s = startup_s + data_load_s + 0.2
    elif status == "unavailable":
        data_load_s = warmup_s = 0.0
        overhead_s = startup_s + 0.1
    else:  # oom / failed: died during warm-up or the first epoch
        overhead_s = startup_s + data_load_s + 0.1
    end = start + overhead_s + warmup_s + timed_s

    resources = [] if status == "unavailable" else _resource_rows(
        params, status, startup_s + data_load_s, warmup_s, timed_s, has_gpu, energy, rng)
    results = {name: None for name in schema.RESULT_FIELDS}
    if status == "ok":
        results.update(_results(params, epochs, resources, has_gpu, energy))

    summary = {
        "schema_version": schema.SCHEMA_VERSION,
        "status": status,
        "reason": reason,
        "params": {name: params[name] for name in schema.PARAM_FIELDS},
        "env": env_capture,
        "timing": {
            "started_at": _iso(start), "ended_at": _iso(end),
            "start_unix": round(start, 3), "end_unix": round(end, 3),
            "startup_s": round(startup_s, 4),
            "data_load_s": round(data_load_s, 4) if status != "unavailable" else None,
            "warmup_s": round(warmup_s, 4) if status != "unavailable" else None,
            "timed_s": round(timed_s, 4) if status == "ok" else None,
            "overhead_s": round(overhead_s, 4),
            "timing_method": None if status == "unavailable" else (
                "cuda-events" if device == "cuda" else
                "host-clock" if device == "cpu" else "device-events"),
            "phase_split": None if status == "unavailable" else "per-step",
        },
        "results": results,
    }
    (folder / schema.SUMMARY_FILE).write_text(json.dumps(summary, indent=2) + "\n",
                                             encoding="utf-8")
    # unavailable: no CSVs at all; failed: the time series only; oom: a header-only
    # epochs.csv (the trainer died in the first epoch) and the time series.
    if status in ("ok", "oom"):
        _write_csv(folder / schema.EPOCHS_FILE, schema.EPOCH_COLUMNS, epochs)
    if status != "unavailable":
        _write_csv(folder / schema.RESOURCES_FILE, schema.RESOURCE_COLUMNS, resources)


def _epoch_rows(params: dict, machine: Machine, rng: np.random.Generator) -> list[dict]:
    """One row per timed epoch, phases from the step cost model with a little noise."""
    device, precision, loader = params["device"], params["precision"], params["loader"]
    batch_size = params["batch_size"]
    train_samples = min(TRAIN_SAMPLES, params.get("train_limit") or TRAIN_SAMPLES)
    full_steps = math.ceil(train_samples / batch_size)
    steps = min(full_steps, params["max_steps"]) if params["max_steps"] else full_steps
    samples = min(train_samples, steps * batch_size)
    costs = _step_costs(device, precision, loader, batch_size, machine)
    if device == "cpu" and params.get("threads_asked"):
        # Fewer threads than cores: the arithmetic slows as about threads^0.7 (the data not).
        slower = (machine.cores_physical / params["threads_asked"]) ** 0.7
        costs = {k: v * (1.0 if k == "data" else slower) for k, v in costs.items()}
    run_factor = rng.lognormal(0, 0.03)
    eval_s = (4.8 / machine.cpu_speed if device == "cpu" else 0.45 / machine.gpu_speed)
    lr_scale = 1.0 if params["experiment"] == "convergence" else 0.9
    rows = []
    seen = 0
    for epoch in range(1, params["epochs"] + 1):
        seen += samples
        phase = {k: v * steps * run_factor * rng.lognormal(0, 0.02) for k, v in costs.items()}
        train_s = sum(phase.values()) * 1.01  # + loop overhead
        ev = eval_s * run_factor * rng.lognormal(0, 0.02)
        progress = 1.0 - math.exp(-seen / (45_000.0 * max(1.0, batch_size / 256) ** 0.5))
        test_acc = min(99.3, 88.0 + 11.2 * progress * lr_scale + rng.normal(0, 0.08))
        test_loss = max(0.02, 0.42 * (1.0 - progress) + 0.028 + 0.0008 * epoch
                        + rng.normal(0, 0.002))
        train_loss = max(0.005, 0.55 * (1.0 - progress) + 0.012 + rng.normal(0, 0.002))
        rows.append({
            "epoch": epoch, "steps": steps, "samples": samples,
            "data_s": round(phase["data"], 5), "forward_s": round(phase["forward"], 5),
            "backward_s": round(phase["backward"], 5),
            "optimizer_s": round(phase["optimizer"], 5), "train_s": round(train_s, 5),
            "eval_s": round(ev, 5), "epoch_s": round(train_s + ev, 5),
            "train_loss": round(train_loss, 5), "test_loss": round(test_loss, 5),
            "test_acc": round(test_acc, 3), "samples_per_s": round(samples / train_s, 2),
            "others_load_pct": 0.4, "disturbed": "",
        })
    return rows


def _resource_rows(params, status, setup_s, warmup_s, timed_s, has_gpu, energy,
                   rng) -> list[dict]:
    """The sampler's time series over setup, warm-up, training and the end of the cell."""
    interval = float(params["sample_interval"])
    device = params["device"]
    total = setup_s + warmup_s + (timed_s if status == "ok" else 0.4)
    times = np.arange(0.0, total + interval, interval)
    rows = []
    gpu_energy = cpu_energy = 0.0
    for t in times:
        if t < setup_s:
            stage = "setup"
        elif t < setup_s + warmup_s:
            stage = "warmup"
        elif t <= total:
            stage = "train"
        else:
            stage = "done"
        busy = stage in ("warmup", "train")
        if device == "cpu":
            proc = (1150.0 if busy else 105.0) * rng.lognormal(0, 0.04)
            ramp = min(1.0, t / max(setup_s, 1e-9))
            rss = 520.0 + (380.0 if busy else 150.0 * ramp) + rng.normal(0, 4)
            gpu_util, gpu_mem, gpu_power = 0.0, 0.0, 21.0 + rng.normal(0, 0.5)
            cpu_power = 125.0 if busy else 35.0
        else:
            loader_busy = 0.9 if params["loader"] == "resident" else 0.38
            proc = (101.0 if busy else 98.0) * rng.lognormal(0, 0.03)
            rss = 2400.0 + (180.0 if busy else 0.0) + rng.normal(0, 6)
            gpu_util = min(100.0, 100.0 * loader_busy * rng.lognormal(0, 0.05)) if busy else 0.0
            gpu_mem = (1650.0 + params["batch_size"] * 0.9) if busy else 420.0
            gpu_power = (60.0 + 300.0 * loader_busy) * rng.lognormal(0, 0.04) if busy else 38.0
            cpu_power = 48.0 if busy else 35.0
        gpu_energy += gpu_power * interval
        cpu_energy += cpu_power * interval
        rows.append({
            "t_s": round(float(t), 3), "stage": stage,
            "proc_cpu_pct": round(float(proc), 1),
            "sys_cpu_pct": round(float(min(100.0, proc / 20.0 + rng.uniform(0.5, 2.5))), 1),
            "rss_mb": round(float(rss), 1),
            "gpu_util_pct": round(float(gpu_util), 1) if has_gpu else None,
            "gpu_mem_mb": round(float(gpu_mem), 1) if has_gpu else None,
            "gpu_power_w": round(float(gpu_power), 2) if has_gpu else None,
            "gpu_energy_j": round(gpu_energy, 1) if has_gpu and energy else None,
            "cpu_energy_j": round(cpu_energy, 1) if energy else None,
        })
    if rows:
        rows[-1]["stage"] = "done"
    return rows


def _results(params: dict, epochs: list[dict], resources: list[dict], has_gpu: bool,
             energy: bool) -> dict:
    """The summary's results block, computed from the epoch rows and the time series."""
    def col(rows, name):
        return np.array([r[name] for r in rows if r[name] is not None], dtype=float)

    train = [r for r in resources if r["stage"] == "train"] or resources
    epoch_s = col(epochs, "epoch_s")
    acc = col(epochs, "test_acc")
    cuda = params["device"] == "cuda"
    gpu_util = col(train, "gpu_util_pct")
    gpu_power = col(train, "gpu_power_w")
    timed = float(epoch_s.sum())
    out = {
        "epoch_s_median": float(np.median(epoch_s)), "epoch_s_mean": float(epoch_s.mean()),
        "train_s_median": float(np.median(col(epochs, "train_s"))),
        "total_s": timed,
        "data_s": float(col(epochs, "data_s").sum()),
        "forward_s": float(col(epochs, "forward_s").sum()),
        "backward_s": float(col(epochs, "backward_s").sum()),
        "optimizer_s": float(col(epochs, "optimizer_s").sum()),
        "eval_s": float(col(epochs, "eval_s").sum()),
        "samples_per_s": float(np.median(col(epochs, "samples_per_s"))),
        "disturbed_epochs": 0,
        "train_flops_per_sample": FLOPS_PER_SAMPLE,
        "achieved_gflops": FLOPS_PER_SAMPLE * float(np.median(col(epochs, "samples_per_s")))
        / 1e9,
        "steps_per_epoch": int(epochs[0]["steps"]),
        "final_test_acc": float(acc[-1]), "best_test_acc": float(acc.max()),
        "best_epoch": int(np.argmax(acc)) + 1,
        "final_test_loss": float(epochs[-1]["test_loss"]),
        "final_train_loss": float(epochs[-1]["train_loss"]),
        "peak_rss_mb": float(col(resources, "rss_mb").max()),
        "peak_cuda_mem_mb": 1480.0 + params["batch_size"] * 0.85 if cuda else None,
        "peak_device_mem_mb": 1480.0 + params["batch_size"] * 0.85 if cuda else None,
        "cpu_pct_mean": float(col(train, "proc_cpu_pct").mean()),
        "cpu_pct_peak": float(col(resources, "proc_cpu_pct").max()),
        "gpu_util_mean": float(gpu_util.mean()) if has_gpu and gpu_util.size else None,
        "gpu_util_peak": float(gpu_util.max()) if has_gpu and gpu_util.size else None,
        "gpu_power_mean_w": float(gpu_power.mean()) if has_gpu and gpu_power.size else None,
        "gpu_energy_j": (float(gpu_power.mean()) * timed
                         if has_gpu and energy and gpu_power.size else None),
        "cpu_energy_j": (125.0 if not cuda else 48.0) * timed if energy else None,
    }
    return {k: (round(v, 6) if isinstance(v, float) else v) for k, v in out.items()}


def _env_capture(machine: Machine, hostname: str, has_gpu: bool) -> dict:
    env = {
        "hostname": hostname, "os": "Linux-6.8.0-52-generic-x86_64-with-glibc2.36",
        "python": "3.11.2", "torch": "2.14.1", "cuda": "12.8", "cudnn": "91002",
        "cpu_model": machine.cpu_model, "cpu_cores_logical": machine.cores_logical,
        "cpu_cores_physical": machine.cores_physical, "torch_threads": machine.cores_physical,
        "memory_gb": machine.memory_gb,
        "gpu_name": machine.gpu_name if has_gpu else "",
        "gpu_count": 1 if has_gpu else 0,
        "gpu_memory_gb": machine.gpu_memory_gb if has_gpu else None,
        "gpu_driver": "570.124.06" if has_gpu else "",
        "git_revision": "42bbbe9", "mnistbench": __version__, "container": "",
        "code_digest": "c0de0000d16e5700", "workflow_digest": "",
        "container_image_id": "", "slurm_job_id": "", "slurm_partition": "",
        "slurm_node": "", "launch": "fork-server",
    }
    # The hardware record (mnistbench.measure.hardware).
    env.update({
        "gpu_backend": "cuda" if has_gpu else "", "hip": "",
        "cpu_capability": machine.cpu_capability, "cpu_flags": machine.cpu_flags,
        "cpu_bf16": "native" if {"avx512_bf16", "amx_bf16"} & set(machine.cpu_flags.split())
        else "emulated",
        "onednn": "3.12.0", "mkl": "2024.2", "cpu_governor": "performance", "cpu_turbo": "on",
    })
    # The CPU runtime (mnistbench.core.cpuruntime), as a stock machine records it.
    for key, value in (("allocator_loaded", "glibc"), ("allocator_library", ""),
                       ("malloc_tuning", ""), ("interop_threads", "2"), ("omp_settings", ""),
                       ("cpu_affinity", "")):
        env.setdefault(key, value)
    assert set(env) == set(schema.ENV_FIELDS), set(env) ^ set(schema.ENV_FIELDS)
    return {key: env[key] for key in schema.ENV_FIELDS}


def _iso(unix: float) -> str:
    from datetime import datetime

    return datetime.fromtimestamp(unix, tz=UTC).isoformat(timespec="seconds")


#: FLOPs of one training sample of the blog's network (mnistbench.core.network).
FLOPS_PER_SAMPLE = 71_565_312


def _write_csv(path: Path, columns: Mapping[str, object], rows: list[dict]) -> None:
    with path.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(columns))
        writer.writeheader()
        for row in rows:
            writer.writerow({k: ("" if v is None else v) for k, v in row.items()})


# ---------------------------------------------------------------------------------------------
# In-memory additions to aggregated tables, for columns the summary schema does not carry yet:
# the tips experiment's ``tip`` lever and the per-cell system load (``system_load_mean``,
# ``busy``). They return new :class:`mnistbench.results.aggregate.Tables`; render them with
# ``mnistbench.report.render.write_report``.

#: Epoch-time speed-up of each fake tip over the baseline, per device (tips missing on a
#: device are not run there: pin_memory, cudnn.benchmark and amp-fp16 on the CPU).
TIP_SPEEDUPS = {
    "cpu": {"baseline": 1.0, "workers=4": 1.32, "workers=cores": 1.36, "amp-bf16": 0.97,
            "max-batch": 1.45, "resident": 1.41, "compile": 1.12, "tuned": 1.55,
            "allocator": 1.01, "all": 1.7},
    "cuda": {"baseline": 1.0, "pin_memory": 1.08, "workers=4": 2.1, "workers=cores": 2.3,
             "amp-bf16": 1.15, "amp-fp16": 1.2, "cudnn.benchmark": 0.93, "max-batch": 3.5,
             "resident": 3.3, "compile": 1.1, "tuned": 3.6, "allocator": 1.0,
             "all": 4.2},
}


def with_tips(tables, *, env: str | None = None, repeats: int = 3, seed: int = 0,
              speedups: Mapping[str, Mapping[str, float]] | None = None,
              overrides: Mapping[tuple[str, str], tuple[str, str]] | None = None):
    """``tables`` with fake cells of the ``tips`` experiment in the summary: per device of
    ``speedups`` (default :data:`TIP_SPEEDUPS`) that the env has cells of, one cell per tip and
    repeat, copied from the env's convergence cell (dataloader, fp32, batch 128) with the
    ``tip`` column set, the epoch times divided by the tip's speed-up (2 % noise) and the test
    accuracy within 0.05 points of it. A device whose template cell is not ok gives tips with
    its status and reason; ``overrides``: (device, tip) -> (status, reason)."""
    import pandas as pd

    from mnistbench.results import aggregate

    summary = tables.summary.copy()  # as read from CSV: one block per column
    env = env or sorted(summary["env"].unique())[0]
    rng = np.random.default_rng(seed)
    rows = []
    for device, tips in (speedups or TIP_SPEEDUPS).items():
        pool = summary[(summary["env"] == env) & (summary["device"] == device)]
        if pool.empty:
            continue
        blog = pool[(pool["experiment"] == "convergence") & (pool["loader"] == "dataloader")
                    & (pool["precision"] == "fp32")]
        template = (blog if not blog.empty else pool).iloc[0].to_dict()
        for tip, speedup in tips.items():
            status, reason = (overrides or {}).get((device, tip),
                                                   (template["status"], template["reason"]))
            for repeat in range(repeats):
                row = dict(template)
                factor = float(speedup) * float(rng.lognormal(0, 0.02))
                name = "".join(c if c.isalnum() else "-" for c in tip)
                row.update(experiment="tips", cell=f"{device}-{name}-r{repeat}", repeat=repeat,
                           tip=tip, status=status, reason=reason)
                if status == "ok" and template["status"] == "ok":
                    for column in ("epoch_s_median", "epoch_s_mean", "train_s_median",
                                   "total_s", "timed_s", "data_s", "forward_s", "backward_s",
                                   "optimizer_s", "eval_s"):
                        row[column] = float(template[column]) / factor
                    row["samples_per_s"] = float(template["samples_per_s"]) * factor
                    row["final_test_acc"] = float(template["final_test_acc"]) + float(
                        rng.normal(0, 0.03))
                elif status != "ok":
                    for column in schema.RESULT_FIELDS:
                        row[column] = None
                rows.append(row)
    if "tip" not in summary.columns:  # tables of a summary before schema version 3
        summary = summary.assign(tip=None)
    tips_frame = pd.DataFrame(rows, columns=list(summary.columns))
    merged = pd.concat([summary, tips_frame], ignore_index=True)
    return aggregate.Tables(merged, tables.epochs, tables.resources)


def with_load(tables, busy: Mapping[tuple[str, str, str], float] | None = None, *,
              quiet_load: float = 8.0, as_text: bool = True):
    """``tables`` with the per-cell system-load columns the summary will carry:
    ``system_load_mean`` (machine-wide CPU busy %, 100 = all cores) and ``busy`` (others used
    more than 25 % of the machine). ``busy``: (env, experiment, cell) -> that cell's load (it
    is flagged busy); every other cell gets ``quiet_load`` and is not. ``as_text``: ``busy``
    as the CSV reads it back ("True"/"False"), else as bools."""
    busy = dict(busy or {})
    summary = tables.summary.copy()  # as read from CSV: one block per column
    keys = list(zip(summary["env"], summary["experiment"], summary["cell"], strict=True))
    flags = [key in busy for key in keys]
    summary = summary.assign(
        system_load_mean=[busy.get(key, quiet_load) for key in keys],
        busy=[str(f) for f in flags] if as_text else flags)
    from mnistbench.results import aggregate

    return aggregate.Tables(summary, tables.epochs, tables.resources)
