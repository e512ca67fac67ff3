"""Tests of mnistbench.measure.monitor: the background resource sampler, RAPL and NVML readers."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import psutil
import pytest

from mnistbench.core import schema
from mnistbench.core.schema import RESOURCE_COLUMNS
from mnistbench.measure import gpusampler, monitor
from mnistbench.measure.gpusampler import NvmlGpu
from mnistbench.measure.monitor import STAGES, Rapl, ResourceMonitor

COLUMNS = list(schema.RESOURCE_COLUMNS)
GPU_COLUMNS = ("gpu_util_pct", "gpu_mem_mb", "gpu_power_w", "gpu_energy_j")

# A child Python that burns CPU until it has used SECONDS of its own CPU time (not wall time),
# so the amount is known even when other processes compete for the cores.
BURN = ("import sys, time\n"
        "limit = float(sys.argv[1])\n"
        "while time.process_time() < limit:\n"
        "    pass\n")


def burn_child(cpu_seconds: float) -> float:
    """Run a child that burns ``cpu_seconds`` of CPU; return the CPU seconds it really used."""
    before = psutil.Process().cpu_times()
    subprocess.run([sys.executable, "-c", BURN, str(cpu_seconds)], check=True)
    after = psutil.Process().cpu_times()
    return (after.children_user + after.children_system
            - before.children_user - before.children_system)


def cpu_seconds(mon: ResourceMonitor, stage: str | None = None) -> float:
    """CPU seconds the rows account for: sum of proc_cpu_pct × interval / 100."""
    total = 0.0
    t_prev = None
    for row in mon.rows:
        if row["proc_cpu_pct"] is not None and (stage is None or row["stage"] == stage):
            total += row["proc_cpu_pct"] * (row["t_s"] - t_prev) / 100.0
        t_prev = row["t_s"]
    return total


class FakeNvml:
    """Stands in for pynvml: one device with settable readings; records handle lookups."""

    def __init__(self, counter: bool = True, powers_mw=(100_000.0,), fail_init: bool = False):
        self.counter = counter
        self.energy_mj = 1_000_000.0
        self.powers_mw = list(powers_mw)
        self.fail_init = fail_init
        self.lookups: list[tuple[str, object]] = []
        self.calls = 0
        self.shutdowns = 0

    def nvmlInit(self):
        self.calls += 1
        if self.fail_init:
            raise RuntimeError("NVML Shared Library Not Found")

    def nvmlShutdown(self):
        self.shutdowns += 1

    def nvmlDeviceGetHandleByIndex(self, index):
        self.lookups.append(("index", index))
        return "handle"

    def nvmlDeviceGetHandleByUUID(self, uuid):
        self.lookups.append(("uuid", uuid))
        return "handle"

    def nvmlDeviceGetUtilizationRates(self, handle):
        return SimpleNamespace(gpu=87, memory=40)

    def nvmlDeviceGetMemoryInfo(self, handle):
        return SimpleNamespace(used=512 * 2**20, total=80 * 2**30)

    def nvmlDeviceGetPowerUsage(self, handle):
        return self.powers_mw.pop(0) if len(self.powers_mw) > 1 else self.powers_mw[0]

    def nvmlDeviceGetTotalEnergyConsumption(self, handle):
        if not self.counter:
            raise RuntimeError("Not Supported")
        return self.energy_mj


def make_powercap(root: Path, packages: dict[str, tuple[int, int]]) -> Path:
    """A fake powercap tree: {folder: (energy_uj, max_energy_range_uj)}, plus decoys that
    must be ignored (a subdomain, a psys domain, an mmio domain)."""
    for folder, (energy, max_range) in packages.items():
        d = root / folder
        d.mkdir(parents=True)
        (d / "name").write_text(f"package-{folder.rsplit(':', 1)[1]}\n")
        (d / "energy_uj").write_text(f"{energy}\n")
        (d / "max_energy_range_uj").write_text(f"{max_range}\n")
    for folder, name in (("intel-rapl:0:0", "core"), ("intel-rapl:9", "psys"),
                         ("intel-rapl-mmio:0", "package-0")):
        d = root / folder
        d.mkdir(parents=True)
        (d / "name").write_text(name + "\n")
        (d / "energy_uj").write_text("777000000\n")
        (d / "max_energy_range_uj").write_text("999000000\n")
    return root


def set_energy(root: Path, folder: str, energy_uj: int) -> None:
    (root / folder / "energy_uj").write_text(f"{energy_uj}\n")


# --------------------------------------------------------------------------- rows and stages


def test_rows_have_schema_columns_in_order_and_at_least_two():
    """Even a cell shorter than one interval gets a start and a stop row with schema keys."""
    mon = ResourceMonitor(interval=30.0)
    mon.start()
    mon.stop()
    assert len(mon.rows) >= 2
    for row in mon.rows:
        assert list(row) == COLUMNS
    first = mon.rows[0]
    assert first["t_s"] == 0.0 and first["stage"] == "setup"
    assert first["proc_cpu_pct"] is None and first["rss_mb"] > 0


def test_child_burn_shows_in_proc_cpu_with_stage_labels():
    """CPU burnt by a child while rows are taken is counted once, in the train stage."""
    with ResourceMonitor(interval=0.1) as mon:
        time.sleep(0.25)
        mon.set_stage("train")
        used = burn_child(0.6)
        mon.set_stage("done")
        time.sleep(0.05)
    stages = [row["stage"] for row in mon.rows]
    assert {"setup", "train", "done"} <= set(stages)
    assert [STAGES.index(s) for s in stages] == sorted(STAGES.index(s) for s in stages)
    train_rows = [r for r in mon.rows if r["stage"] == "train"]
    assert len(train_rows) >= 3
    # The child's CPU plus a little of our own; counting a reaped child twice would double it.
    counted = cpu_seconds(mon, "train")
    assert used - 0.05 <= counted <= used + 0.25
    assert cpu_seconds(mon, "setup") < 0.2
    assert max(r["proc_cpu_pct"] for r in train_rows) > 30


def test_child_that_lives_between_two_rows_is_still_counted():
    """A child that starts and exits between two samples is counted through its reaping."""
    with ResourceMonitor(interval=60.0) as mon:
        mon.set_stage("train")
        used = burn_child(0.4)
        mon.set_stage("done")
    assert used >= 0.35  # psutil reports whole 10 ms ticks
    assert used - 0.05 <= cpu_seconds(mon, "train") <= used + 0.2


@pytest.mark.parametrize("proc_children", [True, False])
def test_process_tree_counts_live_children_and_rss(monkeypatch, proc_children):
    """ProcessTree sees a live child's CPU and adds its resident memory, through
    /proc/PID/task/TID/children or, where the kernel lacks it, psutil's children()."""
    if not proc_children:
        monkeypatch.setattr(monitor, "_has_proc_children", lambda pid: False)
    elif not monitor._has_proc_children(os.getpid()):
        pytest.skip("this kernel has no /proc/PID/task/TID/children")
    tree = monitor.ProcessTree()
    assert tree._use_proc_children is proc_children
    cpu0, rss_alone = tree.read()
    assert cpu0 is None and rss_alone > 0
    child = subprocess.Popen([sys.executable, "-c", BURN + "time.sleep(30)\n", "0.3"])
    try:
        proc = psutil.Process(child.pid)
        deadline = time.perf_counter() + 10
        while sum(proc.cpu_times()[:2]) < 0.25:  # psutil rounds down to 10 ms ticks
            assert time.perf_counter() < deadline, "the child did not burn its CPU in 10 s"
            time.sleep(0.02)
        cpu, rss_with_child = tree.read()
        assert cpu >= 0.25
        assert rss_with_child > rss_alone
    finally:
        child.kill()
        child.wait()


def test_set_stage_rejects_unknown_stage():
    """An unknown stage name fails with a message listing the allowed ones."""
    mon = ResourceMonitor()
    with pytest.raises(ValueError, match="setup, warmup, train, done"):
        mon.set_stage("training")
    with pytest.raises(ValueError, match="allowed"):
        mon.summary("nope")


@pytest.mark.parametrize("interval", [0, -1.0, "0.5", None])
def test_bad_interval_is_rejected(interval):
    """A non-positive or non-numeric interval fails at construction."""
    with pytest.raises(ValueError, match="interval"):
        ResourceMonitor(interval=interval)


def test_bad_gpu_index_is_rejected():
    """gpu_index must be None or a non-negative int."""
    for bad in (-1, "0", 1.5, True):
        with pytest.raises(ValueError, match="gpu_index"):
            ResourceMonitor(gpu_index=bad)


# --------------------------------------------------------------------------- lifecycle


def test_stop_is_idempotent_and_joins_thread():
    """stop() ends the thread; a second stop() changes nothing; start() twice is refused."""
    mon = ResourceMonitor(interval=0.02).start()
    time.sleep(0.1)
    assert mon.running and mon._thread.is_alive()
    mon.stop()
    assert not mon._thread.is_alive() and not mon.running
    n_rows = len(mon.rows)
    mon.stop()
    time.sleep(0.06)
    assert len(mon.rows) == n_rows
    with pytest.raises(RuntimeError, match="already"):
        mon.start()


def test_context_manager_stops_on_error():
    """Leaving the with-block through an exception still stops the sampler."""
    with pytest.raises(KeyError), ResourceMonitor(interval=0.05) as mon:
        raise KeyError("boom")
    assert not mon.running and not mon._thread.is_alive()
    assert mon.rows[-1]["t_s"] >= 0


def test_energy_needs_start_and_is_frozen_after_stop(tmp_path):
    """energy() before start() is an error; after stop() it returns the last sample's values."""
    mon = ResourceMonitor(powercap_root=make_powercap(tmp_path, {"intel-rapl:0": (0, 10**9)}))
    with pytest.raises(RuntimeError, match="start"):
        mon.energy()
    mon.start()
    set_energy(tmp_path, "intel-rapl:0", 2_000_000)
    mon.stop()
    set_energy(tmp_path, "intel-rapl:0", 9_000_000)
    assert mon.energy() == {"gpu_j": None, "cpu_j": 2.0}


def test_sampling_errors_are_recorded_and_sampling_goes_on():
    """A reader that raises is noted in errors; the thread keeps adding rows."""

    class Broken:
        def read(self):
            raise OSError("cpu counters vanished")

    mon = ResourceMonitor(interval=0.02).start()
    try:
        mon._sys = Broken()
        n = len(mon.rows)
        time.sleep(0.2)
        assert mon._thread.is_alive()
        assert len(mon.rows) >= n + 3
    finally:
        mon.stop()
    assert mon.errors == ["system cpu: OSError: cpu counters vanished"]  # deduplicated
    assert mon.rows[-1]["sys_cpu_pct"] is None
    assert mon.rows[-1]["rss_mb"] is not None


def test_sampler_costs_little_cpu():
    """At a 0.05 s period the process spends under 5% of a core sampling (real measurement)."""
    proc = psutil.Process()
    before = proc.cpu_times()
    start = time.perf_counter()
    with ResourceMonitor(interval=0.05) as mon:
        time.sleep(2.0)
    after = proc.cpu_times()
    wall = time.perf_counter() - start
    used = (after.user + after.system) - (before.user + before.system)
    assert len(mon.rows) >= 30
    assert used / wall < 0.05
    assert mon.sampler_cpu_s / wall < 0.05


# --------------------------------------------------------------------------- summary, CSV


def test_summary_is_time_weighted_and_merges_short_rows_for_peaks():
    """Means weight rows by the time they cover; a stage-switch sliver is merged before the
    CPU peak is taken."""
    mon = ResourceMonitor(interval=0.5)

    def row(t, stage, cpu, rss, util=None, power=None):
        r = dict.fromkeys(COLUMNS)
        r.update(t_s=t, stage=stage, proc_cpu_pct=cpu, rss_mb=rss, gpu_util_pct=util,
                 gpu_power_w=power)
        return r

    mon.rows = [row(0.0, "setup", None, 100.0), row(0.5, "setup", 50.0, 900.0),
                row(1.0, "train", 100.0, 200.0, 90.0, 300.0),
                row(2.5, "train", 0.0, 210.0, 10.0, 100.0),
                row(2.51, "train", 300.0, 220.0, 95.0, 100.0)]
    mon._dts = [0.0, 0.5, 0.5, 1.5, 0.01]
    s = mon.summary("train")
    assert s["cpu_pct_mean"] == pytest.approx((100 * 0.5 + 0 * 1.5 + 300 * 0.01) / 2.01)
    # windows of >= 0.25 s: [100% × 0.5 s], [0% × 1.5 s + 300% × 0.01 s merged]
    assert s["cpu_pct_peak"] == 100.0
    assert s["peak_rss_mb"] == 900.0  # over all stages
    assert s["gpu_util_mean"] == pytest.approx((90 * 0.5 + 10 * 1.5 + 95 * 0.01) / 2.01)
    assert s["gpu_util_peak"] == 95.0
    assert s["gpu_power_mean_w"] == pytest.approx((300 * 0.5 + 100 * 1.51) / 2.01)
    empty = mon.summary("warmup")
    assert set(empty) == {"cpu_pct_mean", "cpu_pct_peak", "peak_rss_mb", "gpu_util_mean",
                          "gpu_util_peak", "gpu_power_mean_w", "system_load_mean",
                          "others_load_mean", "busy"}
    assert empty["busy"] is None  # nothing measured: neither busy nor quiet
    assert empty["cpu_pct_mean"] is None and empty["gpu_util_peak"] is None
    assert empty["peak_rss_mb"] == 900.0


def test_summary_cpu_peak_never_below_mean():
    """A high sliver after lower full rows is merged, so the peak is at least the mean."""
    mon = ResourceMonitor(interval=0.5)
    rows = []
    for t, cpu in ((0.0, None), (0.5, 50.0), (0.51, 80.0)):
        r = dict.fromkeys(COLUMNS)
        r.update(t_s=t, stage="train", proc_cpu_pct=cpu, rss_mb=10.0)
        rows.append(r)
    mon.rows, mon._dts = rows, [0.0, 0.5, 0.01]
    s = mon.summary("train")
    assert s["cpu_pct_mean"] == pytest.approx((50 * 0.5 + 80 * 0.01) / 0.51)
    assert s["cpu_pct_peak"] == pytest.approx(s["cpu_pct_mean"])
    mon.rows, mon._dts = rows[:1] + rows[2:], [0.0, 0.01]  # only a sliver: it is the peak
    assert mon.summary("train")["cpu_pct_peak"] == 80.0


def test_summary_of_a_real_run_matches_its_rows():
    """A real run's train summary agrees with the CPU the child burnt over the stage's time."""
    with ResourceMonitor(interval=0.1) as mon:
        mon.set_stage("train")
        used = burn_child(0.3)
        mon.set_stage("done")
    train = [r for r in mon.rows if r["stage"] == "train"]
    start_t = mon.rows[mon.rows.index(train[0]) - 1]["t_s"]
    duration = train[-1]["t_s"] - start_t
    s = mon.summary("train")
    assert s["cpu_pct_mean"] * duration / 100 == pytest.approx(used, abs=0.2)
    assert s["cpu_pct_peak"] >= s["cpu_pct_mean"]
    assert s["peak_rss_mb"] >= max(r["rss_mb"] for r in mon.rows)
    assert s["gpu_util_mean"] is None and s["gpu_power_mean_w"] is None


def test_write_csv_round_trips(tmp_path):
    """resources.csv has the schema's columns in order, one line per row, empty GPU cells."""
    with ResourceMonitor(interval=0.05) as mon:
        time.sleep(0.12)
        mon.set_stage("train")
        time.sleep(0.12)
    out = mon.write_csv(tmp_path / "cell" / schema.RESOURCES_FILE)
    frame = pd.read_csv(out)
    assert list(frame.columns) == COLUMNS
    assert len(frame) == len(mon.rows)
    assert frame["stage"].tolist() == [r["stage"] for r in mon.rows]
    assert frame["t_s"].tolist() == pytest.approx([r["t_s"] for r in mon.rows])
    assert frame["rss_mb"].tolist() == pytest.approx([r["rss_mb"] for r in mon.rows])
    assert frame[list(GPU_COLUMNS)].isna().all().all()
    assert [p.name for p in out.parent.iterdir()] == [schema.RESOURCES_FILE]  # no temp files


# --------------------------------------------------------------------------- RAPL


def test_rapl_sums_top_level_packages_and_ignores_decoys(tmp_path):
    """Only intel-rapl:N package domains count; subdomains, psys and mmio are skipped."""
    root = make_powercap(tmp_path, {"intel-rapl:0": (1_000_000, 10**9),
                                    "intel-rapl:1": (5_000_000, 10**9)})
    rapl = Rapl(root)
    assert rapl.available
    assert [p.parent.name for p, _ in rapl.domains] == ["intel-rapl:0", "intel-rapl:1"]
    assert rapl.read() == 0.0
    set_energy(root, "intel-rapl:0", 3_500_000)
    set_energy(root, "intel-rapl:1", 6_000_000)
    set_energy(root, "intel-rapl:0:0", 999_999_999)
    assert rapl.read() == pytest.approx(3.5)


def test_rapl_handles_wraparound(tmp_path):
    """A counter that passes max_energy_range_uj and restarts from 0 still adds up."""
    max_range = 262_143_328_850
    root = make_powercap(tmp_path, {"intel-rapl:0": (max_range - 2_000_000, max_range)})
    rapl = Rapl(root)
    set_energy(root, "intel-rapl:0", max_range - 500_000)
    assert rapl.read() == pytest.approx(1.5)
    set_energy(root, "intel-rapl:0", 1_500_000)  # wrapped: 0.5 J to the top, then 1.5 J
    assert rapl.read() == pytest.approx(3.5)
    set_energy(root, "intel-rapl:0", 2_500_000)
    assert rapl.read() == pytest.approx(4.5)


def test_rapl_unreadable_or_missing_gives_none(tmp_path):
    """No powercap tree, or unreadable counters, give no source and no values."""
    assert not Rapl(tmp_path / "no-such-dir").available
    assert Rapl(tmp_path / "no-such-dir").read() is None
    bad = tmp_path / "bad" / "intel-rapl:0"
    bad.mkdir(parents=True)
    (bad / "energy_uj").mkdir()  # reading a directory fails like a permission error would
    (bad / "max_energy_range_uj").write_text("100\n")
    assert not Rapl(tmp_path / "bad").available
    garbage = tmp_path / "garbage" / "intel-rapl:0"
    garbage.mkdir(parents=True)
    (garbage / "energy_uj").write_text("not a number\n")
    (garbage / "max_energy_range_uj").write_text("100\n")
    assert not Rapl(tmp_path / "garbage").available


def test_rapl_read_failure_mid_run_recovers(tmp_path):
    """A counter unreadable for one read gives None then; the next read counts the gap."""
    root = make_powercap(tmp_path, {"intel-rapl:0": (0, 10**9)})
    rapl = Rapl(root)
    (root / "intel-rapl:0" / "energy_uj").write_text("garbage\n")
    assert rapl.read() is None
    set_energy(root, "intel-rapl:0", 4_000_000)
    assert rapl.read() == pytest.approx(4.0)


def test_monitor_records_cpu_energy_from_fake_powercap(tmp_path):
    """The monitor fills cpu_energy_j from RAPL and energy() reads it synchronously."""
    root = make_powercap(tmp_path, {"intel-rapl:0": (10_000_000, 10**9)})
    with ResourceMonitor(interval=60.0, powercap_root=root) as mon:
        assert mon.cpu_energy_source == "rapl"
        e0 = mon.energy()
        set_energy(root, "intel-rapl:0", 17_000_000)
        e1 = mon.energy()
    assert e0["cpu_j"] == 0.0 and e1["cpu_j"] == pytest.approx(7.0)
    assert mon.rows[0]["cpu_energy_j"] == 0.0
    assert mon.rows[-1]["cpu_energy_j"] == pytest.approx(7.0)


def test_monitor_without_powercap_leaves_cpu_energy_empty(tmp_path):
    """Without RAPL the source is None and cpu_energy_j stays empty, with no error."""
    with ResourceMonitor(interval=60.0, powercap_root=tmp_path / "none") as mon:
        pass
    assert mon.cpu_energy_source is None
    assert all(r["cpu_energy_j"] is None for r in mon.rows)
    assert mon.energy()["cpu_j"] is None and mon.errors == []


# --------------------------------------------------------------------------- NVML


def test_no_gpu_index_never_touches_nvml():
    """gpu_index=None keeps the GPU columns empty without calling NVML at all."""
    fake = FakeNvml()
    with ResourceMonitor(interval=60.0, gpu_index=None, nvml=fake) as mon:
        pass
    assert fake.calls == 0
    assert all(r[c] is None for r in mon.rows for c in GPU_COLUMNS)
    assert mon.gpu_energy_source is None


def test_nvml_init_failure_leaves_gpu_columns_empty():
    """When nvmlInit fails the monitor runs on, GPU columns empty, the reason recorded."""
    with ResourceMonitor(interval=0.05, gpu_index=0, nvml=FakeNvml(fail_init=True)) as mon:
        time.sleep(0.1)
    assert all(r[c] is None for r in mon.rows for c in GPU_COLUMNS)
    assert mon.errors == []
    assert mon.gpu_energy_source is None
    assert "Library Not Found" in mon.gpu_unavailable_reason
    assert mon.energy()["gpu_j"] is None


def real_nvml_error() -> str | None:
    """Why the real NVML cannot open CUDA device 0 here (no library, no driver, no device), in
    the monitor's words; None when it can."""
    pynvml = pytest.importorskip("pynvml")
    try:
        pynvml.nvmlInit()
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    try:
        gpusampler._cuda_to_nvml(pynvml, 0, None)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    finally:
        pynvml.nvmlShutdown()
    return None


def test_real_pynvml_never_breaks_the_monitor():
    """With the real pynvml, with or without a driver, the monitor samples and stops cleanly,
    and it opens the GPU exactly when NVML, asked directly, can."""
    nvml_error = real_nvml_error()
    with ResourceMonitor(interval=0.05, gpu_index=0) as mon:
        time.sleep(0.06)
    assert len(mon.rows) >= 2
    assert not mon.running
    assert (mon.gpu_unavailable_reason is None) == (nvml_error is None), (
        mon.gpu_unavailable_reason, nvml_error)


def test_real_pynvml_without_a_driver_leaves_gpu_columns_empty():
    """Where the real NVML cannot open a GPU, the monitor records why, silently: no errors,
    no energy source, empty GPU columns."""
    nvml_error = real_nvml_error()
    if nvml_error is None:
        pytest.skip("NVML opens a GPU on this machine: test_real_nvml_reads_a_gpu covers it")
    with ResourceMonitor(interval=0.05, gpu_index=0) as mon:
        time.sleep(0.06)
    assert mon.gpu_unavailable_reason == nvml_error
    assert mon.errors == [] and mon.gpu_energy_source is None
    assert all(r[c] is None for r in mon.rows for c in GPU_COLUMNS)
    assert mon.energy()["gpu_j"] is None


@pytest.mark.gpu
def test_real_nvml_reads_a_gpu():
    """On a machine with an NVIDIA driver, the GPU columns fill and energy never decreases."""
    nvml_error = real_nvml_error()
    if nvml_error is not None:
        pytest.skip(f"torch sees a GPU, but NVML cannot open it: {nvml_error}")
    with ResourceMonitor(interval=0.05, gpu_index=0) as mon:
        time.sleep(0.3)
    assert mon.gpu_unavailable_reason is None
    assert mon.gpu_energy_source in ("nvml-counter", "nvml-power-integral")
    last = mon.rows[-1]
    assert last["gpu_mem_mb"] > 0 and last["gpu_power_w"] > 0
    assert 0 <= last["gpu_util_pct"] <= 100
    energies = [r["gpu_energy_j"] for r in mon.rows if r["gpu_energy_j"] is not None]
    assert len(energies) >= 2 and energies == sorted(energies)


def test_nvml_counter_energy_and_readings():
    """With an energy counter, gpu_energy_j is the counter's growth in J; W and MiB converted."""
    fake = FakeNvml(counter=True, powers_mw=(250_000.0,))
    mon = ResourceMonitor(interval=60.0, gpu_index=0, nvml=fake).start()
    assert mon.gpu_energy_source == "nvml-counter"
    fake.energy_mj += 5_000.0
    assert mon.energy()["gpu_j"] == pytest.approx(5.0)
    fake.energy_mj += 1_500.0
    mon.stop()
    last = mon.rows[-1]
    assert last["gpu_energy_j"] == pytest.approx(6.5)
    assert (last["gpu_util_pct"], last["gpu_mem_mb"], last["gpu_power_w"]) == (87.0, 512.0,
                                                                              250.0)
    assert mon.rows[0]["gpu_energy_j"] == 0.0
    assert fake.shutdowns == 1
    s = mon.summary("setup")
    assert s["gpu_util_peak"] is None and s["gpu_power_mean_w"] == pytest.approx(250.0)


def test_nvml_power_integral_when_counter_unsupported():
    """Without a counter, energy is power integrated over time (trapezoid rule)."""
    fake = FakeNvml(counter=False, powers_mw=(100_000.0, 100_000.0, 200_000.0, 200_000.0))
    gpu = NvmlGpu(0, nvml=fake)
    assert gpu.energy_source == "nvml-power-integral"
    t = time.perf_counter() + 10.0
    e_a = gpu.energy_j(t)  # 100 W from construction to t
    assert e_a == pytest.approx(1000.0, rel=0.01)
    e_b = gpu.energy_j(t + 1.0)  # 100 W -> 200 W over 1 s: 150 J
    assert e_b - e_a == pytest.approx(150.0)
    assert gpu.read(t + 3.0)["gpu_energy_j"] - e_b == pytest.approx(400.0)
    gpu.close()


def test_monitor_power_integral_matches_constant_power():
    """At a constant 100 W the monitor's GPU energy grows 100 J per second of wall time."""
    fake = FakeNvml(counter=False, powers_mw=(100_000.0,))
    with ResourceMonitor(interval=0.05, gpu_index=0, nvml=fake) as mon:
        assert mon.gpu_energy_source == "nvml-power-integral"
        # Each reading bracketed by the host clock: a pause of this process between a clock
        # read and the reading (another worker loads the machine) widens the bracket instead
        # of failing the test.
        t0_before, e0, t0_after = time.perf_counter(), mon.energy()["gpu_j"], time.perf_counter()
        time.sleep(0.3)
        t1_before, e1, t1_after = time.perf_counter(), mon.energy()["gpu_j"], time.perf_counter()
    assert 100.0 * (t1_before - t0_after) - 1.0 <= e1 - e0 <= 100.0 * (t1_after - t0_before) + 1.0
    energies = [r["gpu_energy_j"] for r in mon.rows]
    assert energies == sorted(energies)


def test_no_energy_source_when_neither_counter_nor_power():
    """A board with neither counter nor power reading has no energy source, other fields work."""

    class NoPower(FakeNvml):
        def nvmlDeviceGetPowerUsage(self, handle):
            raise RuntimeError("Not Supported")

    with ResourceMonitor(interval=60.0, gpu_index=0, nvml=NoPower(counter=False)) as mon:
        pass
    assert mon.gpu_energy_source is None
    assert mon.rows[-1]["gpu_util_pct"] == 87.0
    assert mon.rows[-1]["gpu_power_w"] is None and mon.rows[-1]["gpu_energy_j"] is None
    assert mon.errors == ["nvml power: RuntimeError: Not Supported"]


@pytest.mark.parametrize(("visible", "index", "uuid", "lookup"), [
    (None, 1, None, ("index", 1)),
    ("3,5", 1, None, ("index", 5)),
    ("GPU-aaaa,GPU-bbbb", 1, None, ("uuid", "GPU-bbbb")),
    ("MIG-cccc", 0, None, ("uuid", "MIG-cccc")),
    ("3,5", 0, "1234-abcd", ("uuid", "GPU-1234-abcd")),
    ("0", 2, None, ("index", 2)),
])
def test_cuda_index_maps_to_nvml_device(monkeypatch, visible, index, uuid, lookup):
    """The watched NVML device follows gpu_uuid, then CUDA_VISIBLE_DEVICES, then the index."""
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    fake = FakeNvml()
    NvmlGpu(index, gpu_uuid=uuid, nvml=fake).close()
    assert fake.lookups == [lookup]


# --------------------------------------------------------------------------- GPU state, AMD SMI


class StatefulNvml(FakeNvml):
    """FakeNvml with clocks, an enforced power limit and throttle reasons (the newer NVML
    name fails as on an older driver, so the older one is used)."""

    NVML_CLOCK_SM, NVML_CLOCK_MEM = 1, 2

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.clocks = {1: 1980, 2: 2619}
        self.reasons = 0x4 | 0x20

    def nvmlDeviceGetClockInfo(self, handle, kind):
        return self.clocks[kind]

    def nvmlDeviceGetEnforcedPowerLimit(self, handle):
        return 700_000  # mW

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle):
        raise RuntimeError("Function Not Found")

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle):
        return self.reasons


def test_nvml_state_reads_clocks_power_limit_and_throttle_reasons():
    """NvmlGpu.state gives the SM and memory clocks (MHz), the enforced limit (W) and the
    throttle reasons by name, falling back to the older NVML call."""
    gpu = NvmlGpu(0, nvml=StatefulNvml())
    assert gpu.state() == {"sm_clock_mhz": 1980.0, "mem_clock_mhz": 2619.0,
                           "power_limit_w": 700.0, "throttle": "sw_power_cap+sw_thermal"}
    assert NvmlGpu(0, nvml=FakeNvml()).state() == {
        "sm_clock_mhz": None, "mem_clock_mhz": None, "power_limit_w": None, "throttle": None}


def test_throttle_text_names_every_reason():
    """No reason is none, known bits by name, unknown bits in hex, unknown mask None."""
    assert gpusampler.throttle_text(0) == "none"
    assert gpusampler.throttle_text(0x1 | 0x8 | 0x80) == "idle+hw_slowdown+hw_power_brake"
    assert gpusampler.throttle_text(0x4 | 0x1000) == "sw_power_cap+0x1000"
    assert gpusampler.throttle_text(None) is None


def test_monitor_records_gpu_state_at_start_and_end():
    """record_gpu_state keeps the state at the start and end of the timed epochs, and
    gpu_states gives them as the summary's result fields; empty without a GPU."""
    fake = StatefulNvml()
    with ResourceMonitor(interval=60.0, gpu_index=0, nvml=fake) as mon:
        mon.record_gpu_state("start")
        fake.clocks[1], fake.reasons = 1410, 0x4
        mon.record_gpu_state("end")
    states = mon.gpu_states()
    assert set(states) <= set(schema.RESULT_FIELDS) and len(states) == 8
    assert (states["gpu_sm_clock_start_mhz"], states["gpu_sm_clock_end_mhz"]) == (1980.0, 1410.0)
    assert states["gpu_power_limit_start_w"] == states["gpu_power_limit_end_w"] == 700.0
    assert (states["gpu_throttle_start"], states["gpu_throttle_end"]) == (
        "sw_power_cap+sw_thermal", "sw_power_cap")
    with ResourceMonitor(interval=60.0) as bare:
        bare.record_gpu_state("start")
    assert set(bare.gpu_states().values()) == {None}
    with pytest.raises(ValueError, match="start or end"):
        mon.record_gpu_state("middle")


class FakeAmdSmi:
    """Stands in for ROCm's amdsmi module: one MI300X-like device; ``counter`` False makes
    the energy accumulator unsupported ("N/A"), as on some boards."""

    class AmdSmiClkType:
        GFX, MEM = "gfx", "mem"

    def __init__(self, counter: bool = True):
        self.counter = counter
        self.energy = 1000
        self.power = 550
        self.shutdowns = 0

    def amdsmi_init(self):
        pass

    def amdsmi_shut_down(self):
        self.shutdowns += 1

    def amdsmi_get_processor_handles(self):
        return ["gpu0", "gpu1"]

    def amdsmi_get_energy_count(self, handle):
        if not self.counter:
            return {"energy_accumulator": "N/A", "counter_resolution": "N/A"}
        return {"energy_accumulator": self.energy, "counter_resolution": 15.3, "timestamp": 0}

    def amdsmi_get_power_info(self, handle):
        return {"current_socket_power": self.power, "average_socket_power": "N/A"}

    def amdsmi_get_gpu_activity(self, handle):
        return {"gfx_activity": 93, "umc_activity": 40, "mm_activity": "N/A"}

    def amdsmi_get_gpu_vram_usage(self, handle):
        return {"vram_used": 2048, "vram_total": 196592}

    def amdsmi_get_clock_info(self, handle, kind):
        return {"clk": {"gfx": 2100, "mem": 1300}[kind], "min_clk": 500, "max_clk": 2100}

    def amdsmi_get_power_cap_info(self, handle):
        return {"power_cap": 750_000_000, "default_power_cap": 750_000_000}  # uW

    def amdsmi_get_gpu_metrics_info(self, handle):
        return {"throttle_status": 0}


def test_amdsmi_gpu_reads_power_energy_and_state():
    """AmdSmiGpu reads utilisation, VRAM, socket power and the energy accumulator (count x
    resolution in uJ), and clocks, power cap and throttle status; written against ROCm's
    amdsmi API, run here against a fake of it only."""
    smi = FakeAmdSmi()
    gpu = gpusampler.AmdSmiGpu(0, amdsmi=smi)
    assert gpu.energy_source == "amdsmi-counter"
    smi.energy += 1_000_000
    row = gpu.read(time.perf_counter())
    assert row["gpu_util_pct"] == 93.0 and row["gpu_mem_mb"] == 2048.0
    assert row["gpu_power_w"] == 550.0
    assert row["gpu_energy_j"] == pytest.approx(15.3)
    assert gpu.state() == {"sm_clock_mhz": 2100.0, "mem_clock_mhz": 1300.0,
                           "power_limit_w": 750.0, "throttle": "none"}
    gpu.close()
    assert smi.shutdowns == 1


def test_amdsmi_without_a_counter_integrates_power():
    """Without an energy accumulator the energy is the power integral over time."""
    gpu = gpusampler.AmdSmiGpu(0, amdsmi=FakeAmdSmi(counter=False))
    assert gpu.energy_source == "amdsmi-power-integral"
    t0 = gpu._last_power[0]
    assert gpu.energy_j(t0 + 2.0) == pytest.approx(1100.0)


def test_amdsmi_follows_hip_visible_devices(monkeypatch):
    """Visible GPU 0 under HIP_VISIBLE_DEVICES=1 is AMD SMI's device 1."""
    monkeypatch.setenv("HIP_VISIBLE_DEVICES", "1")
    assert gpusampler.AmdSmiGpu(0, amdsmi=FakeAmdSmi()).handle == "gpu1"


def test_monitor_uses_amdsmi_for_an_amd_gpu():
    """gpu_vendor amd samples through AMD SMI: GPU columns, its energy source, its state."""
    with ResourceMonitor(interval=60.0, gpu_index=0, gpu_vendor="amd",
                         amdsmi=FakeAmdSmi()) as mon:
        mon.record_gpu_state("start")
    assert mon.gpu_energy_source == "amdsmi-counter"
    assert mon.rows[0]["gpu_power_w"] == 550.0
    assert mon.gpu_states()["gpu_sm_clock_start_mhz"] == 2100.0


def test_amd_gpu_without_amdsmi_has_no_power_source(monkeypatch):
    """Where amdsmi cannot be imported (as here), an AMD GPU's columns stay empty and the
    reason says why: energy then counts as assumed in the cost table."""
    monkeypatch.setitem(sys.modules, "amdsmi", None)
    with ResourceMonitor(interval=60.0, gpu_index=0, gpu_vendor="amd") as mon:
        pass
    assert mon.gpu_energy_source is None
    assert "amdsmi" in mon.gpu_unavailable_reason
    assert mon.rows[0]["gpu_power_w"] is None


def test_summary_flags_a_machine_others_kept_busy(monkeypatch):
    """The machine's load over the stage is recorded, and the part other processes used
    decides busy: 2 cores at 90 % busy while the cell used one core (50 %) is busy."""
    monkeypatch.setattr(monitor.psutil, "cpu_count", lambda *a, **k: 2)
    mon = ResourceMonitor(interval=0.5)
    base = {c: None for c in RESOURCE_COLUMNS}
    mon.rows = [{**base, "t_s": 0.5, "stage": "train", "proc_cpu_pct": 100.0,
                 "sys_cpu_pct": 90.0},
                {**base, "t_s": 1.0, "stage": "train", "proc_cpu_pct": 100.0,
                 "sys_cpu_pct": 60.0}]
    mon._dts = [0.5, 0.5]
    s = mon.summary("train")
    assert s["system_load_mean"] == pytest.approx(75.0)
    assert s["others_load_mean"] == pytest.approx(25.0) and s["busy"] is False
    mon.rows[1]["sys_cpu_pct"] = 90.0
    s = mon.summary("train")
    assert s["others_load_mean"] == pytest.approx(40.0) and s["busy"] is True
