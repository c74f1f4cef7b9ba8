"""PPO on Atari Breakout: rl_lightning against Stable-Baselines3's ``CnnPolicy`` and CleanRL's ``ppo_atari.py`` loop.

    python -m benchmarks.atari [--repeats 3] [--env-steps 4096] [--threads 1]
    python -m benchmarks.run --suites atari

Identical settings for the three (CleanRL's ``ppo_atari.py``, ``+experiment=ppo_atari``): 8
envs x 128 steps, 4 epochs of 4 minibatches, lr 2.5e-4 annealed, gamma 0.99, GAE lambda 0.95,
clip 0.1 (values clipped too), entropy 0.01, value 0.5, max grad norm 0.5, the Nature CNN
shared by linear actor and critic heads. Every contender steps the same envs, built by the
same function: ``ALE/Breakout-v5`` with the wrapper stack of ``conf/env/atari_breakout.yaml``
(4x84x84 uint8 frame stacks), vectorized in-process (gymnasium's ``SyncVectorEnv``, SB3's
``DummyVecEnv``), so the envs cost the same and the difference is the learner. Each contender
first runs one untimed rollout-and-update (one-time costs: torch's kernels), then the timed
runs alternate; env-steps/s, medians, ranges and the ratios of the medians and of each repeat's
pair.
"""

from __future__ import annotations

import argparse
import os
import warnings

import gymnasium as gym
import lightning.pytorch as pl
import torch
from omegaconf import OmegaConf

from benchmarks.plain_ppo import PPOSettings
from benchmarks.plain_ppo import train as plain_ppo_train
from benchmarks.throughput import bare_trainer, ppo_model, sb3_ppo_model, timed_fit, timed_learn, timed_rollout_data

ENV_ID = "ale_py:ALE/Breakout-v5"
MAKE_KWARGS = {"frameskip": 1}  # AtariPreprocessing does the frame skip (conf/env/atari_breakout.yaml)
#: CleanRL's ppo_atari.py settings.
SETTINGS = PPOSettings(env_id=ENV_ID, num_envs=8, clip_coef=0.1)
_CONF = os.path.join(os.path.dirname(__file__), os.pardir, "conf", "env", "atari_breakout.yaml")


def wrappers() -> list:
    """The wrapper specs of ``+experiment=ppo_atari`` (read from its env config, so the benchmark runs what it runs)."""
    return OmegaConf.to_container(OmegaConf.load(_CONF).wrappers)


def make_env() -> gym.Env:
    """One Breakout env with the experiment's wrappers (the SB3 and plain contenders' envs)."""
    from rl_lightning.envs.wrappers import apply_wrappers, check_wrappers

    return apply_wrappers(gym.make(ENV_ID, **MAKE_KWARGS), check_wrappers(wrappers()))


def ours(env_steps: int, seed: int) -> dict[str, float]:
    """rl_lightning's PPO through the Python API, its default encoder (the Nature CNN) and linear heads."""
    s = SETTINGS
    pl.seed_everything(seed, verbose=False)
    plain = {"make_kwargs": MAKE_KWARGS}
    data = timed_rollout_data(ENV_ID, s.num_envs, s.rollout_steps, seed, obj_sets={"train": [plain], "test": [plain]},
                              wrappers=wrappers(), vectorization="sync")  # fmt: skip
    data.setup("fit")  # envs built before the clock starts, as for the other contenders
    return timed_fit(bare_trainer(), ppo_model(s, env_steps, hidden_sizes=[]), data)


def sb3(env_steps: int, seed: int) -> dict[str, float]:
    """Stable-Baselines3's PPO with ``CnnPolicy`` (its NatureCNN, linear heads, shared extractor), same settings."""
    from stable_baselines3.common.vec_env import DummyVecEnv

    s = SETTINGS
    warnings.filterwarnings("ignore")
    envs = DummyVecEnv([make_env] * s.num_envs)
    envs.seed(seed)
    model = sb3_ppo_model("CnnPolicy", envs, s, seed)
    result = timed_learn(model, env_steps)
    envs.close()
    return result


def plain(env_steps: int, seed: int) -> dict[str, float]:
    """CleanRL's ``ppo_atari.py`` loop (``benchmarks/plain_ppo.py`` with its ``AtariAgent``)."""
    return plain_ppo_train(SETTINGS, env_steps, seed, make_env=make_env)


CONTENDERS = {
    "rl_lightning": ours,
    "stable_baselines3": sb3,
    "cleanrl_style": plain,
}


def report(results: dict[str, list[dict]]) -> list[str]:
    """The table of medians and ranges, and the per-repeat ratios, as markdown lines."""
    from benchmarks.run import pairs, summarize, table

    return [
        table(
            "PPO, Breakout",
            summarize(results, "env_steps_per_second"),
            "env-steps/s",
            ["stable_baselines3", "cleanrl_style"],
        ),
        *pairs(results, "env_steps_per_second", "cleanrl_style"),
    ]


def warm_up() -> None:
    """One rollout and update of each contender, untimed: the one-time costs stay out of the figures."""
    batch = SETTINGS.num_envs * SETTINGS.rollout_steps
    for run in CONTENDERS.values():
        run(batch, 0)


def main() -> None:
    from benchmarks.run import alternate

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--env-steps", type=int, default=4096)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    warm_up()
    results = alternate(
        {name: (lambda seed, run=run: run(args.env_steps, seed)) for name, run in CONTENDERS.items()}, args.repeats
    )
    print("\n".join(report(results)))


if __name__ == "__main__":
    main()
