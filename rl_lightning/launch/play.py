"""``rl-lightning play CKPT``: a checkpoint's policy plays episodes; each one's return and success is printed.

    rl-lightning play runs/<run>/checkpoints/last.ckpt                    # 5 episodes, training object set
    rl-lightning play runs/<run>/checkpoints/last.ckpt --obj-set test --episodes 10 --video test.mp4

Any algorithm's checkpoint works: the algorithm, the env, its object sets and the evaluation time limit are read from
it. Episodes are deterministic (the mode of the policy) unless ``--stochastic``; the first is reset with ``--seed`` and
the others follow from it, so the same command plays the same episodes. ``--video`` films them all, one after the other,
into one mp4.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from typing import NoReturn

import gymnasium as gym
import numpy as np
import torch

from rl_lightning.algos import load_with_data_settings
from rl_lightning.checks import check_positive_int, check_seed
from rl_lightning.data.evaluation import Episode, play_episode
from rl_lightning.envs import make_env, resolve_obj_sets
from rl_lightning.video import VideoWriter


def _seed(text: str) -> int:
    try:
        check_seed(int(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer in [0, 2**32), got {text!r}") from None
    return int(text)


def _positive_int(text: str) -> int:
    try:
        check_positive_int(episodes=int(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    return int(text)


def main(args: Sequence[str] | None = None) -> list[Episode]:
    """``rl-lightning play CKPT [--obj-set NAME] [--episodes N] [--video FILE] [--seed S] [--stochastic]``.

    Returns:
        The episodes played.
    """
    parser = argparse.ArgumentParser(
        prog="rl-lightning play",
        description="A checkpoint's policy plays episodes; each one's return and success is printed.",
    )
    parser.add_argument("checkpoint", help="a .ckpt file from a run's checkpoints/ directory")
    parser.add_argument("--obj-set", default=None, help="object set to play on (default: the run's training set)")
    parser.add_argument("--episodes", type=_positive_int, default=5, help="episodes to play (default: 5)")
    parser.add_argument("--video", default=None, metavar="FILE", help="film the episodes into this mp4 file")
    parser.add_argument("--seed", type=_seed, default=0, help="reset seed of the first episode (default: 0)")
    parser.add_argument("--stochastic", action="store_true", help="sample actions instead of taking the mode")
    ns = parser.parse_args(args)

    def fail(message: str) -> NoReturn:
        parser.exit(2, f"rl-lightning play: error: {message}\n")

    if ns.video is not None and not ns.video.lower().endswith(".mp4"):
        fail(f"--video {ns.video}: videos are written as mp4; name a file ending in .mp4.")
    try:
        model, data = load_with_data_settings(ns.checkpoint)
    except (FileNotFoundError, ValueError) as err:
        fail(str(err))
    if data.get("env_factory"):
        fail(f"This checkpoint was trained on env_factory={data['env_factory']}, a batched simulator; play steps one "
             "gymnasium env. Evaluate it with `rl-lightning test --ckpt_path` (or trainer.test).")  # fmt: skip
    if "env_id" not in data:
        fail(f"Checkpoint '{ns.checkpoint}' holds no env settings (it was saved without a data module), so there is "
             "no env to play on. Pass a checkpoint written by a run (train.py, rl-lightning fit).")  # fmt: skip
    algorithm = type(model).__name__
    obj_set = ns.obj_set or data["train_obj_set"]
    sets = resolve_obj_sets(data["env_id"], data["obj_sets"])
    if obj_set not in sets:
        fail(f"--obj-set {obj_set}: {data['env_id']} has no such object set in this run; available: {sorted(sets)}.")
    # The run's obs_bound in clip mode clipped what its policy saw: play shows it the same.
    obs_bound = data["obs_bound"] if data["obs_bound_mode"] == "clip" else None
    try:
        env = make_env(data["env_id"], obj_set, sets, data["eval_max_episode_steps"],
                       render_mode="rgb_array" if ns.video else None, wrappers=data["wrappers"])  # fmt: skip
        if ns.video:
            env.reset(seed=ns.seed)
            env.render()  # fails here, before any episode, on a machine that cannot render this env
    except (gym.error.Error, ValueError, RuntimeError, ImportError) as err:
        fail(f"Cannot make {data['env_id']}{' with rendering' if ns.video else ''}: {type(err).__name__}: {err} "
             "(install the env's dependencies; MuJoCo without a display renders with MUJOCO_GL=egl).")  # fmt: skip
    torch.manual_seed(ns.seed)  # the samples of --stochastic
    mode = "stochastic" if ns.stochastic else "deterministic"
    names = ", ".join(v.name or "unnamed" for v in env.obj_sets[obj_set])
    print(f"{algorithm} on {data['env_id']}, object set '{obj_set}' ({names}): {ns.episodes} {mode} episodes, "
          f"seed {ns.seed}")  # fmt: skip
    print(f"{'episode':>7}  {'variation':<20} {'return':>10} {'length':>7}  success")
    episodes: list[Episode] = []
    video = VideoWriter(ns.video, env.metadata.get("render_fps") or 30) if ns.video else None
    try:
        for k in range(ns.episodes):
            seed = ns.seed if k == 0 else None
            episode = play_episode(model.policy, env, seed, not ns.stochastic, video, obs_bound=obs_bound)
            episodes.append(episode)
            success = "-" if math.isnan(episode.success) else "yes" if episode.success else "no"
            print(f"{k + 1:>7}  {episode.variation or '-':<20} {episode.ret:>10.2f} {episode.length:>7}  {success}",
                  flush=True)  # fmt: skip
    except KeyboardInterrupt:
        print(f"Stopped after {len(episodes)} episode(s).")
        if video is not None:
            # The interrupt may have reached ffmpeg's pipe mid-frame, which kills the encoder.
            print(f"The video {ns.video} may be incomplete.")
            video.close()
            video = None
    except OSError as err:  # the video's directory or file cannot be written
        fail(f"Cannot write the video {ns.video}: {err} (--video)")
    finally:
        if video is not None:
            video.close()
        env.close()
    if episodes:
        returns = np.array([e.ret for e in episodes])
        successes = np.array([e.success for e in episodes])
        graded = successes[~np.isnan(successes)]
        rate = f"; success rate {graded.mean():.2f}" if graded.size else ""
        print(f"mean return {returns.mean():.2f} +/- {returns.std():.2f} over {len(episodes)} episodes{rate}")
    if video is not None and video.frames:
        print(f"Wrote {ns.video} ({video.frames} frames, {video.fps:g} fps)")
    return episodes
