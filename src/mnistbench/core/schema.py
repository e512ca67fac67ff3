"""Every output column and summary field, with its unit: the one place the trainer, the
aggregator, the workflow and the report read them from.

A cell's folder holds three files:

- ``summary.json``: ``{"schema_version", "status", "reason", "params", "env", "timing",
  "results"}``; ``params`` keys are :data:`PARAM_FIELDS`, ``results`` keys are
  :data:`RESULT_FIELDS`, ``timing`` keys are :data:`TIMING_FIELDS`, ``env`` keys are
  :data:`ENV_FIELDS`; ``sources`` says where energy figures came from (``gpu_energy``:
  nvml-counter, nvml-power-integral, amdsmi-counter, amdsmi-power-integral or null;
  ``cpu_energy``: rapl or null) and which Adam
  kernel ran (``adam``: torch._fused_adam_ or torch.optim.Adam(fused=True); ``adam_fallback``:
  why the private kernel was not used, or null).
- ``epochs.csv``: one row per timed epoch, columns :data:`EPOCH_COLUMNS`.
- ``resources.csv``: the background sampler's time series, columns :data:`RESOURCE_COLUMNS`.

The aggregate step flattens every ``summary.json`` into one row of ``results/summary.csv``
(:func:`summary_columns`), and concatenates the CSVs with the cell's identity columns
(:data:`ID_COLUMNS`) in front.

An environment's folder also holds the device's measured limit (the workflow's ``peak``
step, ``mnistbench peak``): ``runs/{env}/peak/{device}.json`` (:data:`PEAK_DIR`,
:func:`peak_file`), an object of :data:`PEAK_FIELDS` whose ``rows`` are
:data:`PEAK_ROW_FIELDS`. The aggregate sets each ok cell of that environment and device
against it: the columns :data:`LIMIT_FIELDS` of summary.csv, by the rule of
:func:`best_peak_row`.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from typing import Any

#: Version of summary.json. A later version only adds fields: every field added after
#: version 1 is listed in :data:`ADDED_IN`, and a summary of an older version is read with those
#: fields empty, so results of machines running an older mnistbench still merge.
SCHEMA_VERSION = 5

#: Field -> the schema version that added it (fields not listed are in version 1).
ADDED_IN: dict[str, int] = {
    "time_limit": 2,
    "container_image_id": 2,
    "launch": 2,
    # Device backends and the hardware record (issue 12).
    "bf16_path": 3,
    "timing_method": 3,
    "peak_device_mem_mb": 3,
    **dict.fromkeys(("gpu_sm_clock_start_mhz", "gpu_sm_clock_end_mhz", "gpu_mem_clock_start_mhz",
                     "gpu_mem_clock_end_mhz", "gpu_power_limit_start_w", "gpu_power_limit_end_w",
                     "gpu_throttle_start", "gpu_throttle_end"), 3),
    **dict.fromkeys(("gpu_backend", "hip", "cpu_capability", "cpu_flags", "cpu_bf16", "onednn",
                     "mkl", "cpu_governor", "cpu_turbo"), 3),
    "allocator": 3,
    "allocator_loaded": 3,
    "implementation": 3,
    "cudnn_benchmark": 3,
    "max_batch": 3,
    "max_batch_stop": 3,
    "tip": 3,
    "system_load_mean": 3,
    "others_load_mean": 3,
    "busy": 3,
    "allocator_library": 3,
    "malloc_tuning": 3,
    "interop_threads": 3,
    "omp_settings": 3,
    "cpu_affinity": 3,
    # Provenance by digest (mnistbench.core.provenance), disturbed epochs, FLOPs.
    **dict.fromkeys(("code_digest", "workflow_digest", "width", "disturbed_epochs",
                     "train_flops_per_sample", "achieved_gflops", "others_load_pct",
                     "disturbed"), 4),
    # summary.csv columns joined from the environment's measured limit (issue 25): not
    # fields of summary.json, so no new version; a table written before them reads them empty.
    **dict.fromkeys(("limit_gflops", "limit_kernel", "limit_share_pct", "limit_source"), 4),
    # The threads a cell asked for and the DataLoader's own (issue 38: the threads experiment).
    **dict.fromkeys(("threads_asked", "loader_threads"), 5),
    # The whole-step capture and the math that ran (issue 39).
    **dict.fromkeys(("phase_split", "math_tf32_matmul", "math_tf32_cudnn",
                     "math_matmul_precision", "math_cudnn_benchmark", "math_deterministic",
                     "math_conv_kernels"), 5),
    "limit_note": 5,
}

#: Cell statuses. ``ok``: ran to the end. ``oom``: the device ran out of memory.
#: ``unavailable``: the device does not exist on this machine. ``failed``: any other error.
STATUSES = ("ok", "oom", "unavailable", "failed")



class ProblemKind(enum.StrEnum):
    """Why a cell keeps results from being published (``mnistbench publish``), in the order
    refusals and a publication's manifest list them; each is waived by ``--allow-KIND`` and
    is a key of the manifest's ``checks``. Here, in the contract, so that the command and
    the report name them without importing the publish package."""

    #: A cell of the study's matrix that never ran, or an incomplete cell folder.
    MISSING = "missing"
    #: A cell with status failed, or an invalid one.
    FAILED = "failed"
    #: A cell measured by other code than this checkout's.
    STALE = "stale"


#: Process exit codes of ``mnistbench train`` per status (2 is a usage error).
EXIT_CODES = {"ok": 0, "unavailable": 10, "oom": 11, "failed": 12}

#: Files a cell writes into its ``--out`` folder.
SUMMARY_FILE = "summary.json"
EPOCHS_FILE = "epochs.csv"
RESOURCES_FILE = "resources.csv"

# name -> (unit, description). Unit "" means dimensionless / text.
PARAM_FIELDS: dict[str, tuple[str, str]] = {
    "env": ("", "name of the environment (host and runtime) that ran the cell"),
    "experiment": ("", "experiment the cell belongs to: convergence, sweep, tips, scale or "
                   "capture"),
    "cell": ("", "cell id, unique within env and experiment"),
    "repeat": ("", "repeat index, 0-based"),
    "device": ("", "cpu, cuda (NVIDIA CUDA or AMD ROCm/HIP: env.gpu_backend), xpu (Intel) or "
               "mps (Apple)"),
    "precision": ("", "fp32, tf32, bf16 or fp16"),
    "loader": ("", "dataloader (torch DataLoader + transform) or resident (tensor on device)"),
    "batch_size": ("samples", "training batch size"),
    "epochs": ("", "number of timed epochs"),
    "lr": ("", "Adam learning rate"),
    "seed": ("", "seed of initialisation, shuffling and dropout"),
    "threads": ("", "torch intra-op CPU threads used"),
    # The threads asked for and the DataLoader's own (issue 38: the threads experiment).
    "threads_asked": ("", "torch intra-op CPU threads asked for (--threads; 0: torch's "
                      "default, one per physical core); threads is what the cell got"),
    "loader_threads": ("", "threads the DataLoader's own work ran on: 0 without a DataLoader "
                       "(data held on the device), 1 without worker processes (the training "
                       "process's main thread, between steps), else one per worker process "
                       "(PyTorch gives each worker 1 intra-op thread)"),
    "workers": ("", "DataLoader worker processes (dataloader loader only)"),
    "pin_memory": ("", "DataLoader pin_memory (dataloader loader only)"),
    "compile": ("", "torch.compile mode, empty for eager: default, reduce-overhead, max-autotune"),
    "cuda_graphs": ("", "whether CUDA graphs were used (torch.compile reduce-overhead, or the "
                    "tuned-graph implementation, on CUDA)"),
    "bf16_path": ("", "how a bf16 cell's bf16 ran: native (bf16 hardware: AVX512-BF16/AMX on a "
                  "CPU, bf16 tensor cores on a GPU), emulated (bf16 numerics on fp32 units), "
                  "unknown (no query says: mps); empty for other precisions and for cells "
                  "that never reached the device"),
    "warmup_steps": ("steps", "untimed warm-up steps before the first timed epoch"),
    "max_steps": ("steps", "cap on training steps per epoch (0: no cap)"),
    "train_limit": ("samples", "training samples used (0: all 60000)"),
    "test_limit": ("samples", "test samples used (0: all 10000)"),
    "eval_batch_size": ("samples", "batch size of the test-set evaluation (default: batch_size)"),
    "sample_interval": ("s", "resource sampler period"),
    "time_limit": ("s", "wall-clock limit of the warm-up and timed epochs (0: none); a cell "
                   "that reaches it is failed"),
    "allocator": ("", "memory allocator asked for: auto (the fastest installed), glibc, "
                  "glibc-tuned, jemalloc, tcmalloc; env.allocator_loaded is what ran"),
    "implementation": ("", "tuned (this project's formulation), stock (the blog's code as "
                       "written: ReferenceNet, nn.Dropout, torch.optim.Adam) or tuned-graph "
                       "(tuned, its whole step one CUDA graph replayed per step: "
                       "mnistbench.measure.capture; cuda_graphs says whether graphs ran)"),
    "cudnn_benchmark": ("", "torch.backends.cudnn.benchmark (CUDA only; recorded everywhere)"),
    "max_batch": ("", "whether the cell found its batch size itself (the largest that fits; "
                  "batch_size is what it found)"),
    "max_batch_stop": ("", "what ended that search: out of memory, the CPU memory budget or "
                       "the cap (options.CPU_MAX_BATCH_CAP samples on a CPU, "
                       "options.MAX_BATCH_CAP elsewhere, or the training samples)"),
    "tip": ("", "the tips experiment's lever the cell measures (mnistbench.core.study.TIPS), empty "
            "in the other experiments"),
    "width": ("", "channel width multiplier of the network's convolutions (1: the blog's "
              "network; mnistbench.core.network)"),
    # The math settings that ran (issue 39), read back from torch after the model was built:
    # what ran, not what was asked; empty for a cell that never reached its device.
    "math_tf32_matmul": ("", "torch.backends.cuda.matmul.allow_tf32 as the cell ran (TF32 "
                         "tensor cores for fp32 matmuls on CUDA)"),
    "math_tf32_cudnn": ("", "torch.backends.cudnn.allow_tf32 as the cell ran (TF32 for fp32 "
                        "convolutions on CUDA)"),
    "math_matmul_precision": ("", "torch.get_float32_matmul_precision(): highest, high or "
                              "medium"),
    "math_cudnn_benchmark": ("", "torch.backends.cudnn.benchmark as the cell ran (cuDNN "
                             "autotuning on CUDA)"),
    "math_deterministic": ("", "torch.are_deterministic_algorithms_enabled() and "
                           "torch.backends.cudnn.deterministic, as det=on|off "
                           "cudnn=on|off"),
    "math_conv_kernels": ("", "the device kernels one warm-up training step of the cell "
                          "launched for its convolutions and matmuls (torch.profiler, names "
                          "joined by ; e.g. cuDNN's implicit-GEMM, Winograd or FFT kernels, "
                          "which show the algorithm and its math mode); empty where the "
                          "profiler shows none (a CPU names oneDNN's ops)"),
}

ENV_FIELDS: dict[str, tuple[str, str]] = {
    "hostname": ("", "host name"),
    "os": ("", "operating system and kernel"),
    "python": ("", "Python version"),
    "torch": ("", "PyTorch version"),
    "cuda": ("", "CUDA version torch was built with (empty when none)"),
    "cudnn": ("", "cuDNN version (empty when none)"),
    "hip": ("", "HIP (ROCm) version torch was built with (empty when none)"),
    "cpu_model": ("", "CPU model name"),
    "cpu_capability": ("", "the vector ISA torch dispatches to "
                       "(torch.backends.cpu.get_cpu_capability()): e.g. AVX2, AVX512, SVE256"),
    "cpu_flags": ("", "CPU flags that decide torch's kernels, those present: avx2 avx512f "
                  "avx512_bf16 avx512_fp16 amx_tile amx_bf16 amx_int8 amx_fp16 sve sve2 bf16"),
    "cpu_bf16": ("", "bf16 on this CPU: native (oneDNN's AVX512-BF16/AMX kernels) or emulated "
                 "(bf16-rounded operands on fp32 kernels, mnistbench.measure.model)"),
    "onednn": ("", "oneDNN version torch was built with (torch.__config__)"),
    "mkl": ("", "MKL version torch was built with (empty when none)"),
    "cpu_governor": ("", "cpufreq scaling governor(s), empty where not exposed (VMs)"),
    "cpu_turbo": ("", "turbo/boost: on or off, empty where not readable"),
    "cpu_cores_logical": ("", "logical CPU cores"),
    "cpu_cores_physical": ("", "physical CPU cores"),
    "torch_threads": ("", "torch.get_num_threads() at capture"),
    "memory_gb": ("GiB", "total system memory"),
    "gpu_name": ("", "GPU model (empty when none)"),
    "gpu_backend": ("", "the accelerator torch sees: cuda (NVIDIA), rocm (AMD ROCm/HIP, torch's "
                    "cuda device type), xpu (Intel), mps (Apple); empty when none"),
    "gpu_count": ("", "number of accelerator devices torch sees (of gpu_backend)"),
    "gpu_memory_gb": ("GiB", "total memory of GPU 0"),
    "gpu_driver": ("", "NVIDIA driver version"),
    "git_revision": ("", "git revision of the project (with -dirty when modified)"),
    "code_digest": ("", "digest of the measuring code that ran (core, data, measure, without "
                    "comments and docstrings) and of the installed torch, torchvision, numpy, "
                    "pillow, psutil and nvidia-ml-py (mnistbench.core.provenance)"),
    "workflow_digest": ("", "digest of the workflow's bench rule that started the cell "
                        "(empty: started by hand)"),
    "mnistbench": ("", "mnistbench version"),
    "container": ("", "container image name when run in one"),
    "container_image_id": ("", "ID (sha256:...) of the container image, when the workflow's "
                           "docker runner started the cell"),
    "slurm_job_id": ("", "SLURM job id when run as a SLURM job"),
    "slurm_partition": ("", "SLURM partition"),
    "slurm_node": ("", "SLURM node name"),
    "launch": ("", "how the cell's process started: exec (a new process) or fork-server "
               "(forked from a process that had only imported torch; see forkserver.py)"),
    # The CPU runtime as it really was (mnistbench.core.cpuruntime).
    "allocator_loaded": ("", "memory allocator as loaded, read from the process's maps: "
                         "glibc, glibc-tuned, jemalloc or tcmalloc"),
    "allocator_library": ("", "the preloaded allocator library (empty for glibc)"),
    "malloc_tuning": ("", "mallopt tuning applied (glibc-tuned), empty when none"),
    "interop_threads": ("", "torch.get_num_interop_threads()"),
    "omp_settings": ("", "OpenMP / MKL variables set for the cell (OMP_*, KMP_*, ...)"),
    "cpu_affinity": ("", "CPUs the cell's process may run on (sched_getaffinity), e.g. 0-1"),
}

TIMING_FIELDS: dict[str, tuple[str, str]] = {
    "started_at": ("ISO 8601", "wall-clock time the cell process started"),
    "ended_at": ("ISO 8601", "wall-clock time the cell finished writing"),
    "start_unix": ("s", "started_at as Unix time"),
    "end_unix": ("s", "ended_at as Unix time"),
    "startup_s": ("s", "process start to the beginning of data loading (imports, env capture)"),
    "data_load_s": ("s", "reading MNIST and building the loaders"),
    "warmup_s": ("s", "untimed warm-up: autotuning, compilation, first-touch allocation"),
    "timed_s": ("s", "sum of the timed epochs' wall times"),
    "timing_method": ("", "how the phases were timed: host-clock (cpu), cuda-events, "
                      "device-events (the backend's timing events), sync+host-clock "
                      "(synchronise, then the host clock: a backend without events). With "
                      "events, a phase is the device's time between two marks: on a loop the "
                      "host cannot keep fed (small steps on a fast GPU) the device reaches "
                      "each mark soon after the host queued it, so a phase then measures the "
                      "host's issue time of its kernels, not their device time"),
    "phase_split": ("", "which phases the epoch was split into: per-step (data, forward, "
                    "backward, optimizer marked in every step, then eval) or graph (the "
                    "tuned-graph cell: data is the epoch's shuffle order drawn and copied, "
                    "the steps replay as one CUDA graph each, so forward, backward and "
                    "optimizer are empty, never estimated, and train_s is data plus the "
                    "replays); empty in cells of schema version 4 or older (per-step)"),
    "overhead_s": ("s", "process wall time outside the timed epochs and the warm-up: startup, "
                   "data load, model build, writing"),
}

RESULT_FIELDS: dict[str, tuple[str, str]] = {
    "epoch_s_median": ("s", "median wall time of a timed epoch (train + eval), over the epochs "
                       "not disturbed (disturbed_epochs)"),
    "epoch_s_mean": ("s", "mean wall time of a timed epoch (train + eval), over the epochs not "
                     "disturbed"),
    "train_s_median": ("s", "median wall time of an epoch's training part, over the epochs not "
                       "disturbed"),
    "total_s": ("s", "the timed epochs' wall time, each disturbed epoch counted as the median "
                "of the others"),
    "disturbed_epochs": ("epochs", "timed epochs flagged disturbed in epochs.csv (other "
                         "processes' load, or far outside the cell's spread): left out of the "
                         "medians, the total and the costs"),
    "data_s": ("s", "total time fetching batches and copying them to the device (phases: "
               "the host clock on a CPU; on an accelerator the device's time between marks, "
               "which on a host-bound loop is the host's issue time: timing_method)"),
    "forward_s": ("s", "total forward pass time, loss included; empty where the phases were "
                  "not split (phase_split graph)"),
    "backward_s": ("s", "total backward pass time; empty where not split (phase_split graph)"),
    "optimizer_s": ("s", "total optimizer step time; empty where not split (phase_split "
                    "graph)"),
    "eval_s": ("s", "total test-set evaluation time"),
    "samples_per_s": ("samples/s", "training samples per second of training time (median "
                      "over the epochs not disturbed)"),
    "train_flops_per_sample": ("FLOP", "FLOPs of one training sample at the cell's width "
                               "(mnistbench.core.network: convolutions and linear layers, "
                               "forward and backward)"),
    "achieved_gflops": ("GFLOP/s", "train_flops_per_sample x samples_per_s: the training "
                        "arithmetic this cell sustained"),
    "steps_per_epoch": ("steps", "training steps in one epoch"),
    "final_test_acc": ("%", "test accuracy after the last epoch"),
    "best_test_acc": ("%", "best test accuracy over the epochs"),
    "best_epoch": ("", "epoch (1-based) of the best test accuracy"),
    "final_test_loss": ("", "mean test cross-entropy after the last epoch"),
    "final_train_loss": ("", "mean training cross-entropy of the last epoch"),
    "peak_rss_mb": ("MiB", "peak resident set size of the process"),
    "peak_cuda_mem_mb": ("MiB", "peak CUDA memory allocated by torch"),
    "peak_device_mem_mb": ("MiB", "peak accelerator memory allocated by torch "
                           "(torch.accelerator.max_memory_allocated); empty on cpu and mps"),
    "cpu_pct_mean": ("%", "mean process CPU use (100 = one core)"),
    "system_load_mean": ("%", "mean machine-wide CPU use over the timed epochs (100 = every "
                         "core busy)"),
    "others_load_mean": ("%", "the part of system_load_mean other processes used (in % of all "
                         "cores)"),
    "busy": ("", "whether the cell was timed on a busy machine: others_load_mean above 25 %"),
    "cpu_pct_peak": ("%", "peak process CPU use (100 = one core)"),
    "gpu_util_mean": ("%", "mean GPU utilisation (NVML)"),
    "gpu_util_peak": ("%", "peak GPU utilisation (NVML)"),
    "gpu_power_mean_w": ("W", "mean GPU board power (NVML)"),
    "gpu_energy_j": ("J", "GPU energy over the timed epochs (NVML or AMD SMI counter)"),
    "cpu_energy_j": ("J", "CPU package energy over the timed epochs (RAPL)"),
    # The GPU's state when the timed epochs start and end (NVML; AMD SMI): empty without one.
    "gpu_sm_clock_start_mhz": ("MHz", "GPU graphics (SM) clock when the timed epochs start"),
    "gpu_sm_clock_end_mhz": ("MHz", "GPU graphics (SM) clock when the timed epochs end"),
    "gpu_mem_clock_start_mhz": ("MHz", "GPU memory clock when the timed epochs start"),
    "gpu_mem_clock_end_mhz": ("MHz", "GPU memory clock when the timed epochs end"),
    "gpu_power_limit_start_w": ("W", "GPU enforced power limit when the timed epochs start"),
    "gpu_power_limit_end_w": ("W", "GPU enforced power limit when the timed epochs end"),
    "gpu_throttle_start": ("", "GPU clock throttle reasons when the timed epochs start, joined "
                           "by +: none, idle, sw_power_cap, hw_slowdown, sw_thermal, "
                           "hw_thermal, hw_power_brake, ... (AMD: throttle_status=N)"),
    "gpu_throttle_end": ("", "GPU clock throttle reasons when the timed epochs end"),
}

EPOCH_COLUMNS: dict[str, tuple[str, str]] = {
    "epoch": ("", "epoch number, 1-based"),
    "steps": ("steps", "training steps in the epoch"),
    "samples": ("samples", "training samples in the epoch"),
    "data_s": ("s", "fetching batches and host-to-device copy (a graph cell: the epoch's "
               "shuffle order). Every phase on an accelerator is the device's time between "
               "two event marks: where the host cannot keep the device fed, that is the "
               "host's issue time of the phase's kernels, not their device time "
               "(timing_method)"),
    "forward_s": ("s", "forward pass and loss; empty where a CUDA graph holds the step "
                  "(phase_split graph)"),
    "backward_s": ("s", "backward pass; empty where a CUDA graph holds the step"),
    "optimizer_s": ("s", "optimizer step (and zeroing gradients); empty where a CUDA graph "
                    "holds the step"),
    "train_s": ("s", "wall time of the training part"),
    "eval_s": ("s", "test-set evaluation"),
    "epoch_s": ("s", "wall time of the whole epoch: train_s + eval_s"),
    "train_loss": ("", "mean training cross-entropy"),
    "test_loss": ("", "mean test cross-entropy"),
    "test_acc": ("%", "test accuracy"),
    "samples_per_s": ("samples/s", "samples / train_s"),
    "others_load_pct": ("%", "share of all cores other processes used during the epoch (the "
                        "sampler's system load less the cell's own)"),
    "disturbed": ("", "why the epoch counts as disturbed (load: others above 25 %; outlier: "
                  "far slower than the cell's other epochs; both joined by +), empty when "
                  "quiet (mnistbench.measure.disturbance)"),
}

#: Phases of a training step, in order, then evaluation.
PHASES = ("data", "forward", "backward", "optimizer", "eval")
#: What ``timing.phase_split`` records: every phase of every step marked, or the steps
#: replayed as one CUDA graph (mnistbench.measure.capture), whose phases
#: :data:`GRAPH_UNSPLIT` cannot be told apart: empty in its summary and epoch rows.
PHASE_SPLIT_STEPS = "per-step"
PHASE_SPLIT_GRAPH = "graph"
GRAPH_UNSPLIT = ("forward", "backward", "optimizer")

RESOURCE_COLUMNS: dict[str, tuple[str, str]] = {
    "t_s": ("s", "time since the sampler started"),
    "stage": ("", "what the cell was doing: setup, warmup, train or done"),
    "proc_cpu_pct": ("%", "process CPU use incl. children (100 = one core)"),
    "sys_cpu_pct": ("%", "whole-system CPU use (100 = all cores)"),
    "rss_mb": ("MiB", "resident set size of the process and its children"),
    "gpu_util_pct": ("%", "GPU utilisation (NVML), empty without a GPU"),
    "gpu_mem_mb": ("MiB", "GPU memory used (NVML)"),
    "gpu_power_w": ("W", "GPU board power (NVML)"),
    "gpu_energy_j": ("J", "GPU energy since the sampler started (NVML counter)"),
    "cpu_energy_j": ("J", "CPU package energy since the sampler started (RAPL)"),
}

#: Columns that identify a cell in the aggregated tables, in front of every row.
ID_COLUMNS = ("env", "experiment", "cell")

#: Columns the aggregate step derives from a cell's fields (mnistbench.results.aggregate), after the
#: environment's in summary.csv.
DERIVED_FIELDS: dict[str, tuple[str, str]] = {
    "hardware": ("", "the hardware a cell ran on, as the report labels it: the accelerator "
                 "and its backend (e.g. NVIDIA H100 · CUDA, AMD MI300X · ROCm/HIP), or the "
                 "CPU model and the ISA torch dispatches to with its bf16 flags (e.g. AMD "
                 "EPYC 7B13 · AVX2); machines that differ in any of these differ here"),
}


#: Columns the aggregate step joins to each ok cell from its environment's measured limit of
#: its device (``runs/{env}/peak/{device}.json``; mnistbench.results.aggregate), after the
#: derived ones in summary.csv; empty where there is no measured limit at the cell's precision.
LIMIT_FIELDS: dict[str, tuple[str, str]] = {
    "limit_gflops": ("GFLOP/s", "the measured limit at the cell's precision: the highest "
                     "GFLOP/s of the kernels the peak step timed on this device in this "
                     "environment (best_peak_row), never a datasheet figure"),
    "limit_kernel": ("", "the kernel and shape that gave limit_gflops, e.g. matmul 1024x1024 "
                     "@ 1024x1024"),
    "limit_share_pct": ("%", "achieved_gflops / limit_gflops x 100: the share of the measured "
                        "limit the cell's training sustained (may pass 100 where the "
                        "training's own kernels beat the timed ones)"),
    "limit_source": ("", "where limit_gflops came from, e.g. measured: runs/ENV/peak/cpu.json, "
                     "2 threads"),
    "limit_note": ("", "why a cell ran past 100 % of its measured limit, from what it "
                   "recorded (TF32 on in an fp32 cell, Winograd or FFT convolution kernels "
                   "that do fewer multiplications than the nominal FLOPs count, or kernels "
                   "faster than those the peak step timed); empty at or below 100 %"),
}

#: The folder of an environment that holds its measured limits: ``runs/{env}/peak/``.
PEAK_DIR = "peak"
#: The highest measured limit or training rate believed, in GFLOP/s: 10 PFLOP/s, above any
#: single device's datasheet peak at any precision this study runs (an H200's dense fp16 is
#: about 1 PFLOP/s). No datasheet table is kept, so this one bound holds for every device
#: (a CPU's is tighter: mnistbench.results.validate.cpu_ceiling_gflops).
MAX_GFLOPS = 1e7
#: Statuses of a measured limit: ``ok`` (measured), ``unavailable`` (the device does not
#: exist here), ``failed`` (the measurement did not finish: ``reason`` says why).
PEAK_STATUSES = ("ok", "unavailable", "failed")
#: The top-level fields of a peak record (``mnistbench peak --out FILE``).
PEAK_FIELDS: dict[str, tuple[str, str]] = {
    "status": ("", "ok, unavailable or failed (PEAK_STATUSES)"),
    "reason": ("", "why the status is not ok (empty when ok)"),
    "device": ("", "the device measured: cpu, cuda, xpu or mps (the file's name)"),
    "threads": ("", "torch intra-op CPU threads the kernels ran with (null when not ok)"),
    "torch": ("", "PyTorch version (null when not ok)"),
    "source": ("", "how the figures were obtained (measured here, never a datasheet)"),
    "rows": ("", "one row per kernel and precision (PEAK_ROW_FIELDS); none when not ok"),
}
#: The fields of one row of a peak record: one kernel timed at one precision.
PEAK_ROW_FIELDS: dict[str, tuple[str, str]] = {
    "kernel": ("", "the kernel timed: matmul (dense n x n product) or conv2 (the network's "
               "second convolution; mnistbench.measure.peak)"),
    "precision": ("", "fp32, tf32, bf16 or fp16"),
    "shape": ("", "the kernel's operands, e.g. 1024x1024 @ 1024x1024"),
    "gflops": ("GFLOP/s", "FLOPs per call x calls / seconds / 1e9"),
    "calls": ("", "timed calls after the warm-up"),
    "seconds": ("s", "wall time of the timed calls, the device synchronised"),
}


def peak_file(device: str) -> str:
    """The name of a device's measured limit in ``runs/{env}/PEAK_DIR/``: ``{device}.json``."""
    return f"{device}.json"


def best_peak_row(rows: Iterable[Mapping[str, Any]], precision: str) -> Mapping[str, Any] | None:
    """The row of ``rows`` (a peak record's) with the highest GFLOP/s at ``precision``, the
    first of equal ones; None when none was measured there. The one rule of a cell's measured
    limit (mnistbench.measure.peak.limit, the aggregate's limit_gflops)."""
    best = None
    for row in rows:
        if row["precision"] == precision and (best is None or row["gflops"] > best["gflops"]):
            best = row
    return best


def summary_columns() -> list[str]:
    """Columns of the aggregated ``summary.csv``, in order: identity, status, params, results,
    timing, environment, derived, the measured limit."""
    cols = [*ID_COLUMNS, "status", "reason"]
    cols += [k for k in PARAM_FIELDS if k not in ID_COLUMNS]
    cols += list(RESULT_FIELDS) + list(TIMING_FIELDS) + list(ENV_FIELDS) + list(DERIVED_FIELDS)
    cols += list(LIMIT_FIELDS)
    return cols


def units() -> dict[str, str]:
    """Unit of every known column name (the first definition wins)."""
    out: dict[str, str] = {}
    for table in (PARAM_FIELDS, RESULT_FIELDS, TIMING_FIELDS, ENV_FIELDS, DERIVED_FIELDS,
                  LIMIT_FIELDS, EPOCH_COLUMNS, RESOURCE_COLUMNS):
        for name, (unit, _) in table.items():
            out.setdefault(name, unit)
    return out


def markdown_tables() -> str:
    """Every table as Markdown, for the README and the report's methodology section."""
    parts = []
    for title, table in (
        ("summary.json params / summary.csv", PARAM_FIELDS),
        ("summary.json results / summary.csv", RESULT_FIELDS),
        ("summary.json timing / summary.csv", TIMING_FIELDS),
        ("summary.json env / summary.csv", ENV_FIELDS),
        ("summary.csv, derived by the aggregate step", DERIVED_FIELDS),
        ("summary.csv, joined from runs/ENV/peak/DEVICE.json by the aggregate step",
         LIMIT_FIELDS),
        ("epochs.csv", EPOCH_COLUMNS),
        ("resources.csv", RESOURCE_COLUMNS),
        ("runs/ENV/peak/DEVICE.json (the measured limit)", PEAK_FIELDS),
        ("runs/ENV/peak/DEVICE.json rows", PEAK_ROW_FIELDS),
    ):
        parts.append(f"#### {title}\n\n| column | unit | meaning |\n|---|---|---|")
        parts += [f"| `{k}` | {u or '-'} | {d} |" for k, (u, d) in table.items()]
        parts.append("")
    return "\n".join(parts)
