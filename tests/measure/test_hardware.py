"""Tests of mnistbench.measure.hardware: the hardware record that tells machines apart (ISA, CPU
flags, bf16 path, oneDNN and MKL, governor and turbo, the accelerator's backend) and torch's
collect_env report."""

from __future__ import annotations

import torch

from mnistbench import cli
from mnistbench.core import schema
from mnistbench.measure import hardware, sysinfo

XEON_FLAGS = ("fpu vme sse sse2 avx avx2 fma avx512f avx512dq avx512_bf16 amx_bf16 "
              "avx512_fp16 amx_tile amx_int8")


def _cpuinfo(root, key: str, flags: str) -> None:
    (root / "proc").mkdir(parents=True)
    (root / "proc" / "cpuinfo").write_text(
        f"processor\t: 0\nmodel name\t: Some CPU\n{key}\t\t: {flags}\n\nprocessor\t: 1\n")


def test_cpu_flags_keep_the_relevant_ones_in_order(tmp_path):
    """x86 'flags' and arm64 'Features' give the flags that decide torch's kernels, in a fixed
    order; an unreadable cpuinfo gives ""."""
    _cpuinfo(tmp_path / "x86", "flags", XEON_FLAGS)
    assert hardware.cpu_flags(tmp_path / "x86") == (
        "avx2 avx512f avx512_bf16 avx512_fp16 amx_tile amx_bf16 amx_int8")
    _cpuinfo(tmp_path / "arm", "Features", "fp asimd sve sve2 bf16 i8mm")
    assert hardware.cpu_flags(tmp_path / "arm") == "sve sve2 bf16"
    assert hardware.cpu_flags(tmp_path / "none") == ""


def test_governor_and_turbo_from_sysfs(tmp_path):
    """Distinct governors are joined; intel_pstate's no_turbo, else cpufreq's boost, gives
    the turbo state; absent files give ""."""
    cpu = tmp_path / "sys/devices/system/cpu"
    for i, governor in enumerate(("performance", "powersave", "performance")):
        (cpu / f"cpu{i}/cpufreq").mkdir(parents=True)
        (cpu / f"cpu{i}/cpufreq/scaling_governor").write_text(governor + "\n")
    assert hardware.cpu_governor(tmp_path) == "performance,powersave"
    assert hardware.cpu_turbo(tmp_path) == ""
    (cpu / "cpufreq").mkdir()
    (cpu / "cpufreq/boost").write_text("0\n")
    assert hardware.cpu_turbo(tmp_path) == "off"
    (cpu / "intel_pstate").mkdir()
    (cpu / "intel_pstate/no_turbo").write_text("0\n")
    assert hardware.cpu_turbo(tmp_path) == "on"
    assert (hardware.cpu_governor(tmp_path / "x"), hardware.cpu_turbo(tmp_path / "x")) == ("", "")


def test_onednn_and_mkl_versions_come_from_torch_config():
    """The oneDNN and MKL versions are parsed from torch.__config__.show() (this build's and
    a build without MKL)."""
    text = torch.__config__.show()
    parsed = hardware.parse_config(text)
    if "MKL-DNN" in text or "oneDNN" in text:
        assert parsed["onednn"] and parsed["onednn"] in text
    arm = "  - Intel(R) MKL-DNN v3.7.1 (Git Hash 8d263e6)\n  - OpenMP 201511\n"
    assert hardware.parse_config(arm) == {"onednn": "3.7.1", "mkl": ""}
    mkl = "  - Intel(R) oneAPI Math Kernel Library Version 2024.2-Product Build 20240605\n"
    assert hardware.parse_config(mkl)["mkl"] == "2024.2"


def test_record_describes_this_machine():
    """The record has every hardware field, each a string; the ISA is torch's own answer and
    the flags are those of /proc/cpuinfo."""
    rec = hardware.record()
    for key in hardware.HARDWARE_FIELDS:
        assert isinstance(rec[key], str), key
        assert key in schema.ENV_FIELDS and schema.ADDED_IN[key] == 3
    assert rec["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert rec["cpu_flags"] == hardware.cpu_flags()
    assert rec["cpu_bf16"] in ("native", "emulated")
    assert rec["hip"] == (torch.version.hip or "")


def test_capture_carries_the_hardware_record():
    """The environment capture of every cell includes the hardware record."""
    info = sysinfo.capture()
    rec = hardware.record()
    for key in hardware.HARDWARE_FIELDS:
        assert info[key] == rec[key], key


def test_gpu_backend_tells_rocm_from_cuda(monkeypatch):
    """torch's cuda device is cuda on NVIDIA, rocm when torch.version.hip is set (AMD)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.version, "hip", None, raising=False)
    assert hardware.gpu_backend() == "cuda"
    monkeypatch.setattr(torch.version, "hip", "6.4.43482", raising=False)
    assert hardware.gpu_backend() == "rocm"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.xpu, "is_available", lambda: True)
    assert hardware.gpu_backend() == "xpu"


def test_xpu_and_mps_devices_fill_the_gpu_fields(monkeypatch):
    """For xpu and mps (which the CUDA fields do not cover) the record names the device, its
    count and memory."""
    class Props:
        name = "Intel(R) Data Center GPU Max 1550"
        total_memory = 64 * 2**30
        driver_version = "1.3.29735"

    monkeypatch.setattr(torch.xpu, "get_device_properties", lambda index=0: Props())
    monkeypatch.setattr(torch.xpu, "device_count", lambda: 2)
    assert hardware._accelerator_fields("xpu") == {
        "gpu_name": Props.name, "gpu_count": 2, "gpu_memory_gb": 64.0,
        "gpu_driver": "1.3.29735"}
    monkeypatch.setattr(torch.mps, "recommended_max_memory", lambda: 24 * 2**30)
    mps = hardware._accelerator_fields("mps")
    assert (mps["gpu_count"], mps["gpu_memory_gb"]) == (1, 24.0) and mps["gpu_name"]


def test_cli_writes_the_collect_env_report(tmp_path, capsys):
    """`mnistbench env --collect-env FILE` writes torch's collect_env report there."""
    path = tmp_path / "collect_env.txt"
    assert cli.main(["env", "--collect-env", str(path)]) == 0
    text = path.read_text()
    assert "PyTorch version: " + torch.__version__ in text
    assert str(path) in capsys.readouterr().out
