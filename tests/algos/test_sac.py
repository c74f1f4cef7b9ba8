"""SAC: fits, target updates, truncation in the target, resume with the replay buffer, determinism."""

from __future__ import annotations

import os

import lightning.pytorch as pl
import pytest
import torch

from rl_lightning import SAC, RolloutDataModule
from tests.helpers import REPLAY_LEARNING_STARTS, REPLAY_STEPS, quiet_trainer, tiny_ppo, tiny_replay_data

STEPS, LEARNING_STARTS = REPLAY_STEPS, REPLAY_LEARNING_STARTS


def small_data(**kwargs):
    return tiny_replay_data(**{"env_id": "Pendulum-v1", **kwargs})


def fit(tmp_path=None, max_epochs=2, seed=0, model_kwargs=None, data_kwargs=None, ckpt_path=None, callbacks=()):
    pl.seed_everything(seed)
    data = small_data(seed=seed, **(data_kwargs or {}))
    model = SAC(**{"hidden_sizes": [16, 16], "total_timesteps": 10_000, **(model_kwargs or {})})
    trainer = quiet_trainer(tmp_path, callbacks, max_epochs=max_epochs)
    trainer.fit(model, data, ckpt_path=ckpt_path)
    return model, data, trainer


def test_two_epoch_fit_updates_and_logs_every_metric():
    """Test that a 2-epoch fit takes its env steps, one update per env step after learning_starts, and logs."""
    model, data, trainer = fit()
    assert data.env_steps == 2 * STEPS
    metrics = trainer.callback_metrics
    for name in ("loss_actor", "loss_qvalue", "loss_alpha", "alpha", "entropy"):
        assert torch.isfinite(metrics[f"train/{name}"]), name
    assert "eval/return_mean" in metrics and "eval_ood/return_mean" in metrics
    assert metrics["train/alpha"] < 1.0  # the temperature moved from its initial value
    # One gradient step after each env step from learning_starts on: one step of the one optimizer.
    assert trainer.global_step == 2 * STEPS - LEARNING_STARTS  # after every env step past learning_starts


def test_target_critics_move_by_polyak_averaging():
    """Test that update_targets sets target = (1 - tau) target + tau online, exactly."""
    model, _, _ = fit(max_epochs=1, model_kwargs={"tau": 0.25})
    with torch.no_grad():  # move the online critics away from the targets
        for p in model.critics.parameters():
            p.add_(1.0)
    online = {k: v.clone() for k, v in model.critics.state_dict().items()}
    before = {k: v.clone() for k, v in model.target_critics.state_dict().items()}
    model.update_targets()
    after = model.target_critics.state_dict()
    assert after.keys() == online.keys() and len(after) == 6  # 3 stacked layers, weights and biases
    for key, value in after.items():
        torch.testing.assert_close(value, 0.75 * before[key] + 0.25 * online[key])


def test_one_optimizer_steps_each_group_with_its_learning_rate_and_clips_groups_apart():
    """Test that actor, critics and temperature are Adam groups with their own rates, clipped group by group."""
    model, data, _ = fit(max_epochs=1, model_kwargs={"actor_lr": 1e-4, "critic_lr": 2e-3, "alpha_lr": 5e-2})
    optimizer = model.optimizers()
    groups = optimizer.param_groups
    assert [g["lr"] for g in groups] == [1e-4, 2e-3, 5e-2]
    assert [len(g["params"]) for g in groups] == [6, 6, 1]
    assert groups[2]["params"][0] is model.log_alpha

    model.guard.max_grad_norm = 1e-3
    seen = []
    original = torch.nn.utils.clip_grads_with_norm_

    def spy(params, max_norm, norm):
        original(params, max_norm, norm)
        seen.append((len(params), float(torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in params])))))

    with pytest.MonkeyPatch.context() as mp:  # the update guard clips each group with its own norm
        mp.setattr(torch.nn.utils, "clip_grads_with_norm_", spy)
        model.update(data.buffer.sample(), model.optimizers())
    assert [count for count, _ in seen] == [6, 6, 1]
    assert all(norm == pytest.approx(1e-3, rel=1e-4) for _, norm in seen[:2])  # each group's own norm is clipped


def test_training_step_updates_critics_actor_and_temperature_from_one_batch():
    """Test that one update moves all three parameter sets and the targets by tau toward the new critics."""
    model, data, trainer = fit(max_epochs=1, model_kwargs={"tau": 0.5})
    before = {k: v.clone() for k, v in model.state_dict().items()}
    batch = data.buffer.sample()
    model.update(batch, model.optimizers())
    after = model.state_dict()
    for prefix in ("policy.net.", "critics.", "log_alpha", "target_critics."):
        assert any(not torch.equal(before[k], after[k]) for k in after if k.startswith(prefix)), prefix
    for key, value in model.target_critics.state_dict().items():
        torch.testing.assert_close(value, 0.5 * before[f"target_critics.{key}"] + 0.5 * after[f"critics.{key}"])


def _q_loss(model, terminated: bool, next_obs: torch.Tensor) -> float:
    batch_size = next_obs.shape[0]
    from tensordict import TensorDict

    batch = TensorDict(
        {
            "obs": torch.zeros(batch_size, 3),
            "action": torch.zeros(batch_size, 1),
            "reward": torch.ones(batch_size),
            "next_obs": next_obs,
            "terminated": torch.full((batch_size,), terminated),
        },
        batch_size=[batch_size],
    )
    torch.manual_seed(0)  # the same sampled next actions for every call
    return float(model.loss(batch).loss_qvalue)


def test_truncated_transitions_bootstrap_from_next_obs_terminated_do_not():
    """Test that the critic target depends on the stored next observation unless the transition terminated."""
    model, _, _ = fit(max_epochs=1)
    a, b = torch.zeros(8, 3), torch.ones(8, 3)
    # Truncation (terminated=False): the target bootstraps, so the next observation matters.
    assert _q_loss(model, False, a) != pytest.approx(_q_loss(model, False, b))
    # Termination: the target is the reward alone, whatever the next observation.
    assert _q_loss(model, True, a) == pytest.approx(_q_loss(model, True, b))


def test_same_seed_gives_identical_parameters():
    """Test that two fits with the same seed end with identical actor and critic parameters."""
    first, _, _ = fit(seed=3)
    second, _, _ = fit(seed=3)
    for (name, p), (_, q) in zip(first.state_dict().items(), second.state_dict().items(), strict=True):
        torch.testing.assert_close(p, q, msg=name)


class _ResumeSpy(pl.Callback):
    """Reads the restored state in on_fit_start (Lightning fetches the first batch before on_train_start)."""

    def on_fit_start(self, trainer, pl_module):
        data = trainer.datamodule
        self.buffer = data.buffer.storage[: len(data.buffer)].clone()
        self.log_alpha = pl_module.log_alpha.detach().clone()
        self.targets = {k: v.clone() for k, v in pl_module.target_critics.state_dict().items()}
        self.env_steps = data.env_steps


def test_resume_restores_replay_buffer_temperature_and_targets(tmp_path):
    """Test that fit(ckpt_path=...) with save_replay_buffer restores the buffer's contents, alpha and target critics."""
    model, data, _ = fit(
        tmp_path, max_epochs=2, model_kwargs={"save_interval": 1}, data_kwargs={"save_replay_buffer": True}
    )
    saved_buffer = data.buffer.storage[: len(data.buffer)].clone()
    saved_alpha = model.log_alpha.detach().clone()
    saved_targets = {k: v.clone() for k, v in model.target_critics.state_dict().items()}
    spy = _ResumeSpy()
    last = os.path.join(tmp_path, "checkpoints", "last.ckpt")
    fit(
        tmp_path,
        max_epochs=3,
        model_kwargs={"save_interval": 1},
        data_kwargs={"save_replay_buffer": True},
        ckpt_path=last,
        callbacks=[spy],
    )
    assert spy.env_steps == 2 * STEPS and len(spy.buffer) == 2 * STEPS
    for key in ("obs", "action", "reward", "next_obs", "terminated"):
        torch.testing.assert_close(spy.buffer[key], saved_buffer[key])
    torch.testing.assert_close(spy.log_alpha, saved_alpha)
    assert spy.targets.keys() == saved_targets.keys()
    for key, value in saved_targets.items():
        torch.testing.assert_close(spy.targets[key], value)


def test_algorithm_and_data_module_must_match():
    """Test that SAC on rollout data, or PPO on replay data, fails at setup naming the data module to use."""
    trainer = pl.Trainer(max_epochs=1, logger=False, enable_progress_bar=False, enable_model_summary=False)
    with pytest.raises(TypeError, match="SAC learns from a ReplayDataModule"):
        trainer.fit(SAC(), RolloutDataModule(env_id="Pendulum-v1", eval_episodes=1))
    with pytest.raises(TypeError, match="PPO learns from a RolloutDataModule"):
        trainer.fit(tiny_ppo(), small_data())


def test_sac_refuses_discrete_actions():
    """Test that SAC on a discrete-action env says to use another algorithm."""
    trainer = pl.Trainer(max_epochs=1, logger=False, enable_progress_bar=False, enable_model_summary=False)
    with pytest.raises(TypeError, match="1-D Box action space"):
        trainer.fit(SAC(), small_data(env_id="CartPole-v1"))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"tau": 0}, "tau"), ({"gamma": 1.5}, "gamma"), ({"actor_lr": -1}, "actor_lr"), ({"hidden_sizes": 64}, "hidden"),
     ({"target_entropy": "auto"}, "target_entropy must be a finite number or None .minus the action size"),
     ({"target_entropy": float("nan")}, "target_entropy")],
)  # fmt: skip
def test_impossible_hyperparameters_are_refused(kwargs, match):
    """Test that impossible SAC hyperparameters raise a ValueError naming them."""
    with pytest.raises(ValueError, match=match):
        SAC(**kwargs)


class _ZeroActorLoss(SAC):
    """A subclass with its own losses: the actor loss is dropped, so the actor never moves."""

    def loss(self, batch):
        terms = super().loss(batch)
        self.calls = getattr(self, "calls", 0) + 1
        return terms._replace(loss_actor=0.0 * terms.loss_actor)


def test_a_subclass_loss_is_what_the_update_differentiates():
    """Test that SAC.update differentiates a subclass's own loss."""
    pl.seed_everything(0)
    model = _ZeroActorLoss(total_timesteps=120, hidden_sizes=(16, 16))
    trainer = quiet_trainer(max_epochs=-1)
    data = small_data()
    data.setup("fit")
    model._ensure_policy(*data.env_spaces())
    actor_before = {k: v.clone() for k, v in model.policy.state_dict().items()}
    critics_before = {k: v.clone() for k, v in model.critics.state_dict().items()}
    trainer.fit(model, data)
    assert trainer.global_step > 0 and model.calls == trainer.global_step
    assert all(torch.equal(actor_before[k], v) for k, v in model.policy.state_dict().items())
    assert any(not torch.equal(critics_before[k], v) for k, v in model.critics.state_dict().items())


def test_sacs_critics_read_the_privileged_keys_and_its_actor_does_not():
    """Test observation groups in SAC: the actor's encoder reads actor_keys only, so its actions do not move with the
    privileged key; the twin critics' encoder reads critic_keys, so their Q-values do."""
    import gymnasium as gym
    import numpy as np
    from tensordict import TensorDict

    space = gym.spaces.Dict(
        {"joints": gym.spaces.Box(-1.0, 1.0, (3,), np.float32), "friction": gym.spaces.Box(0.0, 2.0, (1,), np.float32)}
    )
    torch.manual_seed(0)
    model = SAC(encoder={"actor_keys": ["joints"], "critic_keys": ["joints", "friction"]})
    policy = model.build_policy(space, gym.spaces.Box(-1.0, 1.0, (2,), np.float32))
    assert [v.key for v in policy.encoder.vectors] == ["joints"]
    assert sorted(v.key for v in model.critics.encoder.vectors) == ["friction", "joints"]
    joints = torch.rand(5, 3) * 2 - 1
    obs = [TensorDict({"joints": joints, "friction": torch.full((5, 1), f)}, batch_size=[5]) for f in (0.1, 1.9)]
    actions = [policy.act(o)[0] for o in obs]
    torch.testing.assert_close(actions[0], actions[1])
    torch.testing.assert_close(policy.act(TensorDict({"joints": joints}, batch_size=[5]))[0], actions[0])
    q = [model.critics(o, actions[0]) for o in obs]
    assert not torch.allclose(q[0], q[1])


def test_a_fit_without_a_data_module_names_the_algorithms_own():
    """Test that SAC fitted on a bare dataloader says to pass a ReplayDataModule (not PPO's RolloutDataModule)."""
    from torch.utils.data import DataLoader

    with pytest.raises(RuntimeError, match=r"env of a ReplayDataModule.*datamodule=ReplayDataModule\(env_id=\.\.\.\)"):
        quiet_trainer(max_epochs=1).fit(SAC(), train_dataloaders=DataLoader([1]))


def test_a_budget_that_ends_before_learning_starts_is_refused():
    """Test that a run whose env steps, in the whole epochs it takes, end at or before learning_starts is refused before
    any step, naming the settings (it would take random actions only and train nothing), and that a budget below
    learning_starts whose epoch reaches past it is not."""
    refused = rf"learning_starts={REPLAY_STEPS} is not below the {REPLAY_STEPS} env steps the run takes"
    with pytest.raises(
        ValueError,
        match=rf"{refused} \(total_timesteps=40 in whole epochs of {REPLAY_STEPS}; {REPLAY_STEPS} per rank\)",
    ):
        data = tiny_replay_data("Pendulum-v1", learning_starts=REPLAY_STEPS)
        quiet_trainer(max_epochs=1).fit(SAC(total_timesteps=40), data)
    model = SAC(hidden_sizes=[16], total_timesteps=REPLAY_LEARNING_STARTS)  # one 60-step epoch: learns past 40
    quiet_trainer(max_epochs=1).fit(model, tiny_replay_data("Pendulum-v1"))
    assert model.global_step == REPLAY_STEPS - REPLAY_LEARNING_STARTS


def test_a_batch_larger_than_the_run_ever_stores_is_refused():
    """Test that a batch_size above the transitions a run stores (its whole-epoch budget) is refused before any step,
    naming it (the run finished with no gradient step and no message)."""
    with pytest.raises(ValueError, match=rf"batch_size=1000 is more than the {REPLAY_STEPS} env steps the run takes"):
        data = tiny_replay_data("Pendulum-v1", batch_size=1000, buffer_size=2000)
        quiet_trainer(max_epochs=1).fit(SAC(total_timesteps=REPLAY_STEPS), data)
