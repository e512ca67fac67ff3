"""Tests for benchmarks/bench_setup.py: it times each step beside its calibration, prints the
ratios, and its exit code says whether every step met its target."""

from __future__ import annotations

import pytest

from tests.conftest import load_benchmark

bench = load_benchmark("bench_setup")


def test_every_step_is_timed_beside_its_calibration(tiny_mnist):
    results = bench.measure(tiny_mnist, repeats=1)
    assert set(results) == set(bench.TARGETS)
    assert all(seconds > 0 and calibration > 0 for seconds, calibration in results.values())


def test_the_report_gives_both_ratios_and_the_exit_code_the_targets(monkeypatch, capsys,
                                                                    tiny_mnist):
    met = {key: (target / 2, target / 4) for key, target in bench.TARGETS.items()}
    lines = bench.report(met)
    assert len(lines) == 3 and all("(x2.0)" in line and "target: 0.50" in line
                                   for line in lines)
    monkeypatch.setattr(bench, "measure", lambda root, repeats: met)
    assert bench.main(["--data", str(tiny_mnist), "--repeats", "1"]) == 0
    missed = {**met, "capture_cold": (bench.TARGETS["capture_cold"] * 1.5, 0.1)}
    monkeypatch.setattr(bench, "measure", lambda root, repeats: missed)
    assert bench.main(["--data", str(tiny_mnist), "--repeats", "1"]) == 1
    assert "ratio to the 1 s target: 1.50" in capsys.readouterr().out


def test_it_refuses_a_folder_without_mnist(tmp_path, capsys):
    with pytest.raises(SystemExit) as info:
        bench.main(["--data", str(tmp_path)])
    assert info.value.code == 2 and "mnistbench fetch" in capsys.readouterr().err
