"""Recurrent PPO on CartPole without velocities: ours against sb3-contrib's ``RecurrentPPO``, and a feed-forward PPO.

The task is ``+experiment=ppo_lstm``'s: CartPole-v1 on the shipped ``train`` object set (pole
length 0.4-0.6), its observation cut to the cart position and the pole angle
(``rl_lightning.envs.wrappers.KeepEntries``), so a policy must remember to tell which way
the pole moves (sb3-contrib's ``CartPoleNoVel``). One invocation runs, per seed, in turn:

- ``rl_lightning_lstm``: ``+experiment=ppo_lstm`` composed through Hydra as ``train.py`` would,
  through ``Trainer.fit`` without loggers, checkpoints or evaluation during the fit;
- ``sb3_contrib``: ``RecurrentPPO("MlpLstmPolicy")`` at RL-Zoo's ``ppo_lstm.yml`` entry for
  ``CartPoleNoVel-v1`` (8 envs x 32 steps, batch 256, 20 epochs, gamma 0.98, lambda 0.8,
  ent_coef 0, lr and clip range annealed from 1e-3 and 0.2, ``VecNormalize`` of observations and
  rewards, an LSTM of 64 for the actor and one for the critic, heads of 64, ReLU, no orthogonal
  init), on the same envs (``make_env`` of the same object set and wrapper, seeded per env);
- ``rl_lightning_feedforward``: the same experiment with ``algo.recurrent=false`` and hidden
  layers ``[64, 64]`` (the LSTM's width as a plain layer): the control that shows the task
  needs memory.

Each runs the same env-step budget (the experiment's 100k) and is then evaluated the same
way: ``rl_lightning.data.evaluation.evaluate`` on one fresh group of the train-set envs, 20
deterministic episodes from the same reset seed, the recurrent state carried per env and
zeroed per episode (for sb3-contrib through its ``predict(obs, state, episode_start)``, its
``VecNormalize`` statistics applied to the observations). Env-steps/s is the training call's
(``fit`` / ``learn``; envs built before the clock starts). One torch thread for every contender.

Usage::

    python -m benchmarks.recurrent_ppo               # seeds 0-2 at 100k env steps (about 15 minutes on 2 cores)
    python -m benchmarks.recurrent_ppo --quick       # 1 seed, 4,096 env steps: checks the runner, not for quoting
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import warnings

import lightning.pytorch as pl
import numpy as np
import torch

from benchmarks.run import alternate, finish, machine, paired, summarize, table
from benchmarks.solve_cartpole import rl_zoo_cartpole
from benchmarks.throughput import bare_trainer

CONF = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "conf")
#: Deterministic evaluation episodes per contender and seed, from this reset seed (plus the run's seed).
EVAL_EPISODES, EVAL_SEED = 20, 10_000
#: The feed-forward control's hidden layers: the recurrent policy's core width as a plain layer, then its head.
FEEDFORWARD_HIDDEN = [64, 64]


def _config(seed: int, overrides: list[str]):
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        return compose("config", overrides=["+experiment=ppo_lstm", f"seed={seed}", "run_dir=.", *overrides])


def _wrappers(cfg) -> list[dict]:
    from omegaconf import OmegaConf

    return OmegaConf.to_container(cfg.env.wrappers)


def eval_envs(cfg, seed: int):
    """A fresh group of the experiment's train-set envs (its wrappers included), for the final evaluation."""
    from rl_lightning.envs.env_group import EnvGroup

    return EnvGroup(
        cfg.env.env_id,
        num_envs=cfg.env.num_envs,
        obj_set="train",
        wrappers=_wrappers(cfg),
        seed=EVAL_SEED + seed,
    )


def final_return(policy, cfg, seed: int) -> float:
    """Mean return of ``EVAL_EPISODES`` deterministic train-set episodes (the state carried per env)."""
    from rl_lightning.data.evaluation import evaluate

    envs = eval_envs(cfg, seed)
    try:
        return float(np.mean(evaluate(policy, envs, EVAL_EPISODES, deterministic=True, seed=EVAL_SEED + seed).returns))
    finally:
        envs.close()


def ours(seed: int, budget: int | None = None, recurrent: bool = True) -> dict[str, float]:
    """``+experiment=ppo_lstm`` (or its feed-forward control) for ``budget`` env steps, then the final return."""
    from rl_lightning.launch.app import build_data, build_model

    warnings.filterwarnings("ignore")
    overrides = [] if recurrent else ["algo.recurrent=false", f"algo.hidden_sizes={FEEDFORWARD_HIDDEN}"]
    if budget is not None:
        overrides.append(f"algo.total_timesteps={budget}")
    cfg = _config(seed, overrides)
    pl.seed_everything(seed, verbose=False)
    data = build_data(cfg, eval_interval=10**9)  # no evaluation inside the timed fit
    model = build_model(cfg, save_interval=None)
    data.setup("fit")  # envs built before the clock starts
    start = time.perf_counter()
    bare_trainer().fit(model, data)
    seconds = time.perf_counter() - start
    data.close()
    return {
        "env_steps": data.env_steps,
        "seconds": seconds,
        "env_steps_per_second": data.env_steps / seconds,
        "train_return": final_return(model.policy, cfg, seed),
    }


class SB3RecurrentPolicy:
    """sb3-contrib's ``RecurrentPPO`` behind the interface ``evaluate`` acts through (``initial_state`` / ``act``).

    The state is sb3-contrib's own (its LSTM states, as ``predict`` returns them); observations
    are normalized with the training run's ``VecNormalize`` statistics first.
    """

    def __init__(self, model, normalizer):
        self.model, self.normalizer = model, normalizer

    def parameters(self):
        return iter([torch.zeros(1)])  # evaluate() reads the device from the first parameter

    def initial_state(self, batch_size: int, device=None):
        return None  # sb3-contrib's predict starts from zeros when given no state

    def act(self, obs, state, episode_start, deterministic: bool = True, value: bool = False):
        normalized = self.normalizer.normalize_obs(obs.cpu().numpy())
        action, state = self.model.predict(
            normalized, state=state, episode_start=episode_start.cpu().numpy(), deterministic=deterministic
        )
        return torch.as_tensor(action), None, None, state


def sb3_contrib(seed: int, budget: int | None = None) -> dict[str, float]:
    """sb3-contrib's ``RecurrentPPO`` at RL-Zoo's ``CartPoleNoVel-v1`` settings on the same envs, then the same
    evaluation."""
    from sb3_contrib import RecurrentPPO
    from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

    from rl_lightning.envs.env_group import make_env

    warnings.filterwarnings("ignore")
    cfg = _config(seed, [])
    budget = budget or cfg.algo.total_timesteps
    wrappers = _wrappers(cfg)
    envs = DummyVecEnv([lambda: make_env(cfg.env.env_id, "train", wrappers=wrappers)] * cfg.env.num_envs)
    envs.seed(seed)
    envs = VecNormalize(envs, gamma=0.98)  # RL-Zoo's normalize: true (observations and rewards)

    model = RecurrentPPO(
        "MlpLstmPolicy",
        envs,
        **rl_zoo_cartpole(),
        policy_kwargs={
            "ortho_init": False,
            "activation_fn": torch.nn.ReLU,
            "lstm_hidden_size": 64,
            "enable_critic_lstm": True,
            "net_arch": {"pi": [64], "vf": [64]},
        },
        seed=seed,
        device="cpu",
        verbose=0,
    )
    start = time.perf_counter()
    model.learn(budget)
    seconds = time.perf_counter() - start
    envs.training = False
    return {
        "env_steps": model.num_timesteps,
        "seconds": seconds,
        "env_steps_per_second": model.num_timesteps / seconds,
        "train_return": final_return(SB3RecurrentPolicy(model, envs), cfg, seed),
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--budget", type=int, default=None, help="env steps per run (default: the experiment's)")
    parser.add_argument("--quick", action="store_true", help="1 seed of 4,096 env steps")
    parser.add_argument("--no-sb3", action="store_true", help="skip sb3-contrib (not installed)")
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args(argv)
    if args.quick:
        args.seeds, args.budget = 1, 4096
    torch.set_num_threads(1)
    info = machine()
    budget = args.budget or int(_config(0, []).algo.total_timesteps)
    print(f"recurrent_ppo: {budget} env steps per run, seeds 0-{args.seeds - 1}; {info}", flush=True)
    contenders = {"rl_lightning_lstm": lambda seed: ours(seed, budget)}
    if not args.no_sb3:
        contenders["sb3_contrib"] = lambda seed: sb3_contrib(seed, budget)
    contenders["rl_lightning_feedforward"] = lambda seed: ours(seed, budget, recurrent=False)
    results = alternate(contenders, args.seeds)
    report: dict = {"machine": info, "threads": torch.get_num_threads(), "budget": budget, "runs": results}
    lines = [
        f"### Recurrent PPO, CartPole-v1 without velocities (train set), {budget} env steps, seeds 0-{args.seeds - 1}",
        "",
        f"Final train-set return ({EVAL_EPISODES} deterministic episodes, the same reset seed for every contender):",
        "",
        "| contender | median | per seed |",
        "| --- | --- | --- |",
    ]
    for name, runs in results.items():
        returns = [r["train_return"] for r in runs]
        report.setdefault("train_return", {})[name] = statistics.median(returns)
        lines.append(f"| {name} | {statistics.median(returns):.1f} | {', '.join(f'{v:.1f}' for v in returns)} |")
    summary = summarize(results, "env_steps_per_second")
    report["env_steps_per_second"] = summary
    baseline = "sb3_contrib" if "sb3_contrib" in results else "rl_lightning_feedforward"
    lines += ["", table("env-steps/s", summary, "env-steps/s", [baseline]), ""]
    if "sb3_contrib" in results:
        lines.append(paired(results, "env_steps_per_second", "rl_lightning_lstm", "sb3_contrib"))
    return finish(lines, report, args.json)


if __name__ == "__main__":
    main()
