"""Evaluation: run a fixed number of episodes on one object set and report their statistics.

Every evaluation resets its envs with the same seed, so successive evaluations of a run
(and of runs with the same seed) see the same episodes: differences in the metric come
from the policy, not from luck of the draw. The final test (``trainer.test``) uses other
seeds than validation, so a checkpoint chosen by validation (``best.ckpt``) is measured on
episodes it was not chosen on.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch.utils.data import IterableDataset

from rl_lightning.data.collection import to_env_action
from rl_lightning.data.protocol import RolloutPolicy
from rl_lightning.envs import EnvGroup, EpisodeStats
from rl_lightning.envs.obs import clip_floats, map_obs, to_tensor
from rl_lightning.envs.tensor_group import TensorEnvGroup
from rl_lightning.faults import interrupt_request
from rl_lightning.video import VideoWriter


def episodes_per_env(episodes: int, num_envs: int) -> np.ndarray:
    """Split ``episodes`` over envs as evenly as possible.

    Counting the first ``episodes`` episodes to finish would favour short episodes; giving
    each env a fixed quota removes that bias (as Stable-Baselines3's ``evaluate_policy``).
    """
    return np.array([episodes // num_envs + (i < episodes % num_envs) for i in range(num_envs)])


class StatefulActor:
    """Acts with ``policy`` on ``num_envs`` envs, carrying a recurrent policy's state per env.

    A feed-forward policy acts on the observations alone. A recurrent one
    (:class:`~rl_lightning.nets.recurrent.RecurrentActorCritic`: it has ``initial_state``) acts
    with the state it carried from the env's previous step, zeroed where :meth:`ended` said an
    episode ended, so every evaluated or played episode starts from the initial state.
    """

    def __init__(self, policy: RolloutPolicy, num_envs: int, device: torch.device):
        self.policy = policy
        self.recurrent = hasattr(policy, "initial_state")
        if self.recurrent:
            self.state = policy.initial_state(num_envs, device)
            self.starts = torch.ones(num_envs, dtype=torch.bool, device=device)

    def act(self, obs: Any, deterministic: bool) -> torch.Tensor:
        """Actions for one step of every env."""
        if not self.recurrent:
            return self.policy.act(obs, deterministic)[0]
        action, _, _, self.state = self.policy.act(obs, self.state, self.starts, deterministic)
        self.starts = torch.zeros_like(self.starts)
        return action

    def ended(self, done: Any) -> None:
        """Which envs' episodes ended in the last step (``[num_envs]`` bools): their state starts afresh."""
        if self.recurrent:
            self.starts = torch.as_tensor(done, dtype=torch.bool, device=self.starts.device)


def _keep_within_quota(ended: EpisodeStats, quota: np.ndarray, taken: np.ndarray, result: EpisodeStats) -> None:
    """Append to ``result`` the episodes of ``ended`` whose env has not filled its quota, counting them in ``taken``."""
    for k, i in enumerate(ended.envs):
        if taken[i] < quota[i]:
            taken[i] += 1
            result.returns.append(ended.returns[k])
            result.lengths.append(ended.lengths[k])
            result.successes.append(ended.successes[k])
            result.envs.append(i)


@torch.no_grad()
def evaluate(
    policy: RolloutPolicy, envs: EnvGroup, episodes: int, deterministic: bool = True, seed: int = 0
) -> EpisodeStats:
    """Run ``episodes`` complete episodes with ``policy`` on ``envs``.

    Args:
        policy: Acting policy.
        envs: Evaluation envs (their own group, never the training envs).
        episodes: Episodes to complete.
        deterministic: Act with the mode of the policy (argmax / mean) instead of sampling.
        seed: Reset seed; the same seed gives the same episodes.

    Returns:
        Statistics of exactly ``episodes`` episodes.
    """
    if isinstance(envs, TensorEnvGroup):
        return evaluate_batched(policy, envs, episodes, deterministic, seed)
    device = next(policy.parameters()).device
    quota = episodes_per_env(episodes, envs.num_envs)
    done_count = np.zeros(envs.num_envs, dtype=np.int64)
    obs = envs.reset(seed=seed)
    envs.pop_stats()
    result = EpisodeStats()
    actor = StatefulActor(policy, envs.num_envs, device)
    while (done_count < quota).any():
        interrupt_request.check()  # a signal stops evaluation between steps (callbacks/interrupt.py)
        action = actor.act(to_tensor(obs, device), deterministic)
        step = envs.step(to_env_action(action, envs.action_space))
        actor.ended(step.terminated | step.truncated)
        obs = step.obs
        if not step.final_obs:  # no episode ended this step
            continue
        _keep_within_quota(envs.pop_stats(), quota, done_count, result)
    return result


#: A batched evaluation reads whether every env has its episodes once per this many steps (not every step).
BATCHED_CHECK_EVERY = 16


@torch.no_grad()
def evaluate_batched(
    policy: RolloutPolicy, envs: TensorEnvGroup, episodes: int, deterministic: bool = True, seed: int = 0
) -> EpisodeStats:
    """:func:`evaluate` on a batched tensor env: the same per-env quotas, the episodes counted on the device.

    Whether every env has finished its quota is read to the host every ``BATCHED_CHECK_EVERY``
    steps; episodes beyond an env's quota (those steps past it) are left out, so the result
    is exactly the first ``quota[i]`` episodes of env ``i``, as :func:`evaluate` counts them.
    """
    quota_list = episodes_per_env(episodes, envs.num_envs)
    quota = torch.as_tensor(quota_list, device=envs.device)
    finished = torch.zeros_like(quota)
    obs = envs.reset(seed=seed)
    envs.pop_stats()
    steps = 0
    while True:
        if steps % BATCHED_CHECK_EVERY == 0 and bool((finished >= quota).all()):
            break
        interrupt_request.check()  # a signal stops evaluation between steps (callbacks/interrupt.py)
        step = envs.step(envs.env_action(policy.act(obs, deterministic)[0]))
        finished += step.done
        obs = step.obs
        steps += 1
    result = EpisodeStats()
    # pop_stats lists episodes in step order, so each env's first episodes come first.
    _keep_within_quota(envs.pop_stats(), quota_list, np.zeros(envs.num_envs, dtype=np.int64), result)
    return result


@dataclasses.dataclass
class Episode:
    """One episode played by :func:`play_episode`.

    Attributes:
        ret: Sum of rewards.
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

    Used by the evaluation videos and ``rl-lightning play``. With ``video``, a frame is
    rendered after the reset and after every step, the final one included: an episode of
    ``n`` steps gives ``n + 1`` frames, streamed to the file as they come.

    Args:
        policy: Acting policy (``act`` on raw observations).
        env: A single env; with ``video``, made with ``render_mode="rgb_array"``.
        seed: Reset seed (``None``: the env's generator goes on, the next episode of a sequence).
        deterministic: Act with the mode of the policy.
        video: Where frames go, or ``None``.
        max_frames: Stop the episode once the video holds this many frames (long MuJoCo
            episodes render slowly on CPU); ``None`` plays it to its end.
        obs_bound: Clip observations to ``[-obs_bound, obs_bound]`` before the policy sees
            them, as a run with ``obs_bound`` in ``clip`` mode trained and evaluated.
    """
    device = next(policy.parameters()).device
    actor = StatefulActor(policy, 1, device)  # a recurrent policy starts the episode from its initial state
    obs, info = env.reset(seed=seed)
    variation = str(info.get("variation", ""))
    if video is not None:
        video.add(env.render())
    total, length = 0.0, 0
    while True:
        if video is not None and max_frames is not None and video.frames >= max_frames:
            return Episode(total, length, math.nan, variation, ended=False)
        interrupt_request.check()  # a signal stops the episode between steps (callbacks/interrupt.py)
        if obs_bound is not None:  # the float arrays only, as the env group clips them
            obs = clip_floats(obs, obs_bound)
        obs_t = to_tensor(map_obs(lambda x: np.asarray(x)[None], obs), device)
        action = to_env_action(actor.act(obs_t, deterministic), env.action_space)[0]
        obs, reward, terminated, truncated, info = env.step(action)
        total += float(reward)
        length += 1
        if video is not None:
            video.add(env.render())
        if terminated or truncated:
            success = info.get("is_success", info.get("success"))
            score = info.get("episode", {}).get("r")  # RecordEpisodeStatistics before reward shaping (EnvGroup too)
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
        self.envs = envs
        self.policy = policy
        self.episodes = episodes
        self.prefix = prefix
        self.deterministic = deterministic
        self.seed = seed
        self.should_run = should_run

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
        if not np.isnan(stats.successes).all():
            batch["success"] = torch.tensor(stats.successes, dtype=torch.float32)
        yield batch
