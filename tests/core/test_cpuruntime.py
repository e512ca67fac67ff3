"""Tests of mnistbench.core.cpuruntime: which allocator a cell asks for, what the process really
loaded (from its maps), the preload environment, glibc's tuning, and that a cell started by the
console script, by itself or through the fork server, records the allocator it really used."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mnistbench.core import cpuruntime
from mnistbench.core.cpuruntime import (
    AllocatorError,
    loaded_allocator,
    preload_environment,
    resolve,
)
from mnistbench.launch import forkserver

MNISTBENCH = Path(sys.executable).parent / "mnistbench"
JEMALLOC = cpuruntime.library_path("jemalloc")
needs_jemalloc = pytest.mark.skipif(
    JEMALLOC is None, reason="jemalloc is not installed (apt-get install libjemalloc2; "
    "scripts/setup-system does as root)")


def test_auto_takes_the_first_installed_library_else_tuned_glibc(monkeypatch):
    """auto is tcmalloc (the fastest measured), else glibc-tuned, never jemalloc (slower
    with Debian's defaults); glibc and glibc-tuned need nothing."""
    found = {"jemalloc": "/x/libjemalloc.so.2", "tcmalloc": "/x/libtcmalloc_minimal.so.4"}
    monkeypatch.setattr(cpuruntime, "library_path", found.get)
    assert resolve("auto") == ("tcmalloc", "/x/libtcmalloc_minimal.so.4")
    found["tcmalloc"] = None
    assert resolve("auto") == ("glibc-tuned", None)
    assert resolve("glibc") == ("glibc", None)
    found["jemalloc"] = None
    with pytest.raises(AllocatorError, match="apt-get install libjemalloc2"):
        resolve("jemalloc")
    with pytest.raises(AllocatorError, match="allowed: auto, glibc"):
        resolve("mimalloc")


def test_preload_environment_puts_one_allocator_first_and_keeps_other_libraries():
    """LD_PRELOAD gets the allocator first, loses other allocators, keeps unrelated entries."""
    env = {"LD_PRELOAD": "/usr/lib/libtcmalloc_minimal.so.4 /opt/libfoo.so", "A": "1"}
    out = preload_environment(env, "libjemalloc.so.2")
    assert out["LD_PRELOAD"] == "libjemalloc.so.2 /opt/libfoo.so" and out["A"] == "1"
    assert preload_environment(env, None)["LD_PRELOAD"] == "/opt/libfoo.so"
    assert "LD_PRELOAD" not in preload_environment({"LD_PRELOAD": "libjemalloc.so.2"}, None)


def test_loaded_allocator_reads_the_process_maps(tmp_path):
    """A mapped jemalloc or tcmalloc library is what runs; otherwise glibc."""
    maps = tmp_path / "maps"
    line = "7f00-7f10 r-xp 00000000 08:01 123 {}\n"
    maps.write_text(line.format("/usr/lib/x86_64-linux-gnu/libc.so.6"))
    assert loaded_allocator(maps) == ("glibc", "")
    maps.write_text(line.format("/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4.5.10"))
    assert loaded_allocator(maps)[0] == "tcmalloc"
    maps.write_text(line.format("/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"))
    assert loaded_allocator(maps) == ("jemalloc", "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2")


def test_tuned_glibc_is_applied_and_recorded():
    """In a fresh process, glibc-tuned calls mallopt and the record says so."""
    code = ("from mnistbench.core import cpuruntime; r = cpuruntime.prepare('glibc-tuned'); "
            "print(r['allocator_loaded'], '|', r['malloc_tuning'])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == f"glibc-tuned | {cpuruntime.TUNING_TEXT}"


def _train(tmp_path: Path, data: Path, allocator: str, env: dict | None = None) -> dict:
    out = tmp_path / f"cell-{allocator}"
    proc = subprocess.run(
        [str(MNISTBENCH), "train", "--data", str(data), "--out", str(out), "--max-steps", "2",
         "--warmup-steps", "0", "--batch-size", "32", "--allocator", allocator, "--quiet"],
        capture_output=True, text=True, env=env, check=False, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads((out / "summary.json").read_text())


@pytest.mark.parametrize("allocator", ["glibc", "glibc-tuned",
                                       pytest.param("jemalloc", marks=needs_jemalloc)])
@pytest.mark.slow
def test_a_cell_records_the_allocator_it_really_used(tmp_path, tiny_mnist, allocator):
    """`mnistbench train --allocator X` re-executes itself with the library preloaded where
    needed, and its summary records X as loaded, whatever LD_PRELOAD it was started with."""
    env = dict(os.environ)
    if JEMALLOC:  # started with the wrong allocator preloaded: glibc cells must drop it
        env["LD_PRELOAD"] = JEMALLOC
    summary = _train(tmp_path, tiny_mnist, allocator, env)
    assert summary["params"]["allocator"] == allocator
    assert summary["env"]["allocator_loaded"] == allocator
    assert bool(summary["env"]["malloc_tuning"]) == (allocator == "glibc-tuned")
    assert summary["env"]["cpu_affinity"] and summary["env"]["interop_threads"]


@pytest.mark.slow
@needs_jemalloc
def test_the_fork_server_serves_its_allocator_and_refuses_another(tmp_path, tiny_mnist):
    """A fork server started under jemalloc serves jemalloc cells, which record jemalloc; a
    glibc cell differs in LD_PRELOAD, is refused and runs as its own process, recording
    glibc."""
    handle = forkserver.spawn(python=sys.executable, log=tmp_path / "fs.log",
                              allocator="jemalloc", loaders=["resident"])
    try:
        assert handle.wait_ready()
        cell_env = {**os.environ, **handle.environment()}
        served = _train(tmp_path, tiny_mnist, "jemalloc", cell_env)
        assert served["env"]["launch"] == "fork-server"
        assert served["env"]["allocator_loaded"] == "jemalloc"
        refused = _train(tmp_path, tiny_mnist, "glibc", cell_env)
        assert refused["env"]["launch"] == "exec"
        assert refused["env"]["allocator_loaded"] == "glibc"
    finally:
        handle.stop()
