"""Tests of mnistbench.devices that the trainer's tests do not cover: the runner's note on why
a process has no GPU, which a cuda cell's unavailable reason carries. And the suite's ``gpu``
marker (tests/conftest.py): skipped, with the reason, where torch sees no CUDA GPU."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from mnistbench import devices, envvars

pytest_plugins = ["pytester"]

CONFTEST = Path(__file__).with_name("conftest.py")


def test_unavailable_reason_carries_the_runners_note(monkeypatch):
    """Without a GPU, pick_device('cuda') names the missing GPU and appends the note of
    $MNISTBENCH_GPU_NOTE (the docker runner's reason) when it is set."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.delenv(envvars.GPU_NOTE_VAR, raising=False)
    with pytest.raises(devices.DeviceUnavailable) as plain:
        devices.pick_device("cuda")
    assert str(plain.value).startswith("no CUDA GPU is visible to torch")
    note = "docker could not give the container a GPU (no runtime)"
    monkeypatch.setenv(envvars.GPU_NOTE_VAR, note)
    with pytest.raises(devices.DeviceUnavailable) as noted:
        devices.pick_device("cuda")
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
