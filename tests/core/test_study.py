"""Tests of mnistbench.core.study, the torch-free study model: names (safe names, environment
names, cell ids), the cell matrix built from a validated config, each cell's train flags. The
package's import structure is tests/test_layers.py."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from mnistbench.core import options, study
from mnistbench.core.study import Cell, StudyError, build_matrix, cell_id, environment_name

REPO = Path(__file__).resolve().parents[2]


# ------------------------------------------------------------------------------ names
def test_default_env_name_local_and_containers(monkeypatch):
    """The default name is the short host name plus the runtime and image, sanitised."""
    monkeypatch.setattr(study.socket, "gethostname", lambda: "My Host.example.org")
    monkeypatch.delenv("MNISTBENCH_ENV", raising=False)
    monkeypatch.delenv("MNISTBENCH_CONTAINER", raising=False)
    monkeypatch.delenv("APPTAINER_CONTAINER", raising=False)
    monkeypatch.delenv("SINGULARITY_CONTAINER", raising=False)
    assert environment_name() == "My-Host-local"
    monkeypatch.setenv("MNISTBENCH_CONTAINER", "ghcr.io/me/mnistbench:cpu")
    assert environment_name() == "My-Host-docker-mnistbench-cpu"
    monkeypatch.setenv("APPTAINER_CONTAINER", "/scratch/mnistbench.sif")
    assert environment_name() == "My-Host-apptainer-mnistbench-cpu"


def test_docker_made_up_host_names_become_container(monkeypatch):
    """Inside our image, a host name of 12 hex digits (Docker's container id) names no machine
    and becomes "container"; outside a container the same name is kept."""
    monkeypatch.setattr(study.socket, "gethostname", lambda: "0123abcd4567")
    monkeypatch.delenv("MNISTBENCH_ENV", raising=False)
    monkeypatch.delenv("APPTAINER_CONTAINER", raising=False)
    monkeypatch.delenv("SINGULARITY_CONTAINER", raising=False)
    monkeypatch.delenv("MNISTBENCH_CONTAINER", raising=False)
    assert environment_name() == "0123abcd4567-local"
    monkeypatch.setenv("MNISTBENCH_CONTAINER", "mnistbench:cpu")
    assert environment_name() == "container-docker-mnistbench-cpu"


def test_default_env_name_for_the_docker_runner(monkeypatch):
    """runtime="docker" (the workflow's docker runner) names the host and docker, no image;
    $MNISTBENCH_ENV still wins, and a configured name wins over both."""
    monkeypatch.setattr(study.socket, "gethostname", lambda: "box.example.org")
    monkeypatch.delenv("MNISTBENCH_CONTAINER", raising=False)
    monkeypatch.delenv("MNISTBENCH_ENV", raising=False)
    monkeypatch.delenv("APPTAINER_CONTAINER", raising=False)
    monkeypatch.delenv("SINGULARITY_CONTAINER", raising=False)
    assert environment_name(runtime="docker") == "box-docker"
    assert environment_name(runtime="local") == "box-local"
    monkeypatch.setenv("MNISTBENCH_ENV", "lab")
    assert environment_name(runtime="docker") == "lab"
    assert environment_name("My Lab/GPU", runtime="docker") == "My-Lab-GPU"


def test_default_env_name_prefers_mnistbench_env(monkeypatch):
    """$MNISTBENCH_ENV wins over the host name; one that is not a plain name ('../', '日本語',
    two values that would file under one folder) is refused naming the variable, the value
    and the fix, never renamed."""
    monkeypatch.setenv("MNISTBENCH_CONTAINER", "mnistbench:cpu")
    monkeypatch.setenv("MNISTBENCH_ENV", "laptop-native")
    assert environment_name() == "laptop-native"
    for value, fix in (("../../etc", "set it to 'etc'"), ("../", "a name such as"),
                       ("日本語", "a name such as"), ("lab gpu", "set it to 'lab-gpu'")):
        monkeypatch.setenv("MNISTBENCH_ENV", value)
        with pytest.raises(study.StudyError) as info:
            environment_name()
        assert f"$MNISTBENCH_ENV is {value!r}, which is not a plain folder name" in str(
            info.value) and fix in str(info.value)


def test_a_configured_name_without_safe_characters_names_the_key():
    """config env with no usable character is a StudyError naming the key."""
    with pytest.raises(StudyError, match="invalid config key env"):
        environment_name("///")


def test_partition_env_names():
    """A partition's cells go under slurm-<partition> (config env as the prefix when set,
    "default" for the default partition), or under the node type's own name."""
    assert study.partition_env_name("epyc") == "slurm-epyc"
    assert study.partition_env_name("") == "slurm-default"
    assert study.partition_env_name("gpu a100", prefix="lab") == "lab-gpu-a100"
    assert study.partition_env_name("icelake", name="lab-icelake") == "lab-icelake"
    with pytest.raises(StudyError, match=r"slurm\.node_types\.x\.name"):
        study.partition_env_name("x", name="///")


@pytest.mark.parametrize(("text", "expected"), [
    ("plain-name_1.0", "plain-name_1.0"),
    ("a b/c\\d", "a-b-c-d"),
    ("../../etc/passwd", "etc-passwd"),
    ("..", "unknown"),
    (".hidden", "hidden"),
    ("", "unknown"),
    ("   ", "unknown"),
    ("Ünïcode café", "Unicode-cafe"),
    ("日本語", "unknown"),
    ("nul\x00byte\nnewline", "nul-byte-newline"),
    ("img:tag@sha256", "img-tag-sha256"),
])
def test_safe_name_sanitises_hostile_names(text, expected):
    """safe_name folds accents, replaces unsafe runs by '-', strips dots and falls back."""
    assert study.safe_name(text) == expected


@pytest.mark.parametrize("text", ["x" * 500, "../" * 60, "a/" * 80 + ".", "-_." * 50 + "ok",
                                  "\u202eevil\u202d", "C:\\Windows\\system32"])
def test_safe_name_output_is_always_a_safe_path_component(text):
    """Whatever the input, the result is a short, non-hidden, single path component."""
    name = study.safe_name(text)
    assert re.fullmatch(r"[A-Za-z0-9._-]+", name)
    assert len(name) <= study.MAX_NAME_LEN
    assert name not in {".", ".."} and not name.startswith((".", "-"))


def test_safe_name_default_is_configurable():
    """The fallback for an empty result is the given default."""
    assert study.safe_name("///", default="host") == "host"


def test_cell_id_format():
    """A cell id names device, precision, loader, batch size and repeat; a variant (a tip, a
    scale cell's width) goes before the repeat."""
    assert cell_id("cuda", "fp32", "resident", 128, 0) == "cuda-fp32-resident-b128-r0"
    assert cell_id("cpu", "fp32", "resident", 128, 1, "x4") == "cpu-fp32-resident-b128-x4-r1"


# ------------------------------------------------------------------------------ the matrix
def schema_defaults() -> dict:
    """The config schema's experiments with every default filled in (the shipped study)."""
    from snakemake.utils import validate

    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    validate(config, schema=str(REPO / "workflow" / "schemas" / "config.schema.yaml"))
    return config


def test_matrix_of_the_shipped_study_is_repeat_major_and_skips_unsupported_precisions():
    """The default config gives convergence then sweep cells per repeat, every repeat 0 before
    any repeat 1, tf32/fp16 never on cpu, and unique keys."""
    config = schema_defaults()
    cells = build_matrix(config["experiments"], ["cpu", "cuda"], config["seed"],
                         lambda device: [("env-a", None)])
    keys = [c.key for c in cells]
    assert len(keys) == len(set(keys))
    repeats = [c.repeat for c in cells]
    assert repeats == sorted(repeats)
    assert not any(c.device == "cpu" and c.precision in ("tf32", "fp16") for c in cells)
    assert {c.seed - c.repeat for c in cells} == {config["seed"]}
    first = cells[0]
    assert (first.experiment, first.device, first.precision) == ("headline", "cpu", "fp32")
    assert next(c.experiment for c in cells
                if c.experiment not in ("headline", "threads")) == "convergence"


def test_convergence_runs_the_blogs_code_and_the_projects_best_on_each_device():
    """The convergence DataLoader cell is the blog's code as written (stock, no workers, no
    pinned memory, cudnn.benchmark off, the C library's allocator), the resident cell this
    project's best (tuned, the study-wide allocator); code_kind reads the kind back from what
    a cell recorded."""
    from mnistbench.core import options

    config = schema_defaults()
    cells = [c for c in build_matrix(config["experiments"], ["cpu", "cuda"], 0,
                                     lambda device: [("e", None)])
             if c.experiment == "convergence" and c.repeat == 0]
    assert {(c.device, c.loader) for c in cells} == {
        (d, loader) for d in ("cpu", "cuda") for loader in ("dataloader", "resident")}
    for cell in cells:
        args = options.train_parser().parse_args([*cell.train_args(), "--data", "d",
                                                  "--out", "o"])
        if cell.loader == "dataloader":
            assert (args.implementation, args.allocator, args.workers, args.pin_memory,
                    args.cudnn_benchmark) == ("stock", "glibc", 0, False, False)
            assert study.code_kind("dataloader", "stock", "glibc", 0) == "blog"
        else:
            assert args.implementation == "tuned" and "--allocator" not in cell.train_args()
            assert study.code_kind("resident", "tuned", "tcmalloc") == "best"
    assert study.code_kind("dataloader", "tuned", "glibc") == ""
    assert study.code_kind("dataloader", "stock", "tcmalloc") == ""
    assert study.code_kind("dataloader", "stock", "glibc", 4) == ""


def test_matrix_files_each_cell_once_per_environment_of_its_device():
    """Each cell is listed once per (env, partition) of its device, in that order."""
    experiments = schema_defaults()["experiments"]
    envs = {"cpu": [("slurm-a", "a"), ("slurm-b", "b")], "cuda": [("slurm-g", "g")]}
    cells = build_matrix(experiments, ["cpu", "cuda"], 0, envs.__getitem__)
    cpu = [c for c in cells if c.device == "cpu"]
    assert [c.env for c in cpu[:2]] == ["slurm-a", "slurm-b"] and cpu[0].id == cpu[1].id
    assert {c.partition for c in cells if c.device == "cuda"} == {"g"}


def test_train_args_round_trip_through_the_cli_parser():
    """A cell's train flags parse with `mnistbench train`'s parser back to its settings."""
    from mnistbench.core import options

    cell = Cell(env="e", partition=None, experiment="sweep", repeat=1, seed=1, device="cpu",
                precision="bf16", loader="resident", batch_size=64, epochs=2, lr=0.002,
                warmup_steps=3, max_steps=10, train_limit=100, test_limit=50, time_limit=9.5)
    args = options.train_parser().parse_args([*cell.train_args(), "--out", "x"])
    got = {name: getattr(args, name) for name in (
        "device", "precision", "batch_size", "loader", "epochs", "lr", "seed", "warmup_steps",
        "max_steps", "train_limit", "test_limit", "time_limit", "env", "experiment", "cell",
        "repeat")}
    assert got == {"device": "cpu", "precision": "bf16", "batch_size": 64,
                   "loader": "resident", "epochs": 2, "lr": 0.002, "seed": 1,
                   "warmup_steps": 3, "max_steps": 10, "train_limit": 100, "test_limit": 50,
                   "time_limit": 9.5, "env": "e", "experiment": "sweep",
                   "cell": "cpu-bf16-resident-b64-r1", "repeat": 1}


# ------------------------------------------------------------------------------ tips
def tips_cells(devices=("cpu", "cuda"), cores=8) -> list[Cell]:
    """Repeat 0 of the shipped tips experiment on ``devices``."""
    experiments = schema_defaults()["experiments"]
    cells = build_matrix(experiments, list(devices), 0, lambda device: [("e", None)], cores)
    return [c for c in cells if c.experiment == "tips" and c.repeat == 0]


def test_tips_run_the_baseline_and_every_lever_that_applies_to_the_device():
    """On a CPU, pinned memory, cudnn.benchmark and fp16 are not cells (the report says why);
    on CUDA every lever is; every cell has its own id and the blog's baseline settings."""
    cells = tips_cells()
    cpu = {c.tip for c in cells if c.device == "cpu"}
    cuda = {c.tip for c in cells if c.device == "cuda"}
    assert cuda == set(study.TIP_NAMES)
    assert cpu == set(study.TIP_NAMES) - {"pin_memory", "cudnn.benchmark", "amp-fp16"}
    for name in set(study.TIP_NAMES) - cpu:
        assert study.tip_by_name(name).not_applicable
    assert len({c.id for c in cells}) == len(cells)
    base = next(c for c in cells if c.device == "cpu" and c.tip == "baseline")
    assert (base.loader, base.precision, base.batch_size, base.workers, base.pin_memory,
            base.implementation, base.cudnn_benchmark, base.allocator) == (
        "dataloader", "fp32", 128, 0, False, "stock", False, "glibc")


def test_combined_tips_leave_out_what_a_device_lacks_and_resolve_amp_and_cores():
    """blog-all on a CPU keeps workers, bf16 and max batch but no pinned memory or cudnn;
    on CUDA its amp is fp16; workers=cores is the machine's logical cores."""
    cells = {(c.device, c.tip): c for c in tips_cells(cores=6)}
    cpu_all = cells["cpu", "blog-all"]
    assert (cpu_all.workers, cpu_all.precision, cpu_all.max_batch, cpu_all.pin_memory,
            cpu_all.cudnn_benchmark) == (4, "bf16", True, False, False)
    assert cells["cuda", "blog-all"].precision == "fp16" and cells["cuda", "blog-all"].pin_memory
    assert cells["cpu", "workers=cores"].workers == 6
    assert cells["cpu", "max-batch"].id == "cpu-fp32-dataloader-bmax-max-batch-r0"


def test_tip_flags_parse_back_to_the_cell_settings():
    """A tips cell's train flags, after the study-wide ones, parse to the tip's settings."""
    from mnistbench.core import options

    cell = next(c for c in tips_cells() if c.device == "cuda" and c.tip == "blog-all")
    study_wide = ["--workers", "0", "--no-pin-memory", "--allocator", "auto"]
    args = options.train_parser().parse_args([*study_wide, *cell.train_args(), "--out", "x"])
    assert (args.tip, args.workers, args.pin_memory, args.implementation,
            args.cudnn_benchmark, args.allocator, args.max_batch, args.precision) == (
        "blog-all", 4, True, "stock", True, "glibc", True, "fp16")


# ------------------------------------------------------------------------------ scale
def scale_cells(devices=("cpu", "cuda"), experiments=None) -> list[Cell]:
    """The scale experiment's cells of the shipped study (or of ``experiments``)."""
    experiments = experiments or schema_defaults()["experiments"]
    cells = build_matrix(experiments, list(devices), 0, lambda device: [("e", None)])
    return [c for c in cells if c.experiment == "scale"]


def test_scale_runs_every_width_and_precision_after_the_other_experiments():
    """The shipped study's scale: widths 1, 2, 4 on the CPU, and 8 too on a GPU, in fp32 and
    bf16, 2 repeats, each repeat after the tips of the same repeat; ids carry the width."""
    config = schema_defaults()
    cells = build_matrix(config["experiments"], ["cpu", "cuda"], 0, lambda device: [("e", None)])
    assert study.EXPERIMENTS.index("scale") > study.EXPERIMENTS.index("tips")
    assert study.EXPERIMENTS[:2] == ("headline", "threads")
    first = [c.experiment for c in cells if c.repeat == 0]
    assert first.index("scale") > max(i for i, e in enumerate(first) if e == "tips")
    scale = [c for c in cells if c.experiment == "scale"]
    assert {(c.device, c.precision, c.width) for c in scale if c.repeat == 0} == {
        *(("cpu", p, w) for p in ("fp32", "bf16") for w in (1, 2, 4)),
        *(("cuda", p, w) for p in ("fp32", "bf16") for w in (1, 2, 4, 8))}
    assert {c.repeat for c in scale} == {0, 1}
    assert "cpu-fp32-resident-b128-x4-r0" in {c.id for c in scale}
    assert "cpu-bf16-resident-b128-x1-r1" in {c.id for c in scale}
    assert len({c.key for c in cells}) == len(cells)


def test_scale_cells_time_the_same_short_run_of_the_tuned_network():
    """Every scale cell: resident data, batch 128, the tuned implementation, one epoch of
    max_steps steps after a short warm-up, the same samples whatever the width (its training
    data holds every step), a small test pass."""
    cells = scale_cells()
    assert {(c.loader, c.batch_size, c.implementation, c.epochs) for c in cells} == {
        ("resident", 128, "tuned", 1)}
    assert {(c.max_steps, c.warmup_steps, c.train_limit, c.test_limit) for c in cells} == {
        (12, 2, 2048, 1000)}
    assert all(c.train_limit >= (c.max_steps + c.warmup_steps) * c.batch_size for c in cells)


def test_scale_flags_parse_back_to_the_width_and_other_cells_keep_theirs():
    """A scale cell passes --width (x1 too) and --implementation after the study-wide flags;
    the cells of the other experiments pass no --width, so their commands are unchanged."""
    from mnistbench.core import options

    config = schema_defaults()
    cells = build_matrix(config["experiments"], ["cpu"], 0, lambda device: [("e", None)])
    for cell in cells:
        args = options.train_parser().parse_args([*cell.train_args(), "--out", "o"])
        assert args.width == cell.width and args.cell == cell.id
        if cell.experiment == "scale":
            assert "--width" in cell.train_args() and args.implementation == "tuned"
        else:
            assert "--width" not in cell.train_args() and cell.width == 1
    one = next(c for c in cells if c.experiment == "scale" and c.width == 1)
    assert one.variant == "x1" and one.id.endswith("-x1-r0")


def test_scale_precisions_a_device_lacks_and_accelerator_widths_are_left_out():
    """fp16 is no CPU cell; accelerator_widths [] runs the widths alone on a GPU; a width in
    both lists is one cell."""
    experiments = schema_defaults()["experiments"]
    experiments["scale"].update(precisions=["fp32", "fp16"], widths=[1, 8],
                                accelerator_widths=[8, 16])
    cells = scale_cells(experiments=experiments)
    assert {(c.device, c.precision, c.width) for c in cells if c.repeat == 0} == {
        ("cpu", "fp32", 1), ("cpu", "fp32", 8),
        *(("cuda", p, w) for p in ("fp32", "fp16") for w in (1, 8, 16))}
    experiments["scale"]["accelerator_widths"] = []
    assert {c.width for c in scale_cells(experiments=experiments)} == {1, 8}
    experiments["scale"]["enabled"] = False
    assert scale_cells(experiments=experiments) == []


def test_scale_sizes_fit_the_default_study():
    """The schema's scale adds 12 CPU cells; their training FLOPs (steps and warm-up) and
    test passes sum to about 6 TFLOP per repeat: minutes on an AVX2 CPU at 60-90 GFLOP/s
    (bf16 emulated about 3x slower), the bound docs/workflow.md gives."""
    from mnistbench.core import network

    cells = scale_cells(devices=("cpu",))
    assert len(cells) == 12
    flops = {c.precision: 0.0 for c in cells}
    for c in cells:
        flops[c.precision] += ((c.max_steps + c.warmup_steps) * c.batch_size
                               * network.train_flops(c.width)
                               + c.test_limit * network.eval_flops(c.width))
    seconds = flops["fp32"] / 60e9 + flops["bf16"] / 20e9  # the slow end of the estimate
    assert 4 * 60 < seconds < 9 * 60, seconds


# ------------------------------------------------------------------------------ headline, threads
def test_headline_interleaves_both_codes_on_every_device_repeat_by_repeat():
    """The shipped headline: 6 repeats of the blog's code and this project's best on each
    device, fp32, batch 128, short cells; repeat r of every code and device before any
    repeat r + 1 (a drift hits all alike); the cells are the convergence experiment's codes."""
    from mnistbench.core import options

    config = schema_defaults()
    cells = [c for c in build_matrix(config["experiments"], ["cpu", "cuda"], 0,
                                     lambda device: [("e", None)], 2)
             if c.experiment == "headline"]
    assert [(c.repeat, c.device, c.loader) for c in cells] == [
        (r, d, loader) for r in range(6) for d in ("cpu", "cuda")
        for loader in ("dataloader", "resident")]
    assert {(c.precision, c.batch_size, c.epochs) for c in cells} == {("fp32", 128, 1)}
    assert all(c.max_steps >= 60 and c.warmup_steps >= 10 for c in cells)
    for cell in cells[:2]:
        args = options.train_parser().parse_args([*cell.train_args(), "--data", "d",
                                                  "--out", "o"])
        kind = study.code_kind(args.loader, args.implementation,
                               "glibc" if args.loader == "dataloader" else "tcmalloc",
                               args.workers)
        assert kind == {"dataloader": "blog", "resident": "best"}[cell.loader]
    assert cells[0].id == "cpu-fp32-dataloader-b128-r0"


@pytest.mark.parametrize(("cores", "counts"), [
    (16, [1, 2, 4, 8, 16]), (12, [1, 2, 4, 8, 12]), (2, [1, 2]), (1, [1]), (3, [1, 2, 3])])
def test_thread_counts_double_up_to_every_core(cores, counts):
    assert study.thread_counts("auto", cores) == counts


def test_thread_counts_beyond_the_cores_name_the_key():
    assert study.thread_counts([4, 1, 2], 4) == [1, 2, 4]
    with pytest.raises(StudyError, match=r"experiments\.threads\.thread_counts"):
        study.thread_counts([1, 8], 4)


def test_threads_cells_run_both_codes_on_the_cpu_at_each_count_with_their_flag():
    """The threads experiment: CPU only, both codes at every count in turn, 3 repeats; the id
    carries the threads (t4) and the cell's --threads comes after the study-wide one, so
    `mnistbench train` takes the cell's."""
    from mnistbench.core import options

    config = schema_defaults()
    cells = [c for c in build_matrix(config["experiments"], ["cpu", "cuda"], 0,
                                     lambda device: [("e", None)], 8)
             if c.experiment == "threads"]
    assert {c.device for c in cells} == {"cpu"}
    assert [(c.threads, c.loader) for c in cells if c.repeat == 0] == [
        (t, loader) for t in (1, 2, 4, 8) for loader in ("dataloader", "resident")]
    assert {c.repeat for c in cells} == {0, 1, 2}
    cell = cells[4]
    assert cell.id == "cpu-fp32-dataloader-b128-t4-r0"
    args = options.train_parser().parse_args(
        ["--threads", "0", *cell.train_args(), "--data", "d", "--out", "o"])
    assert args.threads == 4 and args.implementation == "stock"
    assert len({c.key for c in cells}) == len(cells)


def test_headline_and_threads_sizes_fit_the_default_study():
    """What config/config.yaml's comment estimates: 12 headline and 12 threads cells on a
    2-core CPU-only machine, short cells (at most 100 steps each)."""
    config = schema_defaults()
    cells = build_matrix(config["experiments"], ["cpu"], 0, lambda device: [("e", None)], 2)
    headline = [c for c in cells if c.experiment == "headline"]
    threads = [c for c in cells if c.experiment == "threads"]
    assert len(headline) == 12 and len(threads) == 12
    assert all(c.warmup_steps + c.max_steps <= 100 for c in headline + threads)


def test_cli_env_name_refuses_a_bad_mnistbench_env_in_one_paragraph(monkeypatch, capsys):
    """`mnistbench env-name` with $MNISTBENCH_ENV '../': exit 1, one paragraph, no
    traceback."""
    from mnistbench import cli

    monkeypatch.setenv("MNISTBENCH_ENV", "../")
    assert cli.main(["env-name"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("mnistbench env-name: error: $MNISTBENCH_ENV is '../'")
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_capture_runs_each_precision_eager_and_captured_on_cuda_only():
    """The capture experiment (off by default; the GPU plan turns it on): on CUDA, each
    precision as the tuned code eager and as its whole-step graph, resident, at batch 128 for
    10 epochs, the graph cells' ids marked ``graph``; no cells on a CPU, where nothing would
    be captured; the graph cells pass --implementation tuned-graph."""
    config = schema_defaults()
    assert config["experiments"]["capture"]["enabled"] is False
    experiments = {"capture": {**config["experiments"]["capture"], "enabled": True}}
    cells = build_matrix(experiments, ["cpu", "cuda"], 0, lambda device: [("e", None)])
    assert {c.id for c in cells} == {
        "cuda-fp32-resident-b128-r0", "cuda-fp32-resident-b128-graph-r0",
        "cuda-bf16-resident-b128-r0", "cuda-bf16-resident-b128-graph-r0"}
    assert all(c.epochs == 10 and c.experiment == "capture" for c in cells)
    graph = next(c for c in cells if c.id == "cuda-fp32-resident-b128-graph-r0")
    args = graph.train_args()
    assert args[args.index("--implementation") + 1] == options.GRAPH_IMPLEMENTATION
    assert options.GRAPH_IMPLEMENTATION in options.IMPLEMENTATIONS
