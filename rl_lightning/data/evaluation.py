"""Evaluation: run a fixed number of episodes on one object set and report their statistics.

Every evaluation resets its envs with the same seed, so successive evaluations of a run (and of runs with the same seed)
see the same episodes: differences in the metric come from the policy, not from luck of the draw. The final test
(``trainer.test``) uses other seeds than validation, so a checkpoint chosen by validation (``best.ckpt``) is measured on
episodes it was not chosen on.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import gymnasium as gym
import numpy as np
import torch
from torch.utils.data import IterableDataset

from rl_lightning.checks import check_positive_int
from rl_lightning.data.protocol import RolloutPolicy
from rl_lightning.envs import EnvGroup, EpisodeStats
from rl_lightning.envs.obs import clip_floats, map_obs, to_tensor
from rl_lightning.faults import EnvFault, interrupt_request
from rl_lightning.spaces import env_action
from rl_lightning.video import VideoWriter


def episodes_per_env(episodes: int, num_envs: int) -> list[int]:
    """Split ``episodes`` over envs (or ranks) as evenly as possible.

    Counting the first ``episodes`` episodes to finish would favour short episodes; giving
    each env a fixed quota removes that bias (as Stable-Baselines3's ``evaluate_policy``).
    """
    return [episodes // num_envs + (i < episodes % num_envs) for i in range(num_envs)]


#: On an accelerator, whether every env has its episodes is read to the host once per this many
#: steps (on the CPU every step: the read costs nothing there).
CHECK_EVERY = 16
#: Evaluation stops with an error when an env that still owes episodes ends none in this many steps (or its group's
#: longer time limit): an env without a time limit whose policy never ends an episode would evaluate for ever.
MAX_EVAL_EPISODE_STEPS = 100_000


@torch.no_grad()
def evaluate(
    policy: RolloutPolicy, envs: EnvGroup, episodes: int, deterministic: bool = True, seed: int = 0
) -> EpisodeStats:
    """Run ``episodes`` complete episodes with ``policy`` on ``envs`` (each env its quota, :func:`episodes_per_env`).

    A policy with memory carries its state per env and starts each episode from its initial state. Episodes an env
    finishes beyond its quota are left out, so the result is the first ``quota[i]`` episodes of env ``i`` whatever the
    device; episodes cut short by a fault do not count.

    Args:
        policy: Acting policy.
        envs: Evaluation envs (their own group, never the training envs).
        episodes: Episodes to complete.
        deterministic: Act with the mode of the policy (argmax / mean) instead of sampling.
        seed: Reset seed, and sampled actions' seed: the same seed gives the same episodes.

    Returns:
        Statistics of exactly ``episodes`` episodes.

    Raises:
        EnvFault: An env that owes episodes ended none in :data:`MAX_EVAL_EPISODE_STEPS` (or more) steps.
    """
    check_positive_int(episodes=episodes)
    device = next(policy.parameters()).device
    quota_list = episodes_per_env(episodes, envs.num_envs)
    quota = torch.as_tensor(quota_list, device=envs.device)
    finished = torch.zeros_like(quota)
    progress = finished.clone()  # the episodes each env had ended at the last check for endless ones
    cap = max(MAX_EVAL_EPISODE_STEPS, (envs.max_episode_steps or 0) + 1)  # steps between those checks
    obs = envs.reset(seed=seed)
    envs.pop_stats()
    state = policy.initial_state(envs.num_envs, device)
    start = torch.ones(envs.num_envs, dtype=torch.bool, device=device)
    every = 1 if envs.device.type == "cpu" else CHECK_EVERY
    steps = 0
    # Sampled actions draw from a generator seeded for this evaluation, forked from the run's: the same seed gives the
    # same episodes, and evaluating leaves training's draws as they would have been.
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.random.default_generator.manual_seed(seed)
        if device.type == "cuda":  # the policy's GPU alone: torch.manual_seed would reseed every GPU's, unforked
            with torch.cuda.device(device):
                torch.cuda.manual_seed(seed)
        while steps % every or not bool((finished >= quota).all()):
            interrupt_request.check()  # a signal stops evaluation between steps (callbacks/interrupt.py)
            action, _, _, state = policy.act(obs.to(device), state, start, deterministic, value=False)
            step = envs.step(action)
            finished += step.done if step.cut is None else step.done & ~step.cut
            start, obs = step.done.to(device), step.obs
            steps += 1
            if steps % cap == 0:
                if (stuck := ((finished == progress) & (finished < quota)).nonzero()).numel():
                    raise EnvFault(f"Evaluating on {envs.label}: env {int(stuck[0])} ended no episode in "
                                   f"{cap:,} steps, so evaluation would never end (the env has no "
                                   "time limit the policy reaches). Set one for evaluation: eval_max_episode_steps on "
                                   "the data module (Hydra: env.eval_max_episode_steps).")  # fmt: skip
                progress = finished.clone()
    ended, result, taken = envs.pop_stats(), EpisodeStats(), [0] * envs.num_envs
    for k, i in enumerate(ended.envs):  # in step order: each env's first episodes come first
        if taken[i] < quota_list[i]:
            taken[i] += 1
            for name in ("returns", "lengths", "successes", "successes_once", "envs"):  # envs[k] is i
                getattr(result, name).append(getattr(ended, name)[k])
    return result


@dataclasses.dataclass
class Episode:
    """One episode played by :func:`play_episode`.

    Attributes:
        ret: Sum of rewards (the env's own score where ``RecordEpisodeStatistics`` reports one).
        length: Env steps taken.
        success: ``is_success`` (or ``success``) of the final step's info; NaN where the env reports none.
        variation: Name of the object-set variation the episode was drawn from.
        ended: Whether the episode ended (terminated or truncated), rather than ``max_frames`` stopping it.
    """

    ret: float
    length: int
    success: float
    variation: str
    ended: bool = True


@torch.no_grad()
def play_episode(
    policy: RolloutPolicy,
    env: gym.Env,
    seed: int | None = None,
    deterministic: bool = True,
    video: VideoWriter | None = None,
    max_frames: int | None = None,
    obs_bound: float | None = None,
) -> Episode:
    """Play one episode on a single env (from :func:`~rl_lightning.envs.make_env`), optionally filmed.

    Used by the evaluation videos and ``rl-lightning play``: a single gymnasium env, which does
    not reset itself when the episode ends, so its last frame can be rendered. With ``video``, a
    frame is rendered after the reset and after every step: an episode of ``n`` steps gives
    ``n + 1`` frames, streamed to the file as they come.

    Args:
        policy: Acting policy.
        env: A single env; with ``video``, made with ``render_mode="rgb_array"``.
        seed: Reset seed (``None``: the env's generator goes on, the next episode of a sequence).
        deterministic: Act with the mode of the policy.
        video: Where frames go, or ``None``.
        max_frames: Stop once the video holds this many frames (long MuJoCo episodes render slowly on CPU).
        obs_bound: Clip observations to ``[-obs_bound, obs_bound]`` first, as a run with ``obs_bound``
            in ``clip`` mode trained and evaluated.
    """
    device = next(policy.parameters()).device
    state, start = policy.initial_state(1, device), torch.ones(1, dtype=torch.bool, device=device)
    obs, info = env.reset(seed=seed)
    variation = str(info.get("variation", ""))
    if video is not None:
        video.add(env.render())
    total, length = 0.0, 0
    while True:
        if video is not None and max_frames is not None and video.frames >= max_frames:
            return Episode(total, length, math.nan, variation, ended=False)
        interrupt_request.check()  # a signal stops the episode between steps (callbacks/interrupt.py)
        if obs_bound is not None:  # the float arrays only, as the gymnasium backend clips them
            obs = clip_floats(obs, obs_bound)
        obs_t = to_tensor(map_obs(lambda x: np.asarray(x)[None], obs), device, batch_dims=1)
        action, _, _, state = policy.act(obs_t, state, start, deterministic, value=False)
        start = torch.zeros_like(start)
        action = env_action(env.action_space, action[0].cpu().numpy())
        obs, reward, terminated, truncated, info = env.step(action.astype(env.action_space.dtype))
        total += float(reward)
        length += 1
        if video is not None:
            video.add(env.render())
        if terminated or truncated:
            success = info.get("is_success", info.get("success"))
            score = info.get("episode", {}).get("r")  # RecordEpisodeStatistics before reward shaping
            total = total if score is None else float(np.asarray(score).reshape(-1)[0])
            return Episode(total, length, math.nan if success is None else float(success), variation)


class EvaluationDataset(IterableDataset):
    """Yields one batch: the statistics of an evaluation on one object set.

    Args:
        envs: Evaluation envs of the object set.
        policy: Called to get the acting policy at evaluation time.
        episodes: Episodes to run (this rank's share).
        prefix: Metric prefix (``eval`` for the training set, ``eval_ood`` for ``test``).
        deterministic: Act deterministically.
        seed: Reset seed for every evaluation.
        should_run: Called before each evaluation; when it returns False nothing is
            yielded (used to evaluate only every ``eval_interval`` epochs).
    """

    def __init__(
        self,
        envs: EnvGroup,
        policy: Callable[[], RolloutPolicy],
        episodes: int,
        prefix: str,
        deterministic: bool = True,
        seed: int = 0,
        should_run: Callable[[], bool] = lambda: True,
    ):
        super().__init__()
        self.envs, self.policy, self.episodes, self.prefix = envs, policy, episodes, prefix
        self.deterministic, self.seed, self.should_run = deterministic, seed, should_run

    def __iter__(self):
        if not self.should_run() or self.episodes == 0:
            return
        stats = evaluate(self.policy(), self.envs, self.episodes, self.deterministic, self.seed)
        batch = {
            "prefix": self.prefix,
            "obj_set": self.envs.obj_set,
            "return": torch.tensor(stats.returns, dtype=torch.float32),
            "length": torch.tensor(stats.lengths, dtype=torch.float32),
        }
        for key, values in (("success", stats.successes), ("success_once", stats.successes_once)):
            if not np.isnan(values).all():  # where the env reports success
                batch[key] = torch.tensor(values, dtype=torch.float32)
        yield batch
