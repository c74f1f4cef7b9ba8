"""The replay buffer (rl_lightning/data/replay_buffer.py): ring writes, uniform draws, state, refusals."""

import gc
import io

import pytest
import torch
from tensordict import TensorDict

from rl_lightning.data.replay import make_replay_buffer
from rl_lightning.data.replay_buffer import ReplayBuffer


def rows(first: int, count: int) -> TensorDict:
    """``count`` transitions numbered from ``first``, with a nested (Dict) observation."""
    values = torch.arange(first, first + count)
    return TensorDict({"obs": {"x": values.float().unsqueeze(-1)}, "n": values}, batch_size=[count])


@pytest.mark.parametrize("storage", ["memory", "memmap"])
def test_writes_go_round_the_ring_in_order_and_keep_the_latest(storage, tmp_path):
    """Test that rows are written after the latest ones, wrap around, and a write larger than the capacity keeps its
    last rows, as one write per row would; each write returns the rows it went to. Memmap files go with the buffer."""
    buffer = ReplayBuffer(5, 2, storage, scratch_dir=str(tmp_path / "scratch"))
    assert buffer.extend(rows(0, 0)).numel() == 0 and len(buffer) == 0 and buffer.storage is None
    assert buffer.extend(rows(0, 3)).tolist() == [0, 1, 2]
    assert buffer.extend(rows(3, 4)).tolist() == [3, 4, 0, 1]
    assert len(buffer) == 5 and buffer.cursor == 2
    assert buffer.storage["n"].tolist() == [5, 6, 2, 3, 4]
    assert buffer.storage["obs", "x"][:, 0].tolist() == [5.0, 6.0, 2.0, 3.0, 4.0]
    assert buffer.extend(rows(10, 12)).tolist() == [4, 0, 1, 2, 3]  # 12 rows into 5: the last 5, in order
    assert buffer.storage["n"].tolist() == [18, 19, 20, 21, 17] and buffer.cursor == 4
    if storage == "memmap":
        assert buffer.storage.is_memmap() and any((tmp_path / "scratch").rglob("*.memmap"))
        del buffer
        gc.collect()
        assert not any((tmp_path / "scratch").iterdir())  # its files go with it


def test_draws_are_uniform_over_the_stored_rows_with_replacement():
    """Test that samples come only from stored rows, cover them evenly, follow torch's generator, and that an empty
    buffer says so."""
    buffer = ReplayBuffer(100, 4)
    with pytest.raises(RuntimeError, match="empty"):
        buffer.sample()
    buffer.extend(rows(0, 10))
    assert buffer.sample().batch_size == torch.Size([4]) and buffer.sample(7).batch_size == torch.Size([7])
    torch.manual_seed(0)
    drawn = buffer.sample(20_000)["n"]
    counts = torch.bincount(drawn, minlength=10)
    assert drawn.max() == 9 and counts.min() > 1_800 and counts.max() < 2_200  # 2,000 expected each
    torch.manual_seed(0)
    assert torch.equal(buffer.sample(20_000)["n"], drawn)


@pytest.mark.parametrize("storage", ["memory", "memmap"])
def test_state_restores_rows_and_write_position_and_holds_only_stored_rows(storage, tmp_path):
    """Test that a wrapped buffer's state is its storage (no copy), restores the same rows and cursor (the next write
    lands alike), loads with weights_only, and grows with what is stored rather than with the capacity."""
    buffer = ReplayBuffer(6, 2, storage, scratch_dir=str(tmp_path))
    buffer.extend(rows(0, 8))
    state = buffer.state_dict()  # a full buffer's rows are its storage, not a copy of it
    assert state["rows"]["n"].data_ptr() == buffer.storage["n"].data_ptr()
    saved = io.BytesIO()
    torch.save(state, saved)
    saved.seek(0)
    restored = ReplayBuffer(6, 2, storage, scratch_dir=str(tmp_path))
    restored.load_state_dict(torch.load(saved, weights_only=True))
    assert len(restored) == 6 and restored.cursor == buffer.cursor == 2
    assert torch.equal(restored.storage["n"][:], buffer.storage["n"][:])
    for each in (buffer, restored):
        each.extend(rows(100, 1))
    assert torch.equal(restored.storage["n"][:], buffer.storage["n"][:])
    small, large = ReplayBuffer(10**6, 2), io.BytesIO()
    small.extend(rows(0, 3))
    torch.save(small.state_dict(), large)
    assert large.tell() < 10_000  # 3 rows, not a million
    empty = ReplayBuffer(6, 2)
    empty.load_state_dict(ReplayBuffer(6, 2).state_dict())
    assert len(empty) == 0 and empty.storage is None


def test_a_state_of_another_capacity_or_no_buffer_is_refused_with_the_fix():
    """Test that loading a state of another buffer_size names both sizes and the fixes, and one of another form (an
    earlier version's) says so."""
    buffer = ReplayBuffer(8, 2)
    buffer.extend(rows(0, 3))
    with pytest.raises(ValueError, match=r"buffer_size=8 and this run 16\. Resume with buffer_size=8.*save_replay_buf"):
        ReplayBuffer(16, 2).load_state_dict(buffer.state_dict())
    with pytest.raises(ValueError, match="not in this version's form.*save_replay_buffer=false"):
        ReplayBuffer(8, 2).load_state_dict({"_storage": {}})
    with pytest.raises(ValueError, match="storage must be one of"):
        ReplayBuffer(8, 2, storage="disk")


def test_a_damaged_state_is_refused_naming_the_damage_and_the_fix():
    """Test that a buffer state with rows of unequal lengths, a missing column, more rows than the capacity or a write
    position outside it is refused as damaged, naming the fixes (raw IndexError/TypeError, or loaded silently)."""
    buffer = ReplayBuffer(8, 2)
    buffer.extend(rows(0, 3))
    good = buffer.state_dict()
    torn = {**good, "rows": {**good["rows"], "n": good["rows"]["n"][:2]}}
    missing = {**good, "rows": {**good["rows"], "n": None}}
    for state in (torn, missing, {**good, "cursor": 9}, {**good, "cursor": -1}):
        with pytest.raises(
            ValueError, match=r"replay buffer is damaged .* earlier checkpoint.*save_replay_buffer=false"
        ):
            ReplayBuffer(8, 2).load_state_dict(state)
    with pytest.raises(ValueError, match=r"damaged \(torch.Size\(\[9\]\) rows"):
        big = ReplayBuffer(16, 2)
        big.extend(rows(0, 9))
        ReplayBuffer(8, 2).load_state_dict({**big.state_dict(), "capacity": 8})
    restored = ReplayBuffer(8, 2)
    restored.load_state_dict(good)
    assert len(restored) == 3 and restored.cursor == 3


def test_rows_stay_on_the_device_of_the_first_write_or_the_one_given():
    """Test that ``device="auto"`` keeps the rows where the first write came from, and a given device is used."""
    auto, given = ReplayBuffer(4, 2), ReplayBuffer(4, 2, device="meta")
    auto.extend(rows(0, 2))
    assert auto.storage.device == torch.device("cpu") and auto.storage["n"].device == torch.device("cpu")
    given.extend(rows(0, 2).to("meta"))
    assert given.storage["n"].device == torch.device("meta")


def test_a_restored_buffer_moves_to_where_the_writes_come_from_and_close_empties_it(tmp_path):
    """Test that an ``"auto"`` buffer restored from a checkpoint (which loads on the CPU) follows the envs' device at
    their next write, a memmap one stays on its files, and ``close`` deletes those files at once."""
    saved = ReplayBuffer(8, 2)
    saved.extend(rows(0, 5))
    restored = ReplayBuffer(8, 2)
    restored.load_state_dict(saved.state_dict())
    assert restored.storage["n"].device == torch.device("cpu")
    restored.extend(rows(5, 1).to("meta"))  # an env on another device writes next
    assert restored.storage["n"].device == torch.device("meta") and len(restored) == 6
    memmap = ReplayBuffer(8, 2, "memmap", scratch_dir=str(tmp_path))
    memmap.load_state_dict(saved.state_dict())
    memmap.extend(rows(5, 1))
    assert memmap.storage.is_memmap() and memmap.storage["n"][:6].tolist() == [0, 1, 2, 3, 4, 5]
    memmap.close()
    assert memmap.storage is None and len(memmap) == 0 and not any(tmp_path.iterdir())


def test_a_buffer_that_cannot_fill_a_batch_is_refused_naming_both_sizes():
    """Test that a capacity of 0, or one smaller than a batch (no gradient step would ever be taken), is refused."""
    with pytest.raises(ValueError, match="buffer_size must be a positive integer, got 0"):
        make_replay_buffer(0, 4)
    with pytest.raises(ValueError, match="batch_size=16 is more than the 8 transitions a buffer_size=8 buffer"):
        make_replay_buffer(8, 16)
