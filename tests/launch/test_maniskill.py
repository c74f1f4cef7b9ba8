"""ManiSkill3 as a shipped workload: ``+experiment=ppo_maniskill`` on PushCube-v1 (state) through ``train.py``.

Needs the ``embodied`` extra and a Vulkan device (lavapipe on CPU machines; ``requirements/vulkan_cpu.sh``),
both of which the test command in README.md installs.
"""

from __future__ import annotations

import csv
import os

import numpy as np
import pytest
from omegaconf import OmegaConf

from rl_lightning.envs import ObjectSetWrapper, resolve_obj_sets
from tests.launch.conftest import REPO, read_summary, run_train

ENV_CONFIG = os.path.join(REPO, "conf", "env", "maniskill_push_cube.yaml")


def test_ppo_maniskill_trains_and_reports_success_on_both_object_sets(tmp_path):
    """Test that +experiment=ppo_maniskill trains on ManiSkill's CPU simulation and reports the success rate of the
    train and test object sets, in the summary and in the logged evaluations, with success_once beside it."""
    run_dir = tmp_path / "run"
    overrides = ["+experiment=ppo_maniskill", "algo.total_timesteps=800", "data.rollout_steps=50", "env.num_envs=4",
                 "env.eval_num_envs=2", "env.eval_interval=2", "env.eval_episodes=2", "logger=csv",
                 f"hydra.run.dir={run_dir}"]  # fmt: skip
    run_train(overrides, str(tmp_path), timeout=600)
    summary = read_summary(str(run_dir))
    assert summary["env_steps"] == 800
    for key in ("eval_success_rate", "eval_ood_success_rate"):
        assert summary[key] is not None and 0.0 <= summary[key] <= 1.0, key
    with open(run_dir / "metrics.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r.get("eval_ood/success_rate")]
    assert len(rows) >= 2  # an evaluation during fit and the final test
    assert all(0.0 <= float(r["eval/success_rate"]) <= 1.0 for r in rows)
    # ManiSkill's two protocols: success at the final step (success_rate, its success_at_end) and at any step.
    assert all(float(r["eval/success_rate"]) <= float(r["eval/success_once"]) <= 1.0 for r in rows)
    with open(run_dir / "metrics.csv", newline="") as f:
        rollout = [float(r["rollout/success_rate"]) for r in csv.DictReader(f) if r.get("rollout/success_rate")]
    assert rollout and all(0.0 <= x <= 1.0 for x in rollout)  # the training episodes' success, per epoch


def test_push_cube_object_sets_change_the_goal_and_the_start():
    """Test that the shipped PushCube test variations set the goal's distance (0.1 + radius ahead of the cube) and
    the spread of the robot's initial joints, and that the train set stays within its ranges."""
    cfg = OmegaConf.load(ENV_CONFIG)
    sets = resolve_obj_sets(cfg.env_id, OmegaConf.to_container(cfg.obj_sets))
    env = ObjectSetWrapper(sets, "test", wrappers=OmegaConf.to_container(cfg.wrappers))
    rest = None
    seen: dict[str, list[float]] = {}
    env.reset(seed=0)
    for _ in range(24):
        obs, info = env.reset()
        u = env.unwrapped
        goal_offset = float((u.goal_region.pose.p - u.obj.pose.p)[0, 0])
        if rest is None:
            rest = np.asarray(u.agent.keyframes["rest"].qpos)[:7]
        spread = float(np.abs(obs[:7] - rest).mean())
        seen.setdefault(info["variation"], []).append(spread)
        assert goal_offset == pytest.approx(0.1 + u.goal_radius, abs=1e-6)
        assert u.goal_radius == (0.05 if info["variation"] in ("tight_goal", "tight_noisy") else 0.1)
    assert set(seen) == {"tight_goal", "noisy_start", "tight_noisy"}
    # A std of 0.2 rad per joint against 0.02: the noisy starts lie about ten times as far from the rest pose.
    assert min(np.mean(seen["noisy_start"]), np.mean(seen["tight_noisy"])) > 5 * np.mean(seen["tight_goal"])
    env.close()


def test_ppo_maniskill_trains_with_async_workers_started_by_forkserver(tmp_path):
    """Test that env.vectorization=async runs ManiSkill's CPU envs in worker processes (the env config's forkserver
    start method: forked workers hang in SAPIEN) and trains to its budget."""
    run_dir = tmp_path / "run"
    overrides = ["+experiment=ppo_maniskill", "env.vectorization=async", "algo.total_timesteps=400", "env.num_envs=2",
                 "env.eval_num_envs=1", "env.eval_interval=4", "env.eval_episodes=2", "algo.num_minibatches=2",
                 "logger=csv", f"hydra.run.dir={run_dir}"]  # fmt: skip
    run_train(overrides, str(tmp_path), timeout=600)
    summary = read_summary(str(run_dir))
    assert summary["env_steps"] == 400 and summary["eval_success_rate"] is not None


def test_the_rgb_variant_trains_evaluates_plays_and_exports_from_the_camera(tmp_path):
    """Test +experiment=ppo_maniskill_rgb end to end on a tiny budget: fit from the 64x64 camera and the state vector,
    evaluation on both object sets, play on the test set, and an ONNX export whose inputs are the image (uint8) and
    the state."""
    from rl_lightning.launch import export, play

    run_dir = tmp_path / "run"
    overrides = ["+experiment=ppo_maniskill_rgb", "algo.total_timesteps=100", "data.rollout_steps=50",
                 "env.num_envs=2", "env.eval_num_envs=1", "env.eval_interval=2", "env.eval_episodes=1",
                 "algo.num_minibatches=2", "logger=csv", f"hydra.run.dir={run_dir}"]  # fmt: skip
    run_train(overrides, str(tmp_path), timeout=600)
    summary = read_summary(str(run_dir))
    assert summary["env_steps"] == 100
    assert summary["eval_success_rate"] is not None and summary["eval_ood_success_rate"] is not None
    checkpoint = str(run_dir / "checkpoints" / "last.ckpt")
    episodes = play.main([checkpoint, "--obj-set", "test", "--episodes", "1"])
    assert len(episodes) == 1 and episodes[0].length == 50 and episodes[0].variation
    contract = export.main([checkpoint, "--format", "onnx"])
    assert [(i["name"], i["dtype"], i["shape"]) for i in contract["inputs"]] == [
        ("rgb", "uint8", ["batch", 64, 64, 3]),
        ("state", "float32", ["batch", 25]),
    ]
