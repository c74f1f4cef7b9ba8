"""Tests of the compact replay buffer (``optimize_memory_usage``): the same transitions as the plain buffer, each
observation stored once."""

from __future__ import annotations

import io
import logging

import pytest
import torch

from rl_lightning.data import DataCounters, ReplayDataModule, ReplayDataset, make_replay_buffer
from rl_lightning.data.compact_replay import CompactReplayBuffer
from rl_lightning.envs import EnvGroup
from tests.conftest import SCRIPTED_ID, SCRIPTED_SETS
from tests.data.test_replay import ConstantExplorer, take_epoch
from tests.envs.pixel_goal import ENV_ID as PIXEL_GOAL

PIXEL_ID = f"tests.envs.pixel_goal:{PIXEL_GOAL}"
PIXEL_SETS = {"train": [{"seeds": [0, 1000]}], "test": [{"seeds": [1000, 2000]}]}
KEYS = ("obs", "action", "reward", "next_obs", "terminated")


class RandomExplorer(ConstantExplorer):
    """Uniformly random actions of a Discrete(4) space, from torch's generator."""

    def explore(self, obs, env_steps):
        return torch.randint(4, (obs.shape[0],))


def _pair(env_id, obj_sets, num_envs, capacity, max_episode_steps=None, steps=40):
    """A plain and a compact dataset fed the same env steps (same seeds, same actions)."""
    out = []
    for compact in (False, True):
        torch.manual_seed(0)
        envs = EnvGroup(env_id, num_envs, obj_sets=obj_sets, max_episode_steps=max_episode_steps)
        buffer = make_replay_buffer(capacity, 16, optimize_memory_usage=compact, num_envs=num_envs)
        policy = RandomExplorer() if env_id == PIXEL_ID else ConstantExplorer()
        dataset = ReplayDataset(envs, policy, buffer, steps, 10**9, DataCounters(), reset_seed=0)
        take_epoch(dataset)
        out.append(dataset)
    return out


def _same(a, b):
    if isinstance(a, torch.Tensor):
        return torch.equal(a, b)
    return all(_same(a[k], b[k]) for k in a.keys())


@pytest.mark.parametrize(
    ("env_id", "obj_sets", "num_envs", "capacity", "max_episode_steps"),
    [
        (SCRIPTED_ID, SCRIPTED_SETS, 1, 100, None),  # terminated episodes, buffer not full
        (SCRIPTED_ID, SCRIPTED_SETS, 2, 100, 3),  # truncated ones, two envs
        (SCRIPTED_ID, SCRIPTED_SETS, 3, 20, 4),  # wrapped around (40 steps into 20 rows, 20 % 3 != 0)
        (PIXEL_ID, PIXEL_SETS, 2, 30, 6),  # Dict observations with a uint8 image, wrapped, truncated
    ],
)
def test_compact_batches_hold_the_plain_buffers_transitions(env_id, obj_sets, num_envs, capacity, max_episode_steps):
    """Test that every transition the compact buffer samples equals the plain buffer's at the same row (next_obs
    included: the next row's obs, or the true final one at an episode end), and that only the latest step is
    held back."""
    plain, compact = _pair(env_id, obj_sets, num_envs, capacity, max_episode_steps)
    assert isinstance(compact.buffer, CompactReplayBuffer)
    assert len(plain.buffer) == capacity if capacity < 40 * num_envs else 40
    assert len(compact.buffer) == len(plain.buffer) - num_envs  # the latest step waits for its next rows
    ends = int(sum(plain.buffer.storage[:]["terminated"])) if max_episode_steps is None else 1
    assert compact.buffer.final_obs and ends
    seen = set()
    for _ in range(50):
        index = compact.buffer.draw(compact.buffer.batch_size)
        batch, rows = compact.buffer.transitions(index), plain.buffer.storage[index]
        for key in KEYS:
            assert _same(batch[key], rows[key]), key
        seen.update(index.tolist())
    assert len(seen) == len(compact.buffer)  # every sampleable row came up, no other
    if env_id == PIXEL_ID:
        assert compact.buffer.storage[:]["obs"]["image"].dtype == torch.uint8
        assert "next_obs" not in compact.buffer.storage[:].keys()


def test_compact_buffer_takes_about_half_the_bytes_per_transition():
    """Test that transition_bytes (what the run reports) matches the storages' real bytes per row, and that the
    compact buffer stores the observation once."""
    from rl_lightning.data.replay import transition_bytes

    plain, compact = _pair(PIXEL_ID, PIXEL_SETS, 2, 30, 6)
    obs_space, act_space = plain.envs.observation_space, plain.envs.action_space

    def row_bytes(storage):
        rows = storage[:]
        return sum(t.element_size() * t[0].numel() for t in rows.values(include_nested=True, leaves_only=True))

    assert row_bytes(plain.buffer.storage) == transition_bytes(obs_space, act_space)
    assert row_bytes(compact.buffer.storage) + 1 == transition_bytes(obs_space, act_space, True)
    obs = 5 * 5 * 1 + 2 * 4  # the image (uint8) and the position (float32)
    assert transition_bytes(obs_space, act_space) - transition_bytes(obs_space, act_space, True) == obs - 1


def test_cut_transitions_and_the_step_before_a_restart_are_never_sampled():
    """Test that a vector step marked invalid (an env fault) is stored but never sampled, and that after a restart
    (the envs reset anew, as on a resume) the step stored before it is never sampled either."""
    from tensordict import TensorDict

    buffer = make_replay_buffer(50, 8, optimize_memory_usage=True, num_envs=2)

    def step(t, valid=None):
        rows = TensorDict(
            {"obs": torch.tensor([[t], [100 + t]], dtype=torch.float32), "action": torch.zeros(2, dtype=torch.long),
             "reward": torch.zeros(2), "terminated": torch.zeros(2, dtype=torch.bool)},
            batch_size=[2],
        )  # fmt: skip
        buffer.extend(rows, {}, valid)

    for t in range(4):
        step(t, valid=torch.tensor([t != 1, True]))
    buffer.restart()
    for t in range(10, 13):
        step(t)
    starts = set()
    for _ in range(100):
        batch = buffer.sample()
        starts.update(batch["obs"][:, 0].tolist())
        # next_obs is always the same env's next step
        assert torch.equal(batch["next_obs"][:, 0], batch["obs"][:, 0] + 1)
    assert starts == {0, 2, 10, 11, 100, 101, 102, 110, 111}  # not 1 (cut), not 3 / 103 (before the restart)
    assert len(buffer) == 9


def test_compact_buffer_state_round_trips_and_refuses_the_other_kind(tmp_path):
    """Test that save_replay_buffer restores the compact buffer (rows, final observations, which rows are
    sampleable) and that a checkpoint of the plain kind is refused with the setting named."""
    kwargs = dict(env_id=SCRIPTED_ID, obj_sets=SCRIPTED_SETS, buffer_size=9, batch_size=4, steps_per_epoch=8)
    kwargs.update(learning_starts=0, save_replay_buffer=True, eval_episodes=1, max_episode_steps=3)
    data = ReplayDataModule(**kwargs, optimize_memory_usage=True)
    data.setup("fit")
    data._policy = lambda: ConstantExplorer()
    take_epoch(data.train_dataloader())
    take_epoch(data.train_dataloader())  # 16 steps into 9 rows: wrapped
    buf = io.BytesIO()
    torch.save(data.state_dict(), buf)
    buf.seek(0)
    restored = ReplayDataModule(**kwargs, optimize_memory_usage=True)
    restored.load_state_dict(torch.load(buf, weights_only=True))
    # The latest step stays unsampled after the resume (its next rows would come from fresh episodes).
    assert len(restored.buffer) == len(data.buffer) == 8
    assert restored.buffer.final_obs.keys() == data.buffer.final_obs.keys()
    torch.manual_seed(1)
    first = restored.buffer.sample()
    torch.manual_seed(1)
    again = data.buffer.sample()
    for key in KEYS:
        torch.testing.assert_close(first[key], again[key])
    plain = ReplayDataModule(**kwargs)
    with pytest.raises(ValueError, match=r"optimize_memory_usage=true.*this run has false.*save_replay_buffer=false"):
        buf.seek(0)
        plain.load_state_dict(torch.load(buf, weights_only=True))
    # The fix the message names works: without save_replay_buffer the saved buffer is left out and refills.
    refill = ReplayDataModule(**{**kwargs, "save_replay_buffer": False})
    buf.seek(0)
    with pytest.warns(UserWarning, match=r"not restored \(the checkpoint holds none, or save_replay_buffer=false\)"):
        refill.load_state_dict(torch.load(buf, weights_only=True))
    assert len(refill.buffer) == 0 and refill.env_steps == data.env_steps
    # Another num_envs: the compact rows' next observations (and the epoch position) count steps of the old one.
    wider = ReplayDataModule(**{**kwargs, "num_envs": 2}, optimize_memory_usage=True)
    buf.seek(0)
    with pytest.raises(ValueError, match=r"ran with num_envs=1 per rank, and this run has 2.*with num_envs=1"):
        wider.load_state_dict(torch.load(buf, weights_only=True))
    data.close()


def test_impossible_compact_settings_are_refused():
    """Test that optimize_memory_usage refuses a buffer smaller than two vector steps, and a setting not a bool."""
    with pytest.raises(ValueError, match="at least two vector steps"):
        make_replay_buffer(5, 4, optimize_memory_usage=True, num_envs=4)
    with pytest.raises(TypeError, match="optimize_memory_usage must be true or false"):
        ReplayDataModule(env_id=SCRIPTED_ID, optimize_memory_usage="yes")


def test_an_in_memory_buffer_larger_than_the_machine_is_refused_before_any_step(caplog):
    """Test that a buffer_size no machine's memory holds is refused, naming the setting and memmap, before an env
    steps; and that the report states bytes per transition, and a small buffer's size in MB."""
    data = ReplayDataModule(env_id=PIXEL_ID, obj_sets=PIXEL_SETS, buffer_size=10**12, eval_episodes=1)
    data.setup("fit")
    assert data.transition_bytes == 2 * (25 + 8) + 8 + 4 + 1
    refusal = r"needs .* GB \(1,000,000,000,000 transitions x 79 bytes\).*storage=memmap.*optimize_memory_usage=true"
    with pytest.raises(MemoryError, match=refusal):
        data.train_dataloader()
    assert data.env_steps == 0 and data.train_envs.obs is None
    data.close()
    memmap = ReplayDataModule(env_id=PIXEL_ID, obj_sets=PIXEL_SETS, buffer_size=10**12, storage="memmap")
    memmap.setup("fit")
    memmap._policy = lambda: RandomExplorer()
    memmap.check_buffer_memory()  # files on disk: no refusal
    memmap.close()
    small = ReplayDataModule(env_id=PIXEL_ID, obj_sets=PIXEL_SETS, buffer_size=100_000)
    small.setup("fit")
    with caplog.at_level(logging.INFO):
        small.check_buffer_memory()
    assert "100,000 transitions x 79 bytes = 7.9 MB per rank." in caplog.text  # it read 0.00 GB
    small.close()


def test_stored_final_observations_are_their_own_not_views_of_the_steps_batch():
    """Test that each episode end keeps one observation, not the whole ``[num_envs, ...]`` batch it was cut from."""
    envs = EnvGroup(PIXEL_ID, 4, obj_sets=PIXEL_SETS, max_episode_steps=3)
    buffer = make_replay_buffer(64, 16, optimize_memory_usage=True, num_envs=4)
    take_epoch(ReplayDataset(envs, RandomExplorer(), buffer, 40, 10**9, DataCounters(), reset_seed=0))
    finals = list(buffer.final_obs.values())
    assert finals
    for final in finals:
        for leaf in final.values(include_nested=True, leaves_only=True):
            assert leaf.untyped_storage().nbytes() == leaf.numel() * leaf.element_size()
