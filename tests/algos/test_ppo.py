"""Integration tests: PPO fits, evaluates, checkpoints, resumes and is reproducible."""

import glob
import os

import lightning.pytorch as pl
import numpy as np
import pytest
import torch
from torch import nn

from rl_lightning import PPO, RolloutDataModule
from rl_lightning.data import evaluation
from tests.conftest import SCRIPTED_ID
from tests.helpers import quiet_trainer, tiny_ppo, tiny_rollout_data

ROLLOUT = 4 * 16  # num_envs x rollout_steps in these tests


def small_data(env_id="CartPole-v1", **kwargs):
    kwargs = {
        "env_id": env_id,
        "num_envs": 4,
        "rollout_steps": 16,
        "eval_episodes": 2,
        "eval_max_episode_steps": 30,
        **kwargs,
    }
    return RolloutDataModule(**kwargs)


def trainer(tmp_path=None, **kwargs):
    return quiet_trainer(tmp_path, **kwargs)


def fit(env="CartPole-v1", seed=0, tmp_path=None, model_kwargs=None, data_kwargs=None, **trainer_kwargs):
    pl.seed_everything(seed)
    data = small_data(env, seed=seed, **(data_kwargs or {}))
    model = tiny_ppo(**{"total_timesteps": 10_000, **(model_kwargs or {})})
    t = trainer(tmp_path, **trainer_kwargs)
    t.fit(model, data)
    return model, data, t


@pytest.mark.parametrize("env", ["CartPole-v1", "InvertedPendulum-v5"])
def test_two_epoch_fit_logs_every_metric(env):
    """Test that a 2-epoch fit (discrete and continuous) takes 2 rollouts and logs all metrics."""
    model, data, t = fit(env)
    assert data.env_steps == 2 * ROLLOUT and t.global_step == 2 * 2 * 2
    metrics = t.callback_metrics
    for name in ["policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction", "explained_variance"]:
        assert torch.isfinite(metrics[f"train/{name}"]), name
    assert metrics["time/env_steps"] == 2 * ROLLOUT and metrics["time/sps"] > 0
    for prefix in ("eval", "eval_ood"):
        assert f"{prefix}/return_mean" in metrics and f"{prefix}/length_mean" in metrics
    gap = metrics["eval/return_mean"] - metrics["eval_ood/return_mean"]
    assert metrics["eval_ood/generalization_gap"] == pytest.approx(float(gap))


def test_rollout_episode_metrics_are_logged():
    """Test that completed training episodes are logged as rollout/ metrics."""
    _, _, t = fit(data_kwargs={"max_episode_steps": 8})
    assert t.callback_metrics["rollout/episode_length"] <= 8
    assert t.callback_metrics["rollout/episode_return"] > 0


def test_test_stage_evaluates_both_object_sets():
    """Test that trainer.test reports eval/ and eval_ood/ metrics with exact episode counts, all in one result (one
    loader, a batch per object set)."""
    model, data, t = fit(max_epochs=1)
    results = t.test(model, data, verbose=False)
    assert len(results) == 1
    assert "eval/return_mean" in results[0] and "eval_ood/return_mean" in results[0]
    assert results[0]["eval/length_mean"] <= 30


def test_eval_interval_gates_validation(monkeypatch):
    """Test that validation evaluates only every eval_interval epochs (and not in the sanity check)."""
    calls = []
    original = evaluation.evaluate
    monkeypatch.setattr(evaluation, "evaluate", lambda *a, **k: calls.append(1) or original(*a, **k))
    fit(max_epochs=5, data_kwargs={"eval_interval": 2})
    assert len(calls) == 2 * 2  # epochs 2 and 4, two object sets each


def test_standalone_validate_always_evaluates(tmp_path):
    """Test that trainer.validate from a checkpoint evaluates both sets whatever epoch it was saved at."""
    fit(tmp_path=tmp_path, max_epochs=3, model_kwargs={"save_interval": 1}, data_kwargs={"eval_interval": 2})
    loaded = PPO.load_from_checkpoint(os.path.join(tmp_path, "checkpoints", "last.ckpt"))
    results = trainer(max_epochs=1).validate(loaded, small_data(eval_interval=2), verbose=False)
    assert "eval/return_mean" in results[0] and "eval_ood/return_mean" in results[0]


def test_checkpoint_loads_to_identical_deterministic_actions(tmp_path):
    """Test that load_from_checkpoint gives a policy that acts like the trained one, without envs."""
    model, data, t = fit("InvertedPendulum-v5", tmp_path=tmp_path, model_kwargs={"save_interval": 1})
    last = os.path.join(tmp_path, "checkpoints", "last.ckpt")
    assert os.path.exists(last)
    loaded = PPO.load_from_checkpoint(last)
    obs = np.random.default_rng(0).normal(size=(100, 4)).astype(np.float32)
    np.testing.assert_array_equal(model.predict(obs), loaded.predict(obs))
    assert loaded.predict(obs[0]).shape == (1,)
    torch.testing.assert_close(model.policy.normalizer.mean, loaded.policy.normalizer.mean)
    assert loaded.policy.normalizer.count > 1  # statistics were learned and saved


def test_loaded_checkpoint_evaluates_on_both_object_sets(tmp_path):
    """Test that trainer.test on a loaded checkpoint evaluates train and test sets with its weights."""
    model, _, _ = fit(tmp_path=tmp_path, model_kwargs={"save_interval": 1})
    loaded = PPO.load_from_checkpoint(os.path.join(tmp_path, "checkpoints", "last.ckpt"))
    data = small_data()
    results = trainer(max_epochs=1).test(loaded, data, verbose=False)
    assert "eval/return_mean" in results[0] and "eval_ood/return_mean" in results[0]
    reference = trainer(max_epochs=1).test(model, small_data(), verbose=False)
    assert results == reference  # same weights, same evaluation seeds


def test_a_checkpoint_tests_on_eval_envs_whose_time_bound_differs(tmp_path):
    """Test that `test` from a checkpoint of a run whose TimeAwareObservation bound differs between training and
    evaluation envs (eval_max_episode_steps) evaluates: the policy is the training env's, where the evaluation
    env's bounds were compared with the checkpoint's and refused."""
    wrappers = ["gymnasium.wrappers.TimeAwareObservation"]
    fit(tmp_path=tmp_path, model_kwargs={"save_interval": 1}, data_kwargs={"wrappers": wrappers}, max_epochs=1)
    data = small_data(wrappers=wrappers)  # eval_max_episode_steps=30 against CartPole's registered 500
    assert data.env_spaces()[0].high[-1] == 500
    results = trainer().test(PPO(), data, ckpt_path=os.path.join(tmp_path, "checkpoints", "last.ckpt"), verbose=False)
    assert results[0]["eval/length_mean"] <= 30 and results[0]["time/env_steps"] == ROLLOUT


def test_the_evaluation_a_resume_reruns_is_logged_at_the_checkpoints_env_step(tmp_path):
    """Test that the evaluation an interruption cut off, run when the fit resumes, reaches the loggers at the
    checkpoint's env step and marks the collection evaluated (best.ckpt never pairs its score with later weights:
    tests/callbacks/test_checkpoint.py)."""
    from lightning.pytorch.loggers import CSVLogger

    model, data = tiny_ppo(total_timesteps=10_000), small_data()
    t = trainer(max_epochs=1, logger=CSVLogger(tmp_path, name="", version=""))
    t.fit(model, data)
    t.callback_metrics.clear()
    data.counters.evaluated = 0  # the epoch's evaluation undone, as an interruption leaves it
    assert data.evaluation_due
    model._evaluate_cut(data)
    t.logger.save()
    assert not data.evaluation_due
    rows = (tmp_path / "metrics.csv").read_text().splitlines()
    header = rows[0].split(",")
    logged = [dict(zip(header, row.split(","), strict=True)) for row in rows[1:]]
    evaluated = [row for row in logged if row["eval/return_mean"]]
    assert len(evaluated) == 2  # the epoch's, then the rerun's
    assert float(evaluated[-1]["step"]) == data.env_steps and float(evaluated[-1]["eval_ood/return_mean"]) > 0


def test_the_evaluation_a_resume_reruns_is_offered_to_best_ckpt(tmp_path):
    """Test that the rerun evaluation writes best.ckpt with the restored weights when it beats every earlier
    evaluation, and leaves it when it does not (it was never offered: a resumed run's best could miss it)."""
    model, data, t = fit(tmp_path=tmp_path, max_epochs=1, model_kwargs={"save_interval": 1})
    best = next(c for c in t.callbacks if type(c).__name__ == "BestCheckpoint")
    path = tmp_path / "checkpoints" / "best.ckpt"
    best.best_model_score = torch.tensor(1e9)  # an earlier evaluation no rerun beats
    os.remove(path)
    data.counters.evaluated = 0
    model._evaluate_cut(data)
    assert not path.exists() and best.best_model_score == 1e9
    best.best_model_score = torch.tensor(0.0)  # below any CartPole return
    with torch.no_grad():
        next(model.policy.parameters()).add_(1.0)  # weights no earlier checkpoint holds
    data.counters.evaluated = 0
    model._evaluate_cut(data)
    saved = torch.load(path, weights_only=True)
    name, weight = next(iter(model.state_dict().items()))
    torch.testing.assert_close(saved["state_dict"][name], weight)
    state = next(value for key, value in saved["callbacks"].items() if key.startswith("BestCheckpoint"))
    assert state["best_model_score"] == best.best_model_score > 0.0  # the rerun's score, in the file


class _LastHoldsTheBest(pl.Callback):
    """At each epoch's start: the best score stored in last.ckpt (written at the previous epoch's end) against the
    BestCheckpoint's, which that epoch's evaluation may have raised."""

    def __init__(self):
        self.pairs = []

    def on_train_epoch_start(self, trainer, pl_module):
        best = next(c for c in trainer.callbacks if type(c).__name__ == "BestCheckpoint")
        if best.best_model_score is not None:
            saved = torch.load(os.path.join(best.dirpath, "last.ckpt"), weights_only=True)["callbacks"]
            stored = next(value for key, value in saved.items() if key.startswith("BestCheckpoint"))
            self.pairs.append((stored["best_model_score"], best.best_model_score))


def test_last_ckpt_holds_the_best_score_of_its_own_epoch(tmp_path):
    """Test that a checkpoint written at an epoch whose evaluation set a new best carries that best score: it held
    the one before, so a resume from it let a worse evaluation overwrite best.ckpt."""
    spy = _LastHoldsTheBest()
    _, _, t = fit(tmp_path=tmp_path, max_epochs=3, model_kwargs={"save_interval": 1}, callbacks=[spy])
    assert t.checkpoint_callback.last_model_path.endswith("last.ckpt")  # Lightning's idiom for the last checkpoint
    assert len(spy.pairs) == 2
    for stored, current in spy.pairs:
        assert stored is not None and float(stored) == float(current)


def test_interval_checkpoints_and_final_last(tmp_path):
    """Test that checkpoints are written every save_interval epochs and last.ckpt holds the end."""
    fit(tmp_path=tmp_path, max_epochs=5, model_kwargs={"save_interval": 2})
    names = sorted(os.path.basename(p) for p in glob.glob(os.path.join(tmp_path, "checkpoints", "*.ckpt")))
    assert names == ["best.ckpt", "epoch=1-env_steps=128.ckpt", "epoch=3-env_steps=256.ckpt", "last.ckpt"]
    last = torch.load(os.path.join(tmp_path, "checkpoints", "last.ckpt"), weights_only=True)
    assert last["global_step"] == 20 and last["RolloutDataModule"]["env_steps"] == 5 * ROLLOUT


class _OptimizerSpy(pl.Callback):
    def on_train_start(self, trainer, pl_module):
        state = trainer.optimizers[0].state_dict()["state"]
        self.steps = {k: float(v["step"]) for k, v in state.items()}
        self.exp_avg = {k: v["exp_avg"].clone() for k, v in state.items()}
        self.env_steps = pl_module.env_steps


def test_resume_restores_counters_optimizer_and_budget(tmp_path):
    """Test that fit(ckpt_path='last') continues env steps, optimizer state and the budget."""
    model_kwargs = {"save_interval": 1, "total_timesteps": 4 * ROLLOUT}
    fit(tmp_path=tmp_path, max_epochs=2, model_kwargs=model_kwargs)
    saved = torch.load(os.path.join(tmp_path, "checkpoints", "last.ckpt"), weights_only=True)

    data, model, spy = small_data(), tiny_ppo(**model_kwargs), _OptimizerSpy()
    t = trainer(tmp_path, max_epochs=-1, callbacks=[spy])
    t.fit(model, data, ckpt_path="last")
    assert spy.env_steps == 2 * ROLLOUT
    for k, v in saved["optimizer_states"][0]["state"].items():
        assert spy.steps[k] == float(v["step"]) == 8
        torch.testing.assert_close(spy.exp_avg[k], v["exp_avg"])
    # The budget of 4 rollouts counts on from 2: exactly 2 more epochs ran.
    assert data.env_steps == 4 * ROLLOUT and t.current_epoch == 4

    # Resuming a finished run collects nothing more.
    data2 = small_data()
    trainer(tmp_path, max_epochs=-1).fit(tiny_ppo(**model_kwargs), data2, ckpt_path="last")
    assert data2.env_steps == 4 * ROLLOUT


def test_budget_stops_training():
    """Test that training stops after the epoch that reaches total_timesteps."""
    _, data, t = fit(max_epochs=-1, model_kwargs={"total_timesteps": 2 * ROLLOUT + 1})
    assert data.env_steps == 3 * ROLLOUT and t.current_epoch == 3


def test_same_seed_gives_identical_parameters():
    """Test that two runs with the same seed end with identical weights; another seed differs."""
    params = [fit(seed=s, max_epochs=2)[0].policy.state_dict() for s in (0, 0, 1)]
    for key in params[0]:
        torch.testing.assert_close(params[0][key], params[1][key], rtol=0, atol=0)
    assert any(not torch.equal(params[0][k], params[2][k]) for k in params[0])


def test_user_networks_are_used():
    """Test that user-supplied actor and critic modules are trained in place of the MLPs."""
    actor, critic = nn.Linear(4, 2), nn.Linear(4, 1)
    before = actor.weight.detach().clone()
    model, _, _ = fit(model_kwargs={"actor": actor, "critic": critic}, max_epochs=1)
    assert model.policy.actor is actor and model.policy.critic is critic
    assert not torch.equal(before, actor.weight)


def test_user_env_without_object_sets_trains_with_warning():
    """Test that a registered env with no object sets trains with train = test = itself."""
    with pytest.warns(UserWarning, match="no out-of-distribution"):
        data = small_data(SCRIPTED_ID)
    model = tiny_ppo(total_timesteps=10_000)
    t = trainer(max_epochs=1)
    t.fit(model, data)
    assert t.callback_metrics["eval/return_mean"] == t.callback_metrics["eval_ood/return_mean"]
    assert t.callback_metrics["eval/success_rate"] == 0.0  # 5-step episodes report is_success=False


@pytest.mark.parametrize("episode_len, rate", [(4, 1.0), (5, 0.0)])
def test_rollout_success_rate_counts_the_episodes_that_ended(episode_len, rate):
    """Test that rollout/success_rate is the share of the epoch's ended episodes whose env reported success, and that
    an env that reports none logs no rate."""
    sets = {"train": [{"attrs": {"episode_len": episode_len}}], "test": [{"attrs": {"episode_len": 4}}]}
    t = trainer(max_epochs=1)
    t.fit(tiny_ppo(total_timesteps=10_000), small_data(SCRIPTED_ID, obj_sets=sets))
    assert t.callback_metrics["rollout/success_rate"] == rate
    t = trainer(max_epochs=1)
    t.fit(tiny_ppo(total_timesteps=10_000), small_data(rollout_steps=64))  # CartPole reports no success
    assert "rollout/episode_return" in t.callback_metrics and "rollout/success_rate" not in t.callback_metrics


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"env_id": "CartPol-v1"}, "Unknown environment id 'CartPol-v1'.*CartPole-v1"),
        ({"eval_obj_sets": ["train", "ood"]}, "eval_obj_sets: unknown object set 'ood'"),
        ({"train_obj_set": "tset"}, "train_obj_set: unknown object set 'tset'"),
        ({"num_envs": 0}, "num_envs must be a positive integer"),
        ({"rollout_steps": -5}, "rollout_steps must be a positive integer"),
        ({"eval_episodes": 0}, "eval_episodes must be a positive integer"),
        ({"vectorization": "threads"}, "vectorization must be one of"),
    ],
)
def test_bad_data_input_fails_before_work(kwargs, match):
    """Test that bad data-module arguments raise a clear error at construction."""
    with pytest.raises(ValueError, match=match):
        small_data(**kwargs)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"total_timesteps": 0}, "total_timesteps must be a positive integer"),
        ({"lr": -1.0}, "lr must be a positive number"),
        ({"ent_coef": -0.1}, "ent_coef must be a non-negative number"),
        ({"hidden_sizes": [64, 0]}, "hidden_sizes must be a list of positive integers"),
        ({"save_interval": 0}, "save_interval must be a positive integer"),
        ({"update_epochs": 1.5}, "update_epochs must be a positive integer"),
        ({"num_minibatches": 0}, "num_minibatches must be a positive integer"),
        ({"gamma": 1.5}, r"gamma must be a number in \[0, 1\]"),
        ({"gae_lambda": -0.1}, r"gae_lambda must be a number in \[0, 1\]"),
    ],
)
def test_bad_model_input_fails_before_work(kwargs, match):
    """Test that bad PPO arguments raise a clear error at construction."""
    with pytest.raises(ValueError, match=match):
        PPO(**kwargs)


def test_minibatches_that_do_not_divide_the_rollout_fail_before_an_env_step():
    """Test that num_minibatches not dividing rollout_steps x num_envs stops fit before a step, naming the fix."""
    data = small_data()
    message = r"num_minibatches=3 does not divide the rollout's sequences of 1 step.*16 x 4 = 64.*algo.num_minibatches"
    with pytest.raises(ValueError, match=message):
        trainer(max_epochs=1).fit(PPO(num_minibatches=3), data)
    assert data.env_steps == 0


def test_learning_settings_belong_to_the_algorithm_only():
    """Test that the data module takes no learning setting: gamma and the update plan are PPO's arguments alone."""
    for name in ("gamma", "gae_lambda", "update_epochs", "num_minibatches"):
        with pytest.raises(TypeError, match=name):
            small_data(**{name: 1})


def test_unsupported_space_is_rejected():
    """Test that an action space PPO cannot handle fails at setup with its name."""
    data = small_data("Blackjack-v1", obj_sets={"train": [{}], "test": [{}]})
    with pytest.raises(TypeError, match="Box or Dict observation space, got Tuple"):
        trainer(max_epochs=1).fit(tiny_ppo(total_timesteps=100), data)


def test_checkpoint_of_other_kind_is_rejected(tmp_path):
    """Test that a checkpoint without rl_lightning metadata fails with a clear message."""
    path = tmp_path / "foreign.ckpt"
    torch.save({"state_dict": {}, "hyper_parameters": {}, "pytorch-lightning_version": "2.6.6"}, path)
    with pytest.raises(ValueError, match="not written by rl_lightning"):
        PPO.load_from_checkpoint(path)


def test_corrupt_checkpoint_gets_clear_error(tmp_path):
    """Test that a truncated checkpoint file fails with a message naming the file and the fix."""
    fit(tmp_path=tmp_path, model_kwargs={"save_interval": 1}, max_epochs=1)
    good = tmp_path / "checkpoints" / "last.ckpt"
    broken = tmp_path / "broken.ckpt"
    broken.write_bytes(good.read_bytes()[:1000])
    with pytest.raises(ValueError, match="broken.ckpt.*not a complete checkpoint.*earlier checkpoint"):
        PPO.load_from_checkpoint(broken)
    assert PPO.load_from_checkpoint(good).policy is not None  # the good one still loads


def test_clipping_is_refused_under_strategies_that_would_refuse_or_skip_it():
    """Test that max_grad_norm under FSDP gets an error naming the strategy and the fix; DDP is fine."""
    from lightning.pytorch.strategies import DDPStrategy, FSDPStrategy

    from rl_lightning.algos.base import check_clipping_strategy

    with pytest.raises(ValueError, match="FSDPStrategy refuses.*algo.max_grad_norm=null"):
        check_clipping_strategy(FSDPStrategy(cpu_offload=True), 0.5)
    check_clipping_strategy(FSDPStrategy(cpu_offload=True), None)
    check_clipping_strategy(DDPStrategy(), 0.5)


def _weight_change(max_grad_norm):
    pl.seed_everything(0)
    model = tiny_ppo(total_timesteps=10_000, max_grad_norm=max_grad_norm)
    data = small_data("CartPole-v1", seed=0)
    data.setup("fit")
    model._ensure_policy(*data.env_spaces())
    before = torch.cat([p.detach().flatten().clone() for p in model.policy.parameters()])
    quiet_trainer(max_epochs=1).fit(model, data)
    after = torch.cat([p.detach().flatten() for p in model.policy.parameters()])
    return (after - before).abs().max().item()


def test_max_grad_norm_clips_every_update_step():
    """Test that max_grad_norm is applied to the manual update steps: a tiny norm leaves Adam's steps tiny."""
    # Adam divides by sqrt(v) + eps (1e-5): gradients clipped to norm 1e-9 move no weight
    # by more than about lr * 1e-4, while unclipped ones move weights by about lr per step.
    assert _weight_change(1e-9) < 1e-7
    assert _weight_change(None) > 1e-4
    assert _weight_change(0.5) > 1e-4


def test_trainer_gradient_clip_val_is_refused_for_ppo():
    """Test that Trainer(gradient_clip_val=...) stops PPO at start, pointing to the Trainer setting."""
    data = small_data("CartPole-v1", seed=0)
    with pytest.raises(Exception, match="gradient_clip_val"):
        quiet_trainer(max_epochs=1, gradient_clip_val=1.0).fit(tiny_ppo(total_timesteps=10_000), data)


PIXEL_GOAL = "tests.envs.pixel_goal:pixel_goal/PixelGoal-v0"
SMALL_CNN = {"cnn_channels": [8], "cnn_kernels": [2], "cnn_strides": [1], "cnn_features": 16}


def test_dict_observations_train_checkpoint_and_predict_from_a_dict(tmp_path):
    """Test that PPO trains on image-and-vector observations and the loaded checkpoint predicts from a dict (and acts
    on one when called)."""
    model, data, t = fit(PIXEL_GOAL, tmp_path=tmp_path, model_kwargs={"encoder": SMALL_CNN},
                         data_kwargs={"obj_sets": {"train": [{}], "test": [{}]}})  # fmt: skip
    assert data.env_steps == 2 * ROLLOUT
    assert type(model.policy.encoder).__name__ == "MultiInputEncoder"
    assert model.hparams.encoder == SMALL_CNN  # plain lists, as given
    path = tmp_path / "ppo.ckpt"
    t.save_checkpoint(path)
    loaded = PPO.load_from_checkpoint(path)
    space = loaded.spaces[0]
    space.seed(0)
    single = space.sample()
    batch = {key: np.stack([space.sample()[key] for _ in range(3)]) for key in space.spaces}
    assert loaded.predict(single).shape == () and loaded.predict(batch).shape == (3,)
    np.testing.assert_array_equal(loaded.predict(batch), model.predict(batch))
    with torch.no_grad():  # called on a plain dict of tensors, the module and its policy act as predict does
        tensors = {key: torch.as_tensor(value) for key, value in batch.items()}
        for module in (loaded, loaded.policy):
            np.testing.assert_array_equal(module(tensors).numpy(), loaded.predict(batch))
    first = {key: value[:1] for key, value in batch.items()}
    assert loaded.predict({key: value[0] for key, value in first.items()}) == loaded.predict(first)[0]
    with pytest.raises(TypeError, match="pass a dict of arrays"):
        loaded.predict(np.zeros(2))


def test_ones_own_encoder_plugs_in_as_a_module_factory():
    """Test that a callable building an encoder from the observation space replaces the default one."""
    built = []

    class Flat(torch.nn.Module):
        def __init__(self, space):
            super().__init__()
            self.features_dim = 25 + 2
            built.append(space)

        def forward(self, obs):
            return torch.cat([obs["image"].flatten(1).float() / 255, obs["position"]], -1)

    model, data, _ = fit(
        PIXEL_GOAL, model_kwargs={"encoder": Flat}, data_kwargs={"obj_sets": {"train": [{}], "test": [{}]}}
    )
    assert isinstance(model.policy.encoder, Flat) and built == [data.env_spaces()[0]]
    assert "encoder" not in model.hparams


@pytest.mark.parametrize(
    ("encoder", "error", "match"),
    [
        ({"cnn_kernels": [8, 4]}, ValueError, "same, non-zero length"),
        ({"cnn_keys": "image"}, TypeError, "must be a list"),
        (42, TypeError, "encoder must be a mapping"),
    ],
)
def test_impossible_encoder_settings_are_refused_when_the_algorithm_is_built(encoder, error, match):
    with pytest.raises(error, match=match):
        PPO(encoder=encoder)


def test_an_image_too_small_for_the_cnn_is_refused_before_any_env_step():
    """Test that the default Nature CNN on a 5x5 image stops at setup, naming the key and the fix, before a step."""
    data = small_data(PIXEL_GOAL, obj_sets={"train": [{}], "test": [{}]})
    with pytest.raises(ValueError, match=r"'image' is an image of 5x5 pixels, too small.*cnn_kernels"):
        trainer(max_epochs=1).fit(tiny_ppo(total_timesteps=100), data)
    assert data.env_steps == 0


@pytest.mark.parametrize("env_id", ["match_task/MultiDiscrete-v0", "match_task/MultiBinary-v0"])
def test_multi_discrete_and_multi_binary_actions_learn_and_predict_env_values(env_id):
    """Test that PPO learns the match task with independent Categoricals / Bernoullis, and predict returns the
    env's values (MultiDiscrete's start added), which the env accepts. 16,384 env steps: at 4,096, 4 of seeds 0-7 on
    MultiDiscrete and 5 on MultiBinary reached 7.5 of 8 (some of the 24 targets not yet learned); at 16,384 every seed
    earned 8."""
    import gymnasium as gym

    from tests.envs.match_task import MatchEnv

    pl.seed_everything(0)
    data = RolloutDataModule(
        env_id=f"tests.envs.match_task:{env_id}", num_envs=4, rollout_steps=64, eval_episodes=4,
        obj_sets={"train": [{}], "test": [{}]}, eval_interval=100,
    )  # fmt: skip
    model = PPO(total_timesteps=16_384, lr=3e-3, update_epochs=4, num_minibatches=4, ent_coef=0.0)
    trainer(max_epochs=-1).fit(model, data)
    env = MatchEnv(binary="Binary" in env_id)
    obs, _ = env.reset(seed=3)
    returns = 0.0
    for _ in range(8):
        action = model.predict(obs)
        assert env.action_space.contains(np.asarray(action, dtype=env.action_space.dtype))
        obs, reward, _, _, _ = env.step(action)
        returns += reward
    random_return = 8 * float(np.mean(1 / env.nvec))
    assert returns >= 7.5 > random_return + 2, (returns, random_return)
    assert isinstance(model.spaces[1], (gym.spaces.MultiDiscrete, gym.spaces.MultiBinary))


def test_normalize_reward_scales_what_the_update_learns_from_and_reports_raw_returns(tmp_path):
    """Test that with normalize_reward the update's rewards are scaled (the scaler's statistics moved and travel in the
    checkpoint) while the logged episode returns stay CartPole's raw ones (return = length)."""
    data = tiny_rollout_data()
    model = tiny_ppo(normalize_reward=True, total_timesteps=2 * 16 * 3, save_interval=1)
    trainer = quiet_trainer(tmp_path, max_epochs=-1)
    trainer.fit(model, data)
    metrics = trainer.callback_metrics
    assert float(metrics["rollout/episode_return"]) == float(metrics["rollout/episode_length"])
    var = float(model.reward_scaler.stats.var)
    assert var > 1.0  # CartPole's discounted returns spread by more than 1
    loaded = PPO.load_from_checkpoint(os.path.join(tmp_path, "checkpoints", "last.ckpt"))
    assert float(loaded.reward_scaler.stats.var) == var
    assert tiny_ppo().reward_scaler is None


def test_a_resume_whose_spaces_come_from_other_object_sets_names_the_object_sets(tmp_path):
    """Test that a checkpoint trained on variations of another env (same env_id, other spaces) is refused naming the
    object sets, as the setting that differs, rather than the env id, which is the same."""
    from rl_lightning.algos.loading import check_resume
    from tests.helpers import quiet_trainer, tiny_ppo, tiny_rollout_data

    sets = {
        "train": [{"env_id": "Acrobot-v1", "seeds": [0, 1000]}],
        "test": [{"env_id": "Acrobot-v1", "seeds": [1000, 2000]}],
    }
    quiet_trainer(tmp_path, max_epochs=1).fit(tiny_ppo(save_interval=1), tiny_rollout_data(obj_sets=sets))
    with pytest.raises(
        ValueError, match=r"built for CartPole-v1 \(Box\(4,\).*trained on \(obj_sets as in the checkpoint\)"
    ):
        check_resume(tiny_ppo(save_interval=1), tiny_rollout_data(), tmp_path / "checkpoints" / "last.ckpt")


def test_a_resume_refused_for_a_users_own_networks_names_the_tensors_not_the_budget(tmp_path):
    """Test that a checkpoint whose weights do not fit the user's own actor (not in the settings), resumed with a larger
    budget, is refused naming the tensor shapes: the budget, which may change on a resume, was named as the culprit."""
    fit(tmp_path=tmp_path, max_epochs=1, model_kwargs={"actor": nn.Linear(4, 2), "save_interval": 1})
    model = tiny_ppo(actor=nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2)), total_timesteps=10**6)
    refused = (
        r"its tensors differ \(only in the checkpoint: .*'_actor\.weight'.*only in this model: \['_actor\.0\.bias'"
    )
    with pytest.raises(ValueError, match=refused) as info:
        trainer(tmp_path, max_epochs=-1).fit(model, small_data(), ckpt_path="last")
    assert "total_timesteps" not in str(info.value)


def test_a_policy_whose_evaluate_actions_returns_another_shape_is_refused_naming_the_shapes(tmp_path):
    """Test that values of [L, B, 1] from a policy's own evaluate_actions stop the fit with the shapes, where the loss
    would have broadcast them against the minibatch's [L, B] into a wrong loss."""

    class Widened(PPO):
        def build_policy(self, observation_space, action_space):
            policy = super().build_policy(observation_space, action_space)
            evaluate = policy.evaluate_actions

            def evaluate_actions(*args):
                log_prob, entropy, value = evaluate(*args)
                return log_prob, entropy, value.unsqueeze(-1)

            policy.evaluate_actions = evaluate_actions
            return policy

    model = Widened(**{**tiny_ppo().hparams, "total_timesteps": 64})
    with pytest.raises(ValueError, match=r"returned \(1, 16\), \(1, 16\) and \(1, 16, 1\); PPO needs .* \(1, 16\)"):
        quiet_trainer(max_epochs=1).fit(model, tiny_rollout_data())
