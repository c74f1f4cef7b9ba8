"""Tests that the fast path's replay reads and writes (rl_lightning/fast/replay.py) equal the buffer's own calls."""

from __future__ import annotations

import warnings

import pytest
import torch
from tensordict import TensorDict

from rl_lightning.data import make_replay_buffer
from rl_lightning.data.replay import sample_batch, store_transitions

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from torchrl.data.replay_buffers.samplers import SamplerWithoutReplacement


@pytest.mark.parametrize("storage", ["memory", "memmap"])
def test_sample_batch_reads_what_buffer_sample_draws(storage, tmp_path):
    """Test that sample_batch's uniform fast path returns buffer.sample()'s transitions and keys under the same seed."""
    buffer = make_replay_buffer(50, 8, storage=storage, scratch_dir=str(tmp_path))
    for i in range(30):
        buffer.extend(
            TensorDict(
                {"obs": torch.full((1, 2), float(i)), "reward": torch.tensor([float(i)])},
                batch_size=[1],
            )
        )
    for seed in range(5):
        torch.manual_seed(seed)
        ours = sample_batch(buffer)
        torch.manual_seed(seed)
        expected = buffer.sample()
        assert set(ours.keys()) == set(expected.keys()) and "index" in ours.keys()
        for key in expected.keys():
            torch.testing.assert_close(ours[key], expected[key])
    assert len(set(ours["reward"].tolist())) > 1  # a real draw, not one repeated row


@pytest.mark.parametrize("storage", ["memory", "memmap"])
def test_store_transitions_leaves_the_buffer_as_extend_does(storage, tmp_path):
    """Test that the writer fast path leaves what extend leaves, past a wrap-around.

    Contents, length, cursor, samples, and a state dict that loads into a fresh buffer alike.
    """
    ours = make_replay_buffer(20, 8, storage=storage, scratch_dir=str(tmp_path / "ours"))
    theirs = make_replay_buffer(20, 8, storage=storage, scratch_dir=str(tmp_path / "theirs"))
    for i in range(13):  # 2 transitions per write: 26 written into 20 slots
        rows = torch.arange(2 * i, 2 * i + 2, dtype=torch.float32)
        data = TensorDict({"obs": rows.unsqueeze(-1).expand(2, 3), "reward": rows}, batch_size=[2])
        store_transitions(ours, data.clone())
        theirs.extend(data.clone())
        assert len(ours) == len(theirs)
    assert ours.writer.state_dict() == theirs.writer.state_dict() and ours.writer._cursor == 6
    stored = ours.storage[torch.arange(20)]
    expected = theirs.storage[torch.arange(20)]
    assert stored["reward"].tolist() == expected["reward"].tolist() and 25.0 in stored["reward"].tolist()
    assert torch.equal(stored["obs"], expected["obs"])
    torch.manual_seed(0)
    a = sample_batch(ours)
    torch.manual_seed(0)
    b = sample_batch(theirs)
    assert torch.equal(a["reward"], b["reward"]) and torch.equal(a["index"], b["index"])
    restored = make_replay_buffer(20, 8, storage=storage, scratch_dir=str(tmp_path / "restored"))
    restored.load_state_dict(ours.state_dict())
    assert len(restored) == 20 and restored.writer.state_dict() == theirs.writer.state_dict()
    assert torch.equal(restored.storage[torch.arange(20)]["obs"], expected["obs"])


def test_store_transitions_leaves_other_samplers_to_extend():
    """Test that a buffer whose sampler is not uniform is written through its own extend (priorities, hooks)."""
    buffer = make_replay_buffer(10, 2)
    calls = []
    original = buffer.extend
    data = TensorDict({"obs": torch.zeros(1, 1)}, batch_size=[1])
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(buffer, "extend", lambda *a, **k: calls.append(1) or original(*a, **k))
        store_transitions(buffer, data)
        assert calls == [] and len(buffer) == 1  # uniform: the fast path
        mp.setattr(buffer, "_sampler", SamplerWithoutReplacement())
        store_transitions(buffer, data)
        assert calls == [1] and len(buffer) == 2


def test_sample_batch_leaves_other_samplers_to_the_buffer():
    """Test that a buffer whose sampler is not uniform is sampled through its own sample()."""
    buffer = make_replay_buffer(10, 2)
    calls = []
    original = buffer.sample
    buffer.extend(TensorDict({"obs": torch.zeros(4, 1)}, batch_size=[4]))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(buffer, "sample", lambda *a, **k: calls.append(1) or original(*a, **k))
        sample_batch(buffer)
        assert calls == []  # uniform: the fast path
        mp.setattr(buffer, "_sampler", SamplerWithoutReplacement())
        sample_batch(buffer)
        assert calls == [1]
