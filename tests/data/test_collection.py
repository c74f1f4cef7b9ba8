"""What every data stream shares: the collection clock."""

from __future__ import annotations

import time

import torch

from rl_lightning.data.collection import timer


def test_the_collection_clock_waits_for_a_cuda_device_only_when_asked(monkeypatch):
    """Test that the clock synchronizes a CUDA device only with synchronize, and never the CPU."""
    waits = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: waits.append(device))
    assert timer(torch.device("cpu"), True) is time.perf_counter
    assert timer(torch.device("cuda"), False) is time.perf_counter
    clock = timer(torch.device("cuda"), True)
    assert clock() <= clock() and waits == [torch.device("cuda")] * 2
