"""Tests of mnistbench.core.devices that the trainer's tests do not cover: the runner's note on why
a process has no GPU, which a cuda cell's unavailable reason carries. And the suite's ``gpu``
marker (tests/conftest.py): skipped, with the reason, where torch sees no CUDA GPU."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from mnistbench.core import devices, envvars
from mnistbench.measure import backends

pytest_plugins = ["pytester"]

CONFTEST = Path(__file__).resolve().parents[1] / "conftest.py"


def test_unavailable_reason_carries_the_runners_note(monkeypatch):
    """Without a GPU, pick_device('cuda') names the missing GPU and appends the note of
    $MNISTBENCH_GPU_NOTE (the docker runner's reason) when it is set."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.delenv(envvars.GPU_NOTE_VAR, raising=False)
    with pytest.raises(backends.DeviceUnavailable) as plain:
        backends.pick_device("cuda")
    assert str(plain.value).startswith("no CUDA GPU is visible to torch")
    note = "docker could not give the container a GPU (no runtime)"
    monkeypatch.setenv(envvars.GPU_NOTE_VAR, note)
    with pytest.raises(backends.DeviceUnavailable) as noted:
        backends.pick_device("cuda")
    assert str(noted.value) == f"{plain.value}; {note}"


# --------------------------------------------------------------------------- the gpu marker


@pytest.fixture
def gpu_suite(pytester: pytest.Pytester) -> pytest.Pytester:
    """A folder with this suite's conftest.py and ``gpu`` marker, and two tests: one marked
    ``gpu``, one not."""
    pytester.makeconftest(CONFTEST.read_text())
    pytester.makeini("[pytest]\naddopts = --strict-markers\n"
                     "markers =\n    gpu: needs a CUDA GPU\n")
    pytester.makepyfile(test_generated="""
        import pytest

        @pytest.mark.gpu
        def test_on_a_gpu():
            pass

        def test_anywhere():
            pass
        """)
    return pytester


def test_gpu_tests_skip_with_the_reason_where_torch_sees_no_gpu(gpu_suite, monkeypatch):
    """Without a CUDA GPU, the gpu test is skipped, saying what it needs and what provides
    it; the other test runs."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    result = gpu_suite.runpytest("-rs")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines([
        "SKIPPED * test_generated.py:*: needs a CUDA GPU: torch *; run them on a machine with "
        "an NVIDIA GPU, its driver and a CUDA build of torch*"])


def test_gpu_tests_run_where_torch_sees_a_gpu(gpu_suite, monkeypatch):
    """With a CUDA GPU (as torch reports it), the gpu test runs like any other."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    gpu_suite.runpytest().assert_outcomes(passed=2)


def test_sessions_without_gpu_tests_do_not_import_torch(pytester):
    """The marker's check imports torch only when a gpu test is collected."""
    pytester.makeconftest(CONFTEST.read_text())
    pytester.makepyfile(test_generated="""
        import sys

        def test_torch_is_not_imported():
            assert "torch" not in sys.modules
        """)
    pytester.runpytest_subprocess("-p", "no:cacheprovider").assert_outcomes(passed=1)


# --------------------------------------------------------------------------- the device axis

CONFIG_SCHEMA = Path(__file__).resolve().parents[2] / "workflow" / "schemas" / "config.schema.yaml"


def test_every_accelerator_backend_is_a_device_of_the_cli_and_the_config():
    """cpu, cuda, xpu and mps are the devices, and `train --help`, the parser and the config
    schema's devices enum all take exactly them (devices.DEVICES is their one source)."""
    import yaml

    from mnistbench.core import options

    assert devices.DEVICES == ("cpu", "cuda", "xpu", "mps")
    parser = options.train_parser()
    for name in devices.DEVICES:
        assert parser.parse_args(["--out", "x", "--device", name]).device == name
    assert "{cpu,cuda,xpu,mps}" in parser.format_help()
    schema = yaml.safe_load(CONFIG_SCHEMA.read_text())
    enum = schema["properties"]["devices"]["anyOf"][1]["items"]["enum"]
    assert tuple(enum) == devices.DEVICES


def test_config_schema_accepts_the_new_devices_and_refuses_others():
    """The workflow's config validation takes devices [cpu, cuda, xpu, mps] and refuses tpu."""
    from snakemake.exceptions import WorkflowError
    from snakemake.utils import validate

    validate({"devices": ["cpu", "cuda", "xpu", "mps"]}, str(CONFIG_SCHEMA))
    with pytest.raises(WorkflowError):
        validate({"devices": ["cpu", "tpu"]}, str(CONFIG_SCHEMA))


@pytest.mark.parametrize(("device", "precision", "ok"), [
    ("xpu", "fp32", True), ("xpu", "bf16", True), ("xpu", "fp16", True), ("xpu", "tf32", False),
    ("mps", "fp16", True), ("mps", "bf16", True), ("mps", "tf32", False),
    ("cpu", "fp16", False), ("cpu", "tf32", False), ("cuda", "tf32", True),
])
def test_precisions_without_a_policy_are_usage_errors(device, precision, ok):
    """A precision the benchmark has no policy for on a device (tf32 beyond CUDA, fp16 on the
    CPU) is a usage error naming the allowed values; the others pass."""
    if ok:
        devices.check_combination(device, precision, "resident")
        assert devices.is_supported(device, precision)
        return
    with pytest.raises(devices.UnsupportedCombination, match=f"allowed on {device}: "):
        devices.check_combination(device, precision, "resident")
    assert not devices.is_supported(device, precision)


def test_cpu_and_cuda_keep_their_precisions():
    """The CPU and CUDA precision sets are those of before the device axis opened."""
    assert devices.SUPPORTED["cpu"] == ("fp32", "bf16")
    assert devices.SUPPORTED["cuda"] == ("fp32", "tf32", "bf16", "fp16")


def test_device_labels_show_rocm_as_rocm():
    """A cuda cell on AMD hardware (gpu_backend rocm) is labelled ROCm/HIP, an NVIDIA one
    CUDA; the other backends by name."""
    assert devices.device_label("cuda", "rocm") == "ROCm/HIP"
    assert devices.device_label("cuda", "cuda") == devices.device_label("cuda") == "CUDA"
    assert devices.device_label("xpu") == "Intel XPU"
    assert devices.device_label("mps") == "Apple MPS"


# --------------------------------------------------------------------------- devices: auto

@pytest.fixture
def no_tools(monkeypatch):
    """No vendor tool (nvidia-smi, rocm-smi, amd-smi, xpu-smi) on PATH, no visibility
    variables, and not a Mac: only the fake file tree speaks."""
    import shutil as shutil_module

    monkeypatch.setattr(shutil_module, "which", lambda name, *a, **k: None)
    for name in ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(devices.platform, "system", lambda: "Linux")


def _kfd(root: Path, simd_counts: list[int]) -> None:
    """A fake /dev/kfd and KFD topology: one node per SIMD count (0: a CPU node)."""
    (root / "dev").mkdir(parents=True, exist_ok=True)
    (root / "dev" / "kfd").write_text("")
    for i, simd in enumerate(simd_counts):
        node = root / "sys/class/kfd/kfd/topology/nodes" / str(i)
        node.mkdir(parents=True)
        (node / "properties").write_text(f"cpu_cores_count 0\nsimd_count {simd}\n")


def _render_node(root: Path, name: str, vendor: str, address: str) -> None:
    """A fake DRM render node whose device is PCI ``address`` of ``vendor``."""
    pci = root / "sys/devices/pci0000:00" / address
    pci.mkdir(parents=True)
    (pci / "vendor").write_text(f"{vendor}\n")
    node = root / "sys/class/drm" / name
    node.mkdir(parents=True)
    (node / "device").symlink_to(pci)


def test_auto_finds_only_the_cpu_on_a_bare_machine(tmp_path, no_tools):
    """A machine with no GPU files and no vendor tools has the CPU only."""
    assert devices.visible_devices(tmp_path) == ["cpu"]


def test_auto_finds_an_nvidia_gpu_through_the_driver(tmp_path, no_tools):
    """The NVIDIA driver's /proc entries make cuda a device (as before)."""
    (tmp_path / "proc/driver/nvidia/gpus/0000:01:00.0").mkdir(parents=True)
    assert devices.visible_devices(tmp_path) == ["cpu", "cuda"]


def test_auto_finds_an_amd_gpu_as_cuda(tmp_path, no_tools, monkeypatch):
    """/dev/kfd with a GPU node (SIMD units) in the KFD topology is torch's cuda device (ROCm);
    CPU-only KFD nodes are not, and HIP_VISIBLE_DEVICES="" hides the GPU."""
    _kfd(tmp_path, [0])
    assert devices.visible_devices(tmp_path) == ["cpu"]
    gpu = tmp_path / "gpu"
    _kfd(gpu, [0, 304])
    assert devices.rocm_gpu_visible(gpu)
    assert devices.visible_devices(gpu) == ["cpu", "cuda"]
    monkeypatch.setenv("HIP_VISIBLE_DEVICES", "")
    assert devices.visible_devices(gpu) == ["cpu"]


def test_auto_finds_a_discrete_intel_gpu_as_xpu(tmp_path, no_tools):
    """An Intel (0x8086) render node away from 00:02.0 is an xpu device; Intel's integrated
    GPU at 00:02.0 and other vendors' nodes are not."""
    _render_node(tmp_path, "renderD128", "0x8086", "0000:00:02.0")
    _render_node(tmp_path, "renderD129", "0x1002", "0000:03:00.0")
    assert devices.visible_devices(tmp_path) == ["cpu"]
    _render_node(tmp_path, "renderD130", "0x8086", "0000:05:00.0")
    assert devices.visible_devices(tmp_path) == ["cpu", "xpu"]


def test_auto_finds_mps_on_apple_silicon(tmp_path, no_tools, monkeypatch):
    """macOS on arm64 has the mps device; macOS on Intel has not."""
    monkeypatch.setattr(devices.platform, "system", lambda: "Darwin")
    monkeypatch.setattr(devices.platform, "machine", lambda: "x86_64")
    assert devices.visible_devices(tmp_path) == ["cpu"]
    monkeypatch.setattr(devices.platform, "machine", lambda: "arm64")
    assert devices.visible_devices(tmp_path) == ["cpu", "mps"]


def test_auto_asks_the_vendor_tools_when_the_files_say_nothing(tmp_path, no_tools,
                                                                monkeypatch):
    """Without the files, rocm-smi listing a GPU gives cuda (given /dev/kfd) and xpu-smi
    listing a device gives xpu."""
    import shutil as shutil_module
    import subprocess as subprocess_module

    (tmp_path / "dev").mkdir()
    (tmp_path / "dev/kfd").write_text("")
    outputs = {"rocm-smi": "GPU[0] : Card series: AMD Instinct MI300X\n",
               "xpu-smi": "| Device ID | 0 |\n| Device Name | Intel Data Center GPU Max |\n"}
    monkeypatch.setattr(shutil_module, "which",
                        lambda name, *a, **k: f"/usr/bin/{name}" if name in outputs else None)

    def run(command, **kwargs):
        tool = Path(command[0]).name
        return subprocess_module.CompletedProcess(command, 0, stdout=outputs[tool], stderr="")

    monkeypatch.setattr(subprocess_module, "run", run)
    assert devices.visible_devices(tmp_path) == ["cpu", "cuda", "xpu"]


def test_auto_discovery_does_not_import_torch(tmp_path):
    """visible_devices runs without torch (the workflow asks it when it builds the DAG)."""
    import subprocess
    import sys

    code = ("import sys; from mnistbench.core import devices; devices.visible_devices(); "
            "assert 'torch' not in sys.modules, 'torch was imported'")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


# --------------------------------------------------------------------------- the device layer

def test_backend_queries_a_fake_accelerator(monkeypatch):
    """The generic layer reads a backend module's capability queries (bf16, fp16), bf16 path,
    peak memory and timing method; the CPU has no peak and times with the host clock."""
    from tests.fake_accelerator import FakeAccelerator

    fake = FakeAccelerator(bf16=False, fp16=False, peak_bytes=5 * 2**20)
    backend = backends.Backend("xpu", fake, tensor_device="cpu")
    assert "is_bf16_supported() is False" in backend.precision_problem("bf16")
    assert "has_fp16 is False" in backend.precision_problem("fp16")
    assert backend.precision_problem("fp32") is None
    assert backend.timing_method == "device-events"
    assert backend.peak_memory_mb(torch.device("cpu")) == 5.0
    assert backends.Backend("xpu", FakeAccelerator(bf16_native=False)).bf16_path() == "emulated"
    assert backends.Backend("xpu", FakeAccelerator(events=False)).timing_method == (
        "sync+host-clock")
    cpu = backends.backend("cpu")
    assert (cpu.timing_method, cpu.peak_memory_mb(torch.device("cpu"))) == ("host-clock", None)
    assert cpu.precision_problem("bf16") is None
    assert backends.backend("cuda").timing_method == "cuda-events"


def test_unavailable_accelerators_say_why(monkeypatch):
    """On this CUDA build without a GPU, xpu and mps cells are unavailable, naming the missing
    device and that the build lacks the backend."""
    monkeypatch.delenv(envvars.GPU_NOTE_VAR, raising=False)
    if torch.xpu.is_available() or torch.backends.mps.is_available():
        pytest.skip("this machine has an XPU or MPS device")
    with pytest.raises(backends.DeviceUnavailable, match="no Intel XPU device is visible"):
        backends.pick_device("xpu")
    with pytest.raises(backends.DeviceUnavailable, match="MPS is not available"):
        backends.pick_device("mps")


def test_rocm_build_names_rocm_when_no_gpu(monkeypatch):
    """In torch's ROCm build (torch.version.hip set), a cuda cell without a GPU says that no
    ROCm GPU is visible."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.version, "hip", "6.4.43482", raising=False)
    monkeypatch.delenv(envvars.GPU_NOTE_VAR, raising=False)
    with pytest.raises(backends.DeviceUnavailable, match="no ROCm GPU is visible to torch"):
        backends.pick_device("cuda")


def test_check_precision_turns_a_refusal_into_unavailable(monkeypatch):
    """check_precision raises DeviceUnavailable with the query's answer; fine otherwise."""
    from tests.fake_accelerator import install

    install(monkeypatch, "xpu", bf16=False)
    backends.check_precision("xpu", "fp32")
    with pytest.raises(backends.DeviceUnavailable, match="cannot run bf16"):
        backends.check_precision("xpu", "bf16")


def test_readme_device_table_says_what_ran_on_real_hardware():
    """README's device table has a row for every device (cuda twice: NVIDIA and AMD ROCm),
    states that cpu ran on real hardware and that every other backend has not yet."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme.split("\n## Devices\n", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|")[1:-1] for line in section.splitlines()
            if line.startswith("| `")]
    tested = {cells[0].strip(): cells[-1].strip() for cells in rows}
    assert [name.split("`")[1] for name in tested] == ["cpu", "cuda", "cuda", "xpu", "mps"]
    assert "ROCm" in list(tested)[2]
    assert tested["`cpu`"].startswith("**yes**")
    for name, verdict in list(tested.items())[1:]:
        assert "untested" in verdict or "not yet" in verdict, name
    assert "TPUs (torch_xla) are out of scope" in section
