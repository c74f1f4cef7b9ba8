"""Per-rank state in checkpoints: each rank restores its own entry; a world-size change is handled or refused."""

from __future__ import annotations

import pytest
import torch

from rl_lightning.data.replay_buffer import check_scratch_dir
from tests.helpers import tiny_replay_data, tiny_rollout_data


def _two_rank_state(data) -> dict:
    """A checkpoint entry as two ranks write it: rank 1's torch RNG differs from rank 0's."""
    state = data.state_dict()
    rank1 = dict(state["ranks"][0])
    torch.manual_seed(123)
    rank1["torch_rng"] = torch.get_rng_state()
    return {**state, "world_size": 2, "ranks": [state["ranks"][0], rank1], "env_steps": 640}


def test_each_rank_restores_its_own_entry():
    """Test that rank 1 of 2 restores ranks[1] (its RNG stream), and the counters are the global ones."""
    data = tiny_rollout_data()
    state = _two_rank_state(data)
    data.rank, data.world_size = 1, 2
    torch.manual_seed(0)
    data.load_state_dict(state)
    assert torch.equal(torch.get_rng_state(), state["ranks"][1]["torch_rng"])
    assert data.env_steps == 640


def test_rollout_data_resumes_on_another_world_size_with_a_warning():
    """Test that 2-rank rollout state loads into 1 rank: counters continue, RNG streams restart, a warning says so."""
    data = tiny_rollout_data()
    state = _two_rank_state(data)
    with pytest.warns(UserWarning, match="written by 2 rank.*this run has 1"):
        data.load_state_dict(state)
    assert data.env_steps == 640 and data.counters.iterations == state["iterations"]


def test_replay_shards_refuse_another_world_size():
    """Test that replay buffer shards of 2 ranks refuse to load into 1 rank, naming both counts and the fix."""
    data = tiny_replay_data("CartPole-v1", save_replay_buffer=True)
    state = _two_rank_state(data)
    with pytest.raises(ValueError, match=r"shards of 2 rank\(s\), but this run has 1.*save_replay_buffer=false"):
        data.load_state_dict(state)
    # Without saved buffers there is nothing to split: it resumes with a warning.
    data = tiny_replay_data("CartPole-v1")
    with pytest.warns(UserWarning, match="written by 2 rank"):
        data.load_state_dict(_two_rank_state(data))
    # Saved shards resumed with save_replay_buffer=false, the fix the message names: left out, refilled.
    with pytest.warns(UserWarning, match="written by 2 rank"):
        tiny_replay_data("CartPole-v1").load_state_dict(state)


def test_the_gpu_generator_is_saved_and_restored_where_cuda_is_in_use(monkeypatch):
    """Test that a rank's CUDA generator state goes into its checkpoint entry and comes back on resume (CUDA faked:
    CI has no GPU), and that an entry written on a GPU loads on a machine without one."""
    data = tiny_rollout_data()
    assert "cuda_rng" not in data.state_dict()["ranks"][0]  # CUDA unused here: nothing to save
    generator = {"state": torch.arange(16, dtype=torch.uint8)}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_rng_state", lambda: generator["state"].clone())
    monkeypatch.setattr(torch.cuda, "set_rng_state", lambda state: generator.update(state=state.clone()))
    state = data.state_dict()
    assert torch.equal(state["ranks"][0]["cuda_rng"], torch.arange(16, dtype=torch.uint8))
    generator["state"] = torch.zeros(16, dtype=torch.uint8)  # the generator moves on after the save
    data.load_state_dict(state)
    assert torch.equal(generator["state"], torch.arange(16, dtype=torch.uint8))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    generator["state"] = torch.zeros(16, dtype=torch.uint8)
    data.load_state_dict(state)  # resumed without a GPU: the CPU streams restore, the GPU's is left alone
    assert torch.equal(generator["state"], torch.zeros(16, dtype=torch.uint8))


def test_a_replay_resume_on_another_num_envs_is_refused_only_where_the_position_counts_its_steps():
    """Test that another num_envs resumes a replay checkpoint at an epoch's end (and one written before the rank state
    kept num_envs, and an evaluation of it), and is refused where an epoch was cut short: its position counts vector
    steps of the saved num_envs (the budget was overspent and the evaluation grid shifted)."""
    state = tiny_replay_data("CartPole-v1", num_envs=2).state_dict()
    tiny_replay_data("CartPole-v1", num_envs=4).load_state_dict(state)  # epoch_steps 0, no buffer: fine
    del state["ranks"][0]["num_envs"]  # written before the key
    tiny_replay_data("CartPole-v1", num_envs=4).load_state_dict(state)
    state["ranks"][0].update(num_envs=2, epoch_steps=5)
    with pytest.raises(ValueError, match=r"ran with num_envs=2 per rank, and this run has 4: its epoch was cut"):
        tiny_replay_data("CartPole-v1", num_envs=4).load_state_dict(state)


def test_a_cut_epoch_resumed_on_another_steps_per_epoch_or_world_size_is_refused():
    """Test that an epoch an interruption cut short is refused on another steps_per_epoch or number of ranks (the
    resumed epoch started over from 0: 1,079 env steps of a 1,000 budget, and 3,378 of 3,000 on 2 ranks, off the
    epoch grid), and resumes at an epoch's end on either."""
    state = tiny_replay_data("CartPole-v1", steps_per_epoch=64).state_dict()
    tiny_replay_data("CartPole-v1", steps_per_epoch=32).load_state_dict(state)  # at an epoch's end: fine
    state["ranks"][0]["epoch_steps"] = 5
    with pytest.raises(ValueError, match=r"steps_per_epoch=64 per rank, and this run has 32: its epoch was cut short"):
        tiny_replay_data("CartPole-v1", steps_per_epoch=32).load_state_dict(state)
    data = tiny_replay_data("CartPole-v1", steps_per_epoch=64)
    with pytest.raises(ValueError, match=r"cut short by an interruption, on 2 rank\(s\), and this run has 1"):
        data.load_state_dict(_two_rank_state(data) | {"ranks": [state["ranks"][0]] * 2})


def test_a_scratch_dir_is_checked_when_a_fit_starts_not_when_a_checkpoints_settings_are_read(tmp_path):
    """Test that building the data module (as `rl-lightning test` does from a checkpoint's settings, maybe on another
    machine) neither refuses nor creates the scratch_dir; the fit's setup checks it before any step."""
    data = tiny_replay_data("CartPole-v1", storage="memmap", scratch_dir=str(tmp_path / "scratch"))
    assert not (tmp_path / "scratch").exists()
    check_scratch_dir(data.hparams.scratch_dir)
    assert (tmp_path / "scratch").is_dir() and not list((tmp_path / "scratch").iterdir())
