"""The replay-backed data stream: chunks, step and gradient-step counts, stored transitions, staleness, state."""

from __future__ import annotations

import io
import warnings

import lightning.pytorch as pl
import pytest
import torch
from tensordict import TensorDict
from torch import nn

from rl_lightning.algos import RLModule
from rl_lightning.data import DataCounters, ReplayDataModule, ReplayDataset, make_replay_buffer
from rl_lightning.data.chunks import chunk_schedule
from rl_lightning.data.replay import BATCHES_PER_DRAW, random_action_space
from rl_lightning.envs import EnvGroup
from tests.conftest import SCRIPTED_ID, SCRIPTED_SETS
from tests.helpers import as_rows

with warnings.catch_warnings():
    warnings.simplefilter("ignore")


class ConstantExplorer(nn.Module):
    """Exploration stub: always action 1; counts its calls and remembers the learner step it acted at."""

    def __init__(self):
        super().__init__()
        self.dummy = nn.Parameter(torch.zeros(1))
        self.calls = 0
        self.learner_step = 0  # set by the consumer after each "gradient step"
        self.acted_at: list[int] = []

    def explore(self, obs, env_steps):
        self.calls += 1
        self.acted_at.append(self.learner_step)
        return torch.ones(obs.shape[0], dtype=torch.long, device=obs.device)


def _dataset(
    num_envs=2, steps_per_epoch=10, learning_starts=4, utd_ratio=1.0, batch_size=2, max_episode_steps=None, envs=None,
    train_freq=None, gradient_steps=None, buffer_size=100,
):  # fmt: skip
    envs = envs or EnvGroup(SCRIPTED_ID, num_envs, obj_sets=SCRIPTED_SETS, max_episode_steps=max_episode_steps)
    buffer = make_replay_buffer(buffer_size, batch_size)
    policy = ConstantExplorer()
    train_freq, gradient_steps = chunk_schedule(utd_ratio, envs.num_envs, train_freq, gradient_steps)
    dataset = ReplayDataset(envs, policy, buffer, steps_per_epoch, learning_starts, DataCounters(), reset_seed=0,
                            train_freq=train_freq, gradient_steps=gradient_steps)  # fmt: skip
    return dataset, policy


def take_epoch(stream) -> list[tuple[int, object]]:
    """One epoch of a dataset (or its DataLoader) consumed as ``training_step`` consumes it: its one Lightning batch
    iterated, each sampled batch with the env-step count it was drawn at (after its chunk was collected)."""
    counters = getattr(stream, "dataset", stream).counters
    (epoch,) = list(stream)  # one Lightning batch per epoch
    return [(counters.env_steps, batch) for batch in epoch]


def schedule(taken: list[tuple[int, object]]) -> list[tuple[int, int]]:
    """``(env steps, gradient steps)`` of each chunk that learned, from :func:`take_epoch`'s batches."""
    out: list[tuple[int, int]] = []
    for env_steps, _ in taken:
        if out and out[-1][0] == env_steps:
            out[-1] = (env_steps, out[-1][1] + 1)
        else:
            out.append((env_steps, 1))
    return out


def gradient_batches(dataset) -> list:
    """The sampled batches of one epoch, in order."""
    return [batch for _, batch in take_epoch(dataset)]


@pytest.mark.parametrize(
    ("num_envs", "utd_ratio", "expected_first", "expected_second"),
    # 10 env steps per epoch in vector steps of num_envs; learning after the chunks past 4 env steps.
    [(2, 1.0, 6, 10), (1, 1.0, 6, 10), (2, 0.5, 3, 5), (2, 2.0, 12, 20)],
)
def test_env_and_gradient_steps_per_epoch(num_envs, utd_ratio, expected_first, expected_second):
    """Test that an epoch is one Lightning batch of steps_per_epoch env steps in chunks of one vector step (utd_ratio x
    num_envs is whole here), each past learning_starts followed by its utd_ratio gradient steps per env step."""
    dataset, policy = _dataset(num_envs=num_envs, utd_ratio=utd_ratio)
    assert len(dataset) == 1
    taken = take_epoch(dataset)
    assert dataset.counters.env_steps == 10 and len(dataset.buffer) == 10 and dataset.counters.iterations == 1
    assert len(taken) == expected_first
    assert {steps for _, steps in schedule(taken)} == {int(utd_ratio * num_envs)}
    # Random actions until learning_starts: the policy acts only afterwards.
    assert policy.calls == (10 - 4) // num_envs
    second = gradient_batches(dataset)
    assert dataset.counters.env_steps == 20 and len(second) == expected_second
    assert all(batch.batch_size == torch.Size([2]) for _, batch in taken) and dataset.last_collection.env_steps == 10


@pytest.mark.parametrize(
    ("utd_ratio", "num_envs", "expected"),
    [(1.0, 1, (1, 1)), (0.25, 1, (4, 1)), (0.5, 2, (1, 1)), (1 / 32, 32, (1, 1)), (2.0, 3, (1, 6)), (1.5, 1, (2, 3)),
     (0.0004, 1, (2500, 1)), (1 / 1024, 1, (1024, 1))],
)  # fmt: skip
def test_utd_ratio_takes_the_smallest_whole_chunks(utd_ratio, num_envs, expected):
    """Test that utd_ratio becomes chunks of b vector steps and a gradient steps, where utd_ratio x num_envs = a/b."""
    assert chunk_schedule(utd_ratio, num_envs) == expected
    assert chunk_schedule(utd_ratio, num_envs, train_freq=256, gradient_steps=128) == (256, 128)


def test_small_utd_ratios_keep_their_gradient_steps():
    """Test that ratios below 1/1000 are read exactly (rounded to 1/1000 they were 0 gradient steps, or refused)."""
    ReplayDataModule(env_id=SCRIPTED_ID, obj_sets=SCRIPTED_SETS, utd_ratio=1 / 1024, steps_per_epoch=1024, num_envs=1)
    dataset, _ = _dataset(num_envs=1, steps_per_epoch=2500, learning_starts=0, utd_ratio=0.0004)
    assert len(gradient_batches(dataset)) == 1


def test_an_epoch_that_train_freq_does_not_divide_still_ends():
    """Test a ReplayDataset built directly (the data module refuses this) with chunks that overshoot the epoch."""
    dataset, _ = _dataset(num_envs=2, steps_per_epoch=10, train_freq=2, gradient_steps=1)  # 5 vector steps, chunks of 2
    gradient_batches(dataset)
    assert dataset.counters.iterations == 1 and dataset.epoch_steps == 0


def test_train_freq_and_gradient_steps_take_sb3s_chunks():
    """Test the chunk schedule: every train_freq vector steps, gradient_steps batches, none before learning_starts
    (RL-Zoo's CartPole DQN shape at a tenth: chunks of 8 env steps, 4 gradient steps, learning from env step 10)."""
    dataset, _ = _dataset(num_envs=1, steps_per_epoch=32, learning_starts=10, train_freq=8, gradient_steps=4)
    at = schedule(take_epoch(dataset)) + schedule(take_epoch(dataset))
    # The chunk ending at 8 env steps comes before learning_starts; the others each give 4 gradient steps.
    assert at == [(16, 4), (24, 4), (32, 4), (40, 4), (48, 4), (56, 4), (64, 4)]
    assert dataset.counters.env_steps == 64


def test_a_chunk_cut_short_by_an_interruption_gives_the_rest_of_its_gradient_steps_after_a_resume():
    """Test that a chunk's owed gradient steps and the epoch's position survive a stop between gradient steps (the
    state a checkpoint keeps: gradient_credit and epoch_steps), so no env or gradient step is taken twice."""
    dataset, _ = _dataset(num_envs=2, steps_per_epoch=16, learning_starts=0, train_freq=2, gradient_steps=3)
    batches = iter(next(iter(dataset)))
    taken = [next(batches) for _ in range(4)]  # the first chunk's 3 and one of the second's, then the stop
    assert len(taken) == 4 and dataset.counters.env_steps == 8 and dataset.epoch_steps == 4
    assert dataset.gradient_credit == 2
    resumed, _ = _dataset(num_envs=2, steps_per_epoch=16, learning_starts=0, train_freq=2, gradient_steps=3)
    resumed.gradient_credit, resumed.epoch_steps = dataset.gradient_credit, dataset.epoch_steps
    resumed.counters.env_steps = dataset.counters.env_steps
    resumed.buffer.extend(dataset.buffer.storage[: len(dataset.buffer)])
    # What the second chunk owes first, then the epoch's last two chunks (vector steps 5-8): 3 each.
    assert schedule(take_epoch(resumed)) == [(8, 2), (12, 3), (16, 3)]
    assert resumed.counters.env_steps == 16 and resumed.counters.iterations == 1


@pytest.mark.parametrize(("gradient_steps", "draws"), [(3, [3]), (BATCHES_PER_DRAW + 3, [BATCHES_PER_DRAW, 3])])
def test_a_chunks_batches_are_sampled_in_draws_of_up_to_batches_per_draw(gradient_steps, draws):
    """Test that a chunk's gradient steps take their batches from as few buffer samples as BATCHES_PER_DRAW allows,
    each batch batch_size rows, and that they are the rows per-step draws from the same generator state give."""
    dataset, _ = _dataset(num_envs=1, steps_per_epoch=4, learning_starts=0, train_freq=4,
                          gradient_steps=gradient_steps, batch_size=3)  # fmt: skip
    sizes = []
    sample = dataset.buffer.sample
    dataset.buffer.sample = lambda batch_size=None: sizes.append(batch_size) or sample(batch_size)
    torch.manual_seed(5)
    batches = gradient_batches(dataset)
    assert sizes == [3 * n for n in draws]
    assert len(batches) == gradient_steps and all(b.batch_size == torch.Size([3]) for b in batches)
    # One draw of k x batch_size rows is k draws of batch_size from the same generator state: the same rows.
    buffer = make_replay_buffer(100, 3)
    buffer.extend(TensorDict({"x": torch.arange(50)}, batch_size=[50]))
    torch.manual_seed(5)
    together = buffer.sample(12)["x"]
    torch.manual_seed(5)
    assert torch.equal(together, torch.cat([buffer.sample()["x"] for _ in range(4)]))


def test_a_chunk_is_stored_in_one_write_with_the_rows_of_step_by_step_writes():
    """Test that a chunk's transitions go into the buffer in one write per chunk, the same rows in the same order as
    writing after every env step, and that a stop in the middle of a chunk still stores the steps it took."""
    from rl_lightning.faults import TrainingInterrupted, interrupt_request

    chunked, _ = _dataset(num_envs=2, steps_per_epoch=32, learning_starts=100, train_freq=8, gradient_steps=1)
    writes, extend = [], chunked.buffer.extend
    chunked.buffer.extend = lambda rows: (writes.append(len(rows)), extend(rows))[1]
    take_epoch(chunked)
    assert writes == [16, 16]  # 2 chunks of 8 vector steps of 2 envs
    stepwise, _ = _dataset(num_envs=2, steps_per_epoch=32, learning_starts=100)
    for _ in range(16):
        stepwise.buffer.extend(as_rows(stepwise.take_step()))
    for key in ("obs", "action", "reward", "next_obs", "terminated"):
        assert torch.equal(chunked.buffer.storage[:32][key], stepwise.buffer.storage[:32][key]), key

    # A buffer smaller than a chunk keeps the newest rows, as step-by-step writes do.
    small, _ = _dataset(num_envs=2, steps_per_epoch=32, learning_starts=100, train_freq=8, gradient_steps=1,
                        buffer_size=10)  # fmt: skip
    take_epoch(small)
    rows = stepwise.buffer.storage[:32]["obs"]
    assert torch.equal(small.buffer.storage[:10]["obs"], torch.cat([rows[30:], rows[22:30]]))

    cut, _ = _dataset(num_envs=2, steps_per_epoch=32, learning_starts=100, train_freq=8, gradient_steps=1)
    take_step = cut.take_step

    def stop_after_five(device=None):
        if cut.counters.env_steps == 10:
            interrupt_request.request("SIGTERM")
        return take_step(device)

    cut.take_step = stop_after_five
    try:
        with pytest.raises(TrainingInterrupted):
            take_epoch(cut)
    finally:
        interrupt_request.clear()
    assert cut.counters.env_steps == 10 and len(cut.buffer) == 10 and cut.epoch_steps == 5


def test_stored_next_obs_is_the_true_final_observation():
    """Test that an episode's last transition stores its final observation (not the reset one), terminated."""
    dataset, _ = _dataset(num_envs=1, steps_per_epoch=6, learning_starts=100)  # scripted episodes: 5 steps
    take_epoch(dataset)
    data = dataset.buffer.storage[:6]
    assert data["obs"][:, 0].tolist() == [0, 1, 2, 3, 4, 0]
    assert data["next_obs"][:, 0].tolist() == [1, 2, 3, 4, 5, 1]  # 5 = final obs; the env then reset to 0
    assert data["terminated"].tolist() == [False, False, False, False, True, False]
    assert data["reward"].tolist() == [1, 2, 3, 4, 5, 1]


def test_truncation_is_not_termination():
    """Test that a time-limit cut stores its true final observation with terminated=False (so the target bootstraps)."""
    dataset, _ = _dataset(num_envs=1, steps_per_epoch=4, learning_starts=100, max_episode_steps=3)
    take_epoch(dataset)
    data = dataset.buffer.storage[:4]
    assert data["next_obs"][:, 0].tolist() == [1, 2, 3, 1]
    assert data["terminated"].tolist() == [False, False, False, False]


def test_a_chunk_acts_with_the_weights_of_every_gradient_step_before_it():
    """Test that, consumed chunk after chunk, every action uses the weights after all earlier chunks' gradient steps."""
    dataset, policy = _dataset(num_envs=1, steps_per_epoch=20, learning_starts=2, train_freq=2, gradient_steps=3)
    steps = 0
    for _batch in next(iter(dataset)):
        steps += 1  # the gradient step on this batch
        policy.learner_step = steps
    assert steps == 3 * 9  # every chunk past learning_starts learns (not the first, which ends at it)
    # Env steps 3-20 act (the first two are random): the two of chunk k (k = 2..10) after the 3 (k - 2) steps
    # of the chunks before it.
    assert policy.acted_at == [3 * (k - 2) for k in range(2, 11) for _ in range(2)]


def test_replay_buffer_state_round_trips_exactly(tmp_path):
    """Test that the data module's state (save_replay_buffer) restores the buffer's contents, size and cursor."""
    kwargs = dict(env_id=SCRIPTED_ID, obj_sets=SCRIPTED_SETS, buffer_size=8, batch_size=2, steps_per_epoch=6)
    data = ReplayDataModule(**kwargs, learning_starts=0, save_replay_buffer=True, eval_episodes=1)
    data.setup("fit")
    data._policy = lambda: ConstantExplorer()
    take_epoch(data.train_dataloader())
    take_epoch(data.train_dataloader())  # 12 transitions into 8 slots: the buffer wrapped around
    state = data.state_dict()
    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    restored = ReplayDataModule(**kwargs, learning_starts=0, save_replay_buffer=True, eval_episodes=1)
    restored.load_state_dict(torch.load(buf, weights_only=True))
    assert len(restored.buffer) == len(data.buffer) == 8
    for key in ("obs", "action", "reward", "next_obs", "terminated"):
        torch.testing.assert_close(restored.buffer.storage[:][key], data.buffer.storage[:][key])
    assert restored.buffer.cursor == data.buffer.cursor == 12 % 8
    assert restored.env_steps == 12
    data.close()


def test_without_saved_buffer_resume_warns_and_waits_for_a_batch():
    """Test that a checkpoint without the buffer warns on load and learning waits until a batch is stored again."""
    kwargs = dict(
        env_id=SCRIPTED_ID, obj_sets=SCRIPTED_SETS, batch_size=4, steps_per_epoch=2, learning_starts=0, eval_episodes=1
    )
    data = ReplayDataModule(**kwargs)
    state = {**data.state_dict(), "env_steps": 100}
    assert state["ranks"][0]["replay_buffer"] is None
    restored = ReplayDataModule(**kwargs)
    with pytest.warns(UserWarning, match="replay buffer is not restored"):
        restored.load_state_dict(state)
    restored.setup("fit")
    restored._policy = lambda: ConstantExplorer()
    assert len(gradient_batches(restored.train_dataloader())) == 0  # 2 stored < batch of 4: no gradient step yet
    assert len(gradient_batches(restored.train_dataloader())) == 1  # the 4th transition completes a batch
    assert len(gradient_batches(restored.train_dataloader())) == 2  # from here one per env step
    restored.close()


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"steps_per_epoch": 5, "num_envs": 2}, "multiple of num_envs"),
        ({"steps_per_epoch": 3, "utd_ratio": 0.5}, "whole number of gradient steps"),
        ({"learning_starts": -1}, "learning_starts"),
        ({"utd_ratio": 0}, "utd_ratio"),
        ({"storage": "disk"}, "storage must be one of"),
        ({"batch_size": 0}, "batch_size"),
        ({"train_freq": 4}, "give both"),
        ({"train_freq": 0, "gradient_steps": 1}, "train_freq must be a positive integer"),
        ({"train_freq": 4, "gradient_steps": 2, "utd_ratio": 0.5}, "keep one"),
        ({"train_freq": 3, "gradient_steps": 2, "steps_per_epoch": 10}, "whole number of train_freq=3 chunks"),
        ({"utd_ratio": 1e-7}, "at least 1e-6"),
        ({"buffer_size": 8, "batch_size": 16}, r"batch_size=16 is more than the 8 transitions a buffer_size=8 buffer"),
        ({"buffer_size": 16, "batch_size": 16, "num_envs": 2, "steps_per_epoch": 2, "optimize_memory_usage": True},
         r"the 14 transitions .* never draws the newest 2"),
    ],
)  # fmt: skip
def test_impossible_settings_are_refused_with_the_key(kwargs, match):
    """Test that impossible replay settings raise a ValueError naming the setting."""
    with pytest.raises(ValueError, match=match):
        ReplayDataModule(env_id=SCRIPTED_ID, obj_sets=SCRIPTED_SETS, **kwargs)


def test_memmap_storage_holds_transitions_on_disk(tmp_path):
    """Test that storage='memmap' writes the transitions as memory-mapped files under scratch_dir."""
    envs = EnvGroup(SCRIPTED_ID, 1, obj_sets=SCRIPTED_SETS)
    buffer = make_replay_buffer(10, 2, storage="memmap", scratch_dir=str(tmp_path))
    dataset = ReplayDataset(envs, ConstantExplorer(), buffer, 4, 100, DataCounters(), reset_seed=0)
    take_epoch(dataset)
    assert len(buffer) == 4 and buffer.storage[:4]["obs"][:, 0].tolist() == [0, 1, 2, 3]
    assert any(tmp_path.rglob("*.memmap"))


class _ReplayLearner(RLModule):
    """A minimal off-policy LightningModule: one parameter, an SGD step on each sampled batch of a chunk."""

    def __init__(self):
        super().__init__(total_timesteps=10_000)
        self.automatic_optimization = False
        self.batches_seen = 0
        self.chunks_seen = 0

    def build_policy(self, observation_space, action_space):
        policy = ConstantExplorer()
        policy.initial_state = lambda batch_size, device=None: None
        policy.act = lambda obs, state, start, deterministic=False, value=False: (
            torch.ones(obs.shape[0], dtype=torch.long),
            None,
            None,
            None,
        )
        return policy

    def training_step(self, epoch, batch_idx):
        self.chunks_seen += 1
        optimizer = self.optimizers()
        for batch in epoch:
            self.batches_seen += 1
            optimizer.zero_grad()
            self.manual_backward((self.policy.dummy - batch["reward"].mean()) ** 2)
            optimizer.step()
            self.policy.learner_step = self.global_step

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def test_trainer_fit_runs_epochs_without_batches_until_learning_starts():
    """Test that under Trainer.fit, epochs before learning_starts take env steps (one Lightning batch per epoch) but
    no gradient steps, and that every action uses the weights of all gradient steps before it."""
    data = ReplayDataModule(
        env_id=SCRIPTED_ID,
        obj_sets=SCRIPTED_SETS,
        steps_per_epoch=10,
        learning_starts=15,
        batch_size=2,
        eval_episodes=1,
    )
    model = _ReplayLearner()
    trainer = pl.Trainer(
        max_epochs=3, logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False
    )
    trainer.fit(model, data)
    # Epoch 1: 10 random steps, no update; epoch 2: an update after each of env steps 16-20 (past learning_starts);
    # epoch 3: 10.
    assert data.env_steps == 30 and model.batches_seen == 5 + 10 and trainer.global_step == 15
    assert model.chunks_seen == 3  # Lightning batches: one per epoch
    # Env steps 16-30 act (the first 15 are random), each right after the gradient steps of env steps 16 to the one
    # before it.
    assert model.policy.acted_at == list(range(0, 15))
    assert "eval/return_mean" in trainer.callback_metrics and "eval_ood/return_mean" in trainer.callback_metrics
    data.close()


@pytest.mark.parametrize("storage", ["memory", "memmap"])
def test_a_saved_buffer_holds_its_transitions_not_its_capacity(storage, tmp_path):
    """Test that save_replay_buffer writes the stored rows only, and they restore into a full-capacity buffer."""
    kwargs = dict(env_id=SCRIPTED_ID, obj_sets=SCRIPTED_SETS, batch_size=2, steps_per_epoch=6, storage=storage)
    kwargs.update(buffer_size=100_000, learning_starts=0, save_replay_buffer=True, eval_episodes=1)
    data = ReplayDataModule(**kwargs, scratch_dir=str(tmp_path / "a"))
    data.setup("fit")
    data._policy = lambda: ConstantExplorer()
    take_epoch(data.train_dataloader())  # 6 transitions stored
    buf = io.BytesIO()
    torch.save(data.state_dict(), buf)
    assert buf.tell() < 100_000  # 6 rows; the whole capacity would be megabytes
    buf.seek(0)
    restored = ReplayDataModule(**kwargs, scratch_dir=str(tmp_path / "b"))
    restored.setup("fit")
    restored.load_state_dict(torch.load(buf, weights_only=True))
    assert len(restored.buffer) == 6 and restored.buffer.capacity == 100_000
    for key in ("obs", "action", "reward", "next_obs", "terminated"):
        torch.testing.assert_close(restored.buffer.storage[:6][key], data.buffer.storage[:6][key])
    restored._policy = lambda: ConstantExplorer()
    take_epoch(restored.train_dataloader())  # and it goes on storing past the restored rows
    assert len(restored.buffer) == 12
    for module in (data, restored):
        module.close()


def test_dqn_fits_on_chunks_and_a_checkpoint_keeps_the_schedule(tmp_path):
    """Test that Trainer.fit takes gradient_steps per train_freq chunk (the target-network cadence and global_step
    count them), and that the schedule is saved with the data module's settings."""
    from rl_lightning import DQN
    from tests.helpers import quiet_trainer, tiny_replay_data

    pl.seed_everything(0, verbose=False)
    data = tiny_replay_data("CartPole-v1", train_freq=20, gradient_steps=5, eval_interval=100)
    model = DQN(hidden_sizes=[16], total_timesteps=120, target_update_interval=5)
    updates = []
    model.update_targets = lambda: updates.append(model.global_step)
    trainer = quiet_trainer(tmp_path, max_epochs=-1)
    trainer.fit(model, data)
    # 120 env steps in chunks of 20: those past learning_starts=40 (ending at 60, ..., 120) learn, 5 steps each.
    assert data.env_steps == 120 and trainer.global_step == 4 * 5
    assert updates == [5, 10, 15, 20]
    trainer.save_checkpoint(tmp_path / "chunks.ckpt")
    ckpt = torch.load(tmp_path / "chunks.ckpt", weights_only=True)
    saved = ckpt["datamodule_hyper_parameters"]
    assert (saved["train_freq"], saved["gradient_steps"]) == (20, 5)


# ---------------------------------------------------------------- a batched env's transitions stay on its device
@pytest.mark.parametrize("terminate_at", [0, 2])
def test_a_batched_envs_next_obs_is_its_final_observation_and_only_termination_stops_bootstrapping(terminate_at):
    """Test that an ended episode's transition stores the obs it reached (not the restart), terminated only when
    the env terminated (a time-limit cut stays bootstrappable), from a batched env into a buffer on its device."""
    from tests.helpers import count_envs

    dataset, _ = _dataset(steps_per_epoch=8, learning_starts=0, envs=count_envs(2, terminate_at), batch_size=4)
    take_epoch(dataset)
    rows = dataset.buffer.storage[:8]  # 4 batched steps of 2 envs, in step order
    obs, next_obs = rows["obs"][::2, 0].tolist(), rows["next_obs"][::2, 0].tolist()
    if terminate_at == 0:  # episodes of 3 steps, cut by the time limit
        assert obs == [0, 1, 2, 0] and next_obs == [1, 2, 3, 1]
        assert not rows["terminated"].any()
    else:  # terminal at obs 2
        assert obs == [0, 1, 0, 1] and next_obs == [1, 2, 1, 2]
        assert rows["terminated"][::2].tolist() == [False, True, False, True]
    assert rows["reward"].tolist() == [1.0] * 8
    assert dataset.buffer.storage["obs"].device == dataset.envs.device


def test_random_actions_are_uniform_within_the_bounds_and_seeded():
    """Test that the warm-up actions lie in the Box, cover it, and repeat with the same seed; Discrete actions are the
    policy's indices from 0."""
    import gymnasium as gym

    def draws(seed):
        return random_action_space(gym.spaces.Box(-2.0, 2.0, (1,)), 256, seed).sample()

    first, again, other = draws(3), draws(3), draws(4)
    assert first.shape == (256, 1) and first.min() >= -2 and first.max() <= 2
    assert first.min() < -1.5 and first.max() > 1.5
    assert (first == again).all() and not (first == other).all()
    indices = random_action_space(gym.spaces.Discrete(3, start=5), 256, 0).sample()
    assert set(indices.tolist()) == {0, 1, 2}
    with pytest.raises(TypeError, match="Discrete or Box"):
        random_action_space(gym.spaces.MultiBinary(2), 4, 0)


@pytest.mark.parametrize("algo", ["sac", "dqn"])
def test_off_policy_fits_on_the_torch_backend_with_the_buffer_on_the_env_device(algo):
    """Test that Trainer.fit runs SAC on batched Pendulum and DQN on batched CartPole through the same stream, takes
    the scheduled steps and stores DQN's actions as int64 indices."""
    from rl_lightning import DQN, SAC
    from tests.helpers import quiet_trainer, tiny_replay_data

    if algo == "sac":
        env_id, model = "Pendulum-v1", SAC(total_timesteps=120)
    else:
        env_id, model = "CartPole-v1", DQN(total_timesteps=120)
    data = tiny_replay_data(env_id, backend="torch", num_envs=4, utd_ratio=0.25)
    trainer = quiet_trainer(max_epochs=-1)
    trainer.fit(model, data)
    assert data.env_steps == 120 and len(data.buffer) == 120
    assert trainer.global_step == (120 - 40) // 4  # a gradient step after each batched step past 40
    assert data.buffer.storage["obs"].device == data.train_envs.device
    if algo == "dqn":
        actions = data.buffer.storage[:120]["action"]
        assert actions.dtype == torch.int64 and set(actions.tolist()) == {0, 1}


@pytest.mark.parametrize(
    "kwargs, key",
    [({"storage": "memmap"}, "storage"), ({"optimize_memory_usage": True}, "optimize_memory_usage")],
)  # fmt: skip
def test_a_batched_backend_refuses_replay_settings_it_has_not(kwargs, key):
    """Test that memmap and compact replay on the torch backend are refused, naming the key and fix."""
    from tests.helpers import tiny_replay_data

    with pytest.raises(ValueError, match=f"data.{key}=.*env.backend=gymnasium"):
        tiny_replay_data("Pendulum-v1", backend="torch", **kwargs)
