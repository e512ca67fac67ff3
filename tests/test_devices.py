"""Tests of mnistbench.devices that the trainer's tests do not cover: the runner's note on why
a process has no GPU, which a cuda cell's unavailable reason carries."""

from __future__ import annotations

import pytest
import torch

from mnistbench import devices


def test_unavailable_reason_carries_the_runners_note(monkeypatch):
    """Without a GPU, pick_device('cuda') names the missing GPU and appends the note of
    $MNISTBENCH_GPU_NOTE (the docker runner's reason) when it is set."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.delenv(devices.GPU_NOTE_VAR, raising=False)
    with pytest.raises(devices.DeviceUnavailable) as plain:
        devices.pick_device("cuda")
    assert str(plain.value).startswith("no CUDA GPU is visible to torch")
    note = "docker could not give the container a GPU (no runtime)"
    monkeypatch.setenv(devices.GPU_NOTE_VAR, note)
    with pytest.raises(devices.DeviceUnavailable) as noted:
        devices.pick_device("cuda")
    assert str(noted.value) == f"{plain.value}; {note}"
