"""Collection chunks: the schedule, an epoch of them as a Lightning batch, the same learning as a plain loop, resume."""

from __future__ import annotations

import copy
import os

import lightning.pytorch as pl
import pytest
import torch

from rl_lightning import DQN, SAC, ReplayDataModule
from rl_lightning.algos.dqn_loss import dqn_loss
from rl_lightning.data.chunks import ReplayEpoch
from rl_lightning.faults import TrainingInterrupted, interrupt_request
from tests.data.test_replay import schedule, take_epoch
from tests.helpers import as_rows, quiet_trainer


class _GradientSteps(pl.Callback):
    """Records the data module's env-step count at every optimizer step, and what each Lightning batch was."""

    def __init__(self):
        self.at: list[int] = []
        self.batches: list[object] = []

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        self.batches.append(batch)

    def on_before_optimizer_step(self, trainer, module, optimizer):
        self.at.append(trainer.datamodule.env_steps)

    def chunks(self) -> list[tuple[int, int]]:
        return schedule([(env_steps, None) for env_steps in self.at])


@pytest.mark.parametrize("algo", ["dqn", "sac"])
def test_each_lightning_batch_is_an_epoch_of_chunks_each_with_exactly_its_gradient_steps(algo):
    """Test that under Trainer.fit every Lightning batch is one epoch, whose chunks of train_freq env steps each take
    exactly gradient_steps updates once learning started (none before), for DQN and SAC."""
    pl.seed_everything(0)
    if algo == "dqn":
        env_id, model = "CartPole-v1", DQN(hidden_sizes=[16])
    else:
        env_id, model = "Pendulum-v1", SAC(hidden_sizes=[16])
    data = ReplayDataModule(
        env_id=env_id, num_envs=2, steps_per_epoch=48, learning_starts=8, train_freq=4, gradient_steps=3,
        batch_size=8, eval_interval=100, eval_episodes=1,
    )  # fmt: skip
    spy = _GradientSteps()
    quiet_trainer(max_epochs=2, callbacks=[spy]).fit(model, data)
    assert len(spy.batches) == 2 and all(isinstance(b, ReplayEpoch) for b in spy.batches)
    # 2 epochs of 48 env steps in chunks of 4 vector steps of 2 envs. The chunk ending at env step 8 is not past
    # learning_starts (Stable-Baselines3 trains after a chunk only when num_timesteps > learning_starts); every later
    # one takes 3 gradient steps.
    assert spy.chunks() == [(8 * k, 3) for k in range(2, 13)]
    data.close()


def test_a_replay_epoch_is_moved_by_lightning_and_draws_its_batches_on_that_device():
    """Test that ReplayEpoch.to (Lightning's batch transfer) sets where its sampled batches go, and that iterating it
    collects each chunk before drawing its gradient steps, spending the stream's credit one step at a time."""
    data = ReplayDataModule(
        env_id="CartPole-v1", steps_per_epoch=8, learning_starts=0, train_freq=4, gradient_steps=2, batch_size=2,
        eval_episodes=1,
    )  # fmt: skip
    data.setup("fit")
    data._policy = lambda: DQN(hidden_sizes=[8]).build_policy(*data.env_spaces())
    stream = data.train_dataloader()
    epoch = next(iter(stream))
    assert epoch.to("cpu") is epoch and epoch.device == torch.device("cpu") and data.env_steps == 0
    batches = []
    for batch in epoch:
        batches.append(batch)
        assert stream.dataset.gradient_credit == 2 - (len(batches) - 1) % 2 - 1
        assert data.env_steps == 4 * ((len(batches) + 1) // 2)
    assert len(batches) == 4 and all(b.device == torch.device("cpu") for b in batches)
    assert "steps_per_epoch=8" in repr(epoch)
    data.close()


# ------------------------------------------------------------------ the same learning as a plain loop
class _StartState(pl.Callback):
    """Keeps the module's weights and the torch RNG state as training starts (after any sanity evaluation)."""

    def on_train_start(self, trainer, module):
        self.weights = copy.deepcopy(module.state_dict())
        self.rng = torch.get_rng_state()


def _dqn_update(model, optimizer, batch, state):
    hp = model.hparams
    terms = dqn_loss(model.policy, model.target_net, batch, hp.gamma, hp.double_dqn, hp.loss_function)
    optimizer.zero_grad()
    terms.loss.backward()
    optimizer.step()
    state["steps"] += 1
    if state["steps"] % hp.target_update_interval == 0:
        with torch.no_grad():
            for target, online in zip(model.target_net.parameters(), model.policy.parameters(), strict=True):
                target.lerp_(online, hp.tau)


def _sac_update(model, optimizer, batch, state):
    terms = model.loss(batch)
    optimizer.zero_grad()
    (terms.loss_qvalue + terms.loss_actor + terms.loss_alpha).backward()
    optimizer.step()
    model.update_targets()


def _plain_loop(make_model, data_kwargs, start: _StartState, update, train_freq: int, gradient_steps: int):
    """The textbook off-policy loop, as Stable-Baselines3 and CleanRL write it: act with the current weights for
    train_freq steps, then gradient_steps updates on batches sampled from the buffer (in one draw); no Lightning."""
    data = ReplayDataModule(**data_kwargs)
    data.setup("fit")
    model = make_model()
    model._ensure_policy(*data.env_spaces())
    model.load_state_dict(start.weights)
    optimizer = model.configure_optimizers()
    data._policy = lambda: model.policy
    stream = data.train_dataloader().dataset
    torch.set_rng_state(start.rng)
    state = {"steps": 0}
    for vector_step in range(1, data_kwargs["steps_per_epoch"] // data_kwargs.get("num_envs", 1) + 1):
        data.buffer.extend(as_rows(stream.take_step()))
        if vector_step % train_freq == 0 and stream.learning:
            # The chunk's batches in one draw, as the library samples them (the buffer is the same for all of them);
            # SB3 draws one per step: the same rows for DQN, the same distribution for SAC, whose actor draws noise
            # between the steps.
            size = data.buffer.batch_size
            batches = data.buffer.sample(gradient_steps * size).split(size)
            for batch in batches:
                update(model, optimizer, batch, state)
    data.close()
    return model


@pytest.mark.parametrize(
    ("algo", "chunks"),
    [("dqn", {"train_freq": 1, "gradient_steps": 1}), ("dqn", {}), ("dqn", {"train_freq": 8, "gradient_steps": 4}),
     ("sac", {"train_freq": 1, "gradient_steps": 1}), ("sac", {"train_freq": 4, "gradient_steps": 8})],
)  # fmt: skip
def test_chunked_fit_learns_exactly_what_the_plain_loop_learns(algo, chunks):
    """Test that Trainer.fit on chunks ends with the very weights (bit for bit) of the plain loop with the same seed:
    the same gradient steps on the same samples, at 1/1 (also spelled utd_ratio=1) and in RL-Zoo-style chunks."""
    if algo == "dqn":
        env_id, update = "CartPole-v1", _dqn_update

        def make_model():
            return DQN(hidden_sizes=[32, 32], target_update_interval=7, max_grad_norm=None, total_timesteps=400,
                       exploration_fraction=0.5, lr=1e-3)  # fmt: skip
    else:
        env_id, update = "Pendulum-v1", _sac_update

        def make_model():
            return SAC(hidden_sizes=[32, 32], total_timesteps=200)

    steps = make_model().total_timesteps
    data_kwargs = dict(env_id=env_id, steps_per_epoch=steps, learning_starts=steps // 4, batch_size=16, seed=3,
                       eval_interval=10**6, eval_episodes=1, **chunks)  # fmt: skip
    pl.seed_everything(0)
    model, start = make_model(), _StartState()
    quiet_trainer(max_epochs=1, callbacks=[start]).fit(model, ReplayDataModule(**data_kwargs))
    train_freq, gradient_steps = chunks.get("train_freq", 1), chunks.get("gradient_steps", 1)
    plain = _plain_loop(make_model, data_kwargs, start, update, train_freq, gradient_steps)
    assert model.global_step > 0
    learned, expected = model.state_dict(), plain.state_dict()
    assert learned.keys() == expected.keys()
    for key, value in expected.items():
        assert torch.equal(learned[key], value), key
    assert any(not torch.equal(learned[key], start.weights[key]) for key in learned)  # it did learn


# ------------------------------------------------------------------ resume mid-chunk
class _StopAtGradientStep(pl.Callback):
    """Requests a stop (as SIGTERM's handler does) right before the optimizer step that makes ``global_step`` ``at``."""

    def __init__(self, at: int):
        self.at = at

    def on_before_optimizer_step(self, trainer, module, optimizer):
        if trainer.global_step + 1 == self.at:
            interrupt_request.request("SIGTERM")


@pytest.mark.parametrize(
    ("stop_at", "env_steps", "epoch_steps"),
    # Chunks of 10 env steps, 5 gradient steps each from the chunk ending at env step 40 (the first past 30):
    # gradient step 7 is the second of the chunk ending at 50 (mid-epoch), step 12 the second of the epoch's last
    # chunk (ending at 60, whose epoch is closed: the resumed epoch is the next one). Each owes 3.
    [(7, 50, 50), (12, 60, 0)],
)
def test_a_run_stopped_between_a_chunks_gradient_steps_resumes_spending_each_step_once(tmp_path, stop_at, env_steps,
                                                                                      epoch_steps):  # fmt: skip
    """Test that a stop between two gradient steps of a chunk saves what the chunk still owes, and that the resumed
    fit takes exactly those, then the rest: env steps and gradient steps each spent once, the budget exactly."""
    budget = 180

    def data():
        return ReplayDataModule(
            env_id="CartPole-v1", steps_per_epoch=60, learning_starts=30, train_freq=10, gradient_steps=5,
            batch_size=16, eval_interval=100, eval_episodes=1, save_replay_buffer=True,
        )  # fmt: skip

    pl.seed_everything(0)
    first = data()
    with pytest.raises(TrainingInterrupted) as info:
        trainer = quiet_trainer(tmp_path, max_epochs=-1, callbacks=[_StopAtGradientStep(stop_at)])
        trainer.fit(DQN(hidden_sizes=[16], total_timesteps=budget), first)
    owed = 3
    assert trainer.global_step == stop_at and first.env_steps == env_steps
    saved = torch.load(info.value.checkpoint, weights_only=False)
    rank = saved["ReplayDataModule"]["ranks"][0]
    assert rank["gradient_credit"] == owed and rank["epoch_steps"] == epoch_steps
    assert os.path.basename(info.value.checkpoint) == "last.ckpt"

    resumed, spy = data(), _GradientSteps()
    trainer = quiet_trainer(tmp_path, max_epochs=-1, callbacks=[spy])
    trainer.fit(DQN(hidden_sizes=[16], total_timesteps=budget), resumed, ckpt_path=info.value.checkpoint)
    # The chunk cut short comes back first, before any env step, with the gradient steps it owed; then the rest.
    chunks = spy.chunks()
    assert chunks[0] == (env_steps, owed)
    assert chunks[1:] == [(steps, 5) for steps in range(env_steps + 10, budget + 1, 10)]
    # 15 learning chunks (ending at env steps 40, 50, ..., 180) of 5: each gradient step once, the budget exactly.
    assert trainer.global_step == 15 * 5 and resumed.env_steps == budget
    resumed.close()
    first.close()


def test_a_chunk_cut_short_resumed_without_its_buffer_owes_nothing(tmp_path):
    """Test that a resumed fit whose checkpoint has no replay buffer (save_replay_buffer=False) drops the owed
    gradient steps (nothing to sample them from) and learns again once a batch's worth is stored."""

    def data():
        return ReplayDataModule(
            env_id="CartPole-v1", steps_per_epoch=60, learning_starts=30, train_freq=10, gradient_steps=5,
            batch_size=16, eval_interval=100, eval_episodes=1,
        )  # fmt: skip

    pl.seed_everything(0)
    with pytest.raises(TrainingInterrupted) as info:
        quiet_trainer(tmp_path, max_epochs=-1, callbacks=[_StopAtGradientStep(7)]).fit(
            DQN(hidden_sizes=[16], total_timesteps=120), data()
        )
    resumed, spy = data(), _GradientSteps()
    trainer = quiet_trainer(tmp_path, max_epochs=-1, callbacks=[spy])
    with pytest.warns(UserWarning, match="replay buffer is not restored"):
        trainer.fit(DQN(hidden_sizes=[16], total_timesteps=120), resumed, ckpt_path=info.value.checkpoint)
    # Owed chunk: none. Then the chunk ending at 60 (10 new rows < 16: none), then 70 ... 120: 6 chunks of 5.
    assert spy.chunks() == [(steps, 5) for steps in range(70, 121, 10)]
    assert trainer.global_step == 7 + 30 and resumed.env_steps == 120
    resumed.close()


# ------------------------------------------------------------------ Stable-Baselines3's schedule, step for step
@pytest.mark.parametrize(("train_freq", "gradient_steps", "learning_starts"), [(8, 4, 20), (8, 4, 24), (1, 1, 10)])
def test_the_chunk_schedule_is_stable_baselines3s(train_freq, gradient_steps, learning_starts):
    """Test that the same train_freq, gradient_steps and learning_starts give the very schedule of Stable-Baselines3's
    DQN.learn (its train() calls: at which env step, how many gradient steps), also where learning_starts is a chunk
    boundary (SB3 trains only when num_timesteps > learning_starts)."""
    import gymnasium as gym
    from stable_baselines3 import DQN as SB3DQN

    steps = 64
    sb3 = SB3DQN(
        "MlpPolicy", gym.make("CartPole-v1"), learning_starts=learning_starts, train_freq=train_freq,
        gradient_steps=gradient_steps, batch_size=4, policy_kwargs={"net_arch": [8]}, seed=0, device="cpu",
    )  # fmt: skip
    calls = []
    sb3.train = lambda gradient_steps, batch_size: calls.append((sb3.num_timesteps, gradient_steps))
    sb3.learn(steps)

    data = ReplayDataModule(
        env_id="CartPole-v1", steps_per_epoch=steps, learning_starts=learning_starts, train_freq=train_freq,
        gradient_steps=gradient_steps, batch_size=4, eval_episodes=1,
    )  # fmt: skip
    data.setup("fit")
    data._policy = lambda: DQN(hidden_sizes=[8]).build_policy(*data.env_spaces())
    ours = schedule(take_epoch(data.train_dataloader()))
    assert calls and ours == calls
    data.close()
