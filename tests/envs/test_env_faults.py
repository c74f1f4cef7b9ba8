"""Tests for env faults at the env layer: restarts, dying async workers, non-finite and out-of-bound values."""

from __future__ import annotations

import multiprocessing
import sys

import gymnasium as gym
import numpy as np
import pytest
import torch

from rl_lightning.envs import EnvGroup, RestartingEnv
from rl_lightning.envs.gymnasium_env import derive_seed
from rl_lightning.faults import EnvFault, NumericalFault
from tests.envs.faulty_env import EPISODE_LEN, FAULTY_ID, FaultyEnv, faulty_sets


def faulty_group(num_envs=2, vectorization="sync", seed=0, **fault) -> EnvGroup:
    """A group of FaultyEnvs; ``fault`` holds the env's keyword arguments and the group's fault options."""
    group_args = {
        k: fault.pop(k) for k in ("max_env_restarts", "obs_bound", "obs_bound_mode", "on_nonfinite") if k in fault
    }
    return EnvGroup(
        FAULTY_ID, num_envs, obj_sets=faulty_sets(**fault), vectorization=vectorization, seed=seed, **group_args
    )


def run(group: EnvGroup, steps: int) -> list:
    """Step ``group`` ``steps`` times with action 0; return the step results."""
    return [group.step(np.zeros(group.num_envs, dtype=np.int64)) for _ in range(steps)]


# ---------------------------------------------------------------- an env that raises
def test_step_error_restarts_env_and_truncates_episode(tmp_path):
    """Test that an env raising in step is recreated and its episode ends truncated at the last good obs."""
    group = faulty_group(fault="step", at=3, once_file=str(tmp_path / "once"))
    group.reset()
    broken = group.env.envs.envs[0].env
    first, second, third = run(group, 3)
    assert third.cut is not None and third.cut.tolist() == [True, False]
    assert third.truncated[0] and not third.terminated[0] and third.reward[0] == 0.0
    assert third.final_obs[0][0] == 2.0  # the last observation the env returned before failing
    assert third.obs[0][0] == 0.0  # the fresh env's first observation
    assert group.env.envs.envs[0].env is not broken
    assert first.cut is None and second.cut is None
    steps = run(group, 2 * EPISODE_LEN)
    assert not any(np.isnan(s.reward).any() for s in steps)
    stats = group.pop_stats()
    assert stats.env_restarts == 1
    # Env 1 finished its first two episodes; env 0's cut episode is not one, its next two are.
    assert stats.lengths == [EPISODE_LEN] * len(stats) and sorted(stats.envs) == [0, 0, 1, 1]


def test_reset_error_is_retried_with_a_fresh_env(tmp_path):
    """Test that an env raising in reset is recreated and reset again, and the recreation counted."""
    group = faulty_group(fault="reset", once_file=str(tmp_path / "once"))
    obs = group.reset()
    assert obs.tolist() == [[0.0], [0.0]]
    assert group.pop_stats().env_restarts == 1


@pytest.mark.parametrize("limit", [0, 2])
def test_restart_limit_raises_env_fault_naming_the_env(limit):
    """Test that an env failing past max_env_restarts in a row raises EnvFault naming env, set, error and fix."""
    group = faulty_group(num_envs=1, fault="step", at=1, max_env_restarts=limit)
    group.reset()
    for _ in range(limit):  # each of these steps fails and recreates the env
        assert group.step(np.zeros(1, dtype=np.int64)).cut[0]
    with pytest.raises(EnvFault) as raised:
        group.step(np.zeros(1, dtype=np.int64))
    message = str(raised.value)
    for part in ["env 0 of Faulty-v0", "object set 'train'", f"max_env_restarts={limit}", "boom at step 1"]:
        assert part in message
    assert "env.max_env_restarts=" in message


def test_finished_episode_resets_the_restart_count():
    """Test that two failures with a finished episode between them stay within max_env_restarts=1."""
    built = []

    def factory():
        # Instance 0 fails in its first episode, instance 1 in its second, instance 2 never.
        fail_every = {0: 1, 1: 2}.get(len(built))
        built.append(FaultyEnv("step" if fail_every else "none", at=2, fail_every=fail_every))
        return built[-1]

    env = RestartingEnv(factory, max_env_restarts=1, label="env 0")
    env.reset(seed=0)
    cuts = 0
    for _ in range(4 * EPISODE_LEN):
        _, _, terminated, truncated, info = env.step(0)
        cuts += info.get("env_restart", 0)
        if terminated or truncated:
            env.reset()
    assert cuts == 2 and len(built) == 3 and env.restarts.total == 2


def test_fresh_env_seeds_are_reproducible_and_distinct():
    """Test that recreated envs get seeds derived from the last reset seed and the restart count."""
    assert derive_seed(7, 1) == derive_seed(7, 1)
    assert len({derive_seed(7, 1), derive_seed(7, 2), derive_seed(8, 1)}) == 3
    assert derive_seed(None, 1) is None


def test_restarting_env_seeds_fresh_env_deterministically():
    """Test that after a step failure the fresh env's first reset uses derive_seed(last seed, restarts)."""
    seeds = []

    class Recorder(FaultyEnv):
        def reset(self, *, seed=None, options=None):
            seeds.append(seed)
            return super().reset(seed=seed, options=options)

    env = RestartingEnv(lambda: Recorder("step", at=1), max_env_restarts=5, label="env 0")
    env.reset(seed=11)
    env.step(0)  # fails: the env is recreated
    env.reset()  # what the vector env's autoreset does
    assert seeds == [11, derive_seed(11, 1)]


def test_step_before_reset_is_not_taken_for_a_fault():
    """Test that stepping before any reset raises the env's own error instead of recreating the env."""
    env = RestartingEnv(lambda: gym.make(FAULTY_ID), max_env_restarts=3, label="env 0")
    with pytest.raises(gym.error.ResetNeeded):
        env.step(0)
    assert env.restarts.total == 0


# ---------------------------------------------------------------- async workers
def test_env_error_inside_async_worker_is_restarted(tmp_path):
    """Test that an env raising inside an async worker is recreated there, and only its episode is cut."""
    group = faulty_group(vectorization="async", fault="step", at=2, once_file=str(tmp_path / "once"))
    try:
        group.reset()
        pids = [p.pid for p in group.env.envs.processes]
        _, second = run(group, 2)
        assert second.cut.sum() == 1 and second.truncated.sum() == 1
        i = int(np.flatnonzero(second.cut)[0])
        assert second.final_obs[i][0] == 1.0 and second.reward[i] == 0.0
        assert [p.pid for p in group.env.envs.processes] == pids  # the workers lived on
        assert group.pop_stats().env_restarts == 1
    finally:
        group.close()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="workers inherit the test's registry when forked")
def test_dying_async_worker_is_rebuilt_and_every_episode_truncated(tmp_path):
    """Test that a worker process that exits is replaced: all episodes truncated at their last obs, no leaks."""
    group = faulty_group(vectorization="async", fault="exit", at=2, once_file=str(tmp_path / "once"))
    try:
        group.reset()
        old = list(group.env.envs.processes)
        first, second = run(group, 2)
        assert second.cut.all() and second.truncated.all() and not second.terminated.any()
        assert (second.reward == 0).all()
        assert [second.final_obs[i][0] for i in range(2)] == [1.0, 1.0]  # last good observations
        assert np.isfinite(second.obs).all()
        new = list(group.env.envs.processes)
        assert all(not p.is_alive() and p.exitcode is not None for p in old)  # reaped, not zombies
        children = {p.pid for p in multiprocessing.active_children()}
        assert not children & {p.pid for p in old} and {p.pid for p in new} <= children
        run(group, 2 * EPISODE_LEN)  # the rebuilt workers step on
        stats = group.pop_stats()
        assert stats.env_restarts == 1 and len(stats) == 4 and stats.lengths == [EPISODE_LEN] * 4
    finally:
        group.close()
    assert not {p.pid for p in multiprocessing.active_children()} & {p.pid for p in new}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="workers inherit the test's registry when forked")
def test_workers_dying_past_the_limit_raise_env_fault_and_leave_no_process():
    """Test that workers dying more than max_env_restarts times in a row raise EnvFault and are all stopped."""
    group = faulty_group(vectorization="async", fault="exit", at=1, max_env_restarts=1)
    group.reset()
    processes = list(group.env.envs.processes)
    group.step(np.zeros(2, dtype=np.int64))  # first death: rebuilt
    processes += group.env.envs.processes
    match = r"the async workers of Faulty-v0 \(object set 'train'\) failed 2 time.*max_env_restarts=1"
    with pytest.raises(EnvFault, match=match):
        group.step(np.zeros(2, dtype=np.int64))
    group.close()
    assert not any(p.is_alive() for p in processes)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="workers inherit the test's registry when forked")
def test_worker_dying_in_reset_is_rebuilt(tmp_path):
    """Test that a worker process exiting during reset is replaced and the reset completes, counted."""
    group = faulty_group(vectorization="async", fault="exit_reset", once_file=str(tmp_path / "once"))
    try:
        old = list(group.env.envs.processes)
        assert group.reset().tolist() == [[0.0], [0.0]]
        assert group.env.envs.processes != old and not any(p.is_alive() for p in old)
        assert group.pop_stats().env_restarts == 1
    finally:
        group.close()


@pytest.mark.parametrize("vectorization", ["sync", "async"])
@pytest.mark.parametrize("fault", ["wide_obs", "vector_reward"])
def test_an_observation_or_reward_the_vector_env_cannot_batch_is_named(fault, vectorization):
    """Test that an env returning an observation of another shape than its space's, or a reward of two numbers, stops
    with a message naming the env, the call and the space's shape, not retried as an env fault: gymnasium's vector env
    raised numpy's "Output array is the wrong shape" or "setting an array element with a sequence", and async workers'
    rewards a TypeError from the value check."""
    group = faulty_group(vectorization=vectorization, fault=fault, at=2)
    try:
        group.reset()
        run(group, 1)
        match = r"could not batch what the envs of Faulty-v0 \(object set 'train'\) returned from step .*shape, \(1,\)"
        with pytest.raises(ValueError, match=match):
            run(group, 1)
        assert group.pop_stats().env_restarts == 0
    finally:
        group.close()


def test_env_failing_past_the_limit_in_a_worker_raises_env_fault_and_stops_all_workers():
    """Test that EnvFault raised inside an async worker reaches the caller with its message, and no worker is left."""
    group = faulty_group(vectorization="async", fault="step", at=1, max_env_restarts=0)
    group.reset()
    processes = list(group.env.envs.processes)
    with pytest.raises(EnvFault, match=r"env [01] of Faulty-v0 \(object set 'train'\) \(step\).*boom at step 1"):
        group.step(np.zeros(2, dtype=np.int64))
    assert not any(p.is_alive() for p in processes)
    group.close()


# ---------------------------------------------------------------- non-finite values
def test_nan_reward_stops_with_message_naming_reward_and_env(tmp_path):
    """Test that a NaN reward with on_nonfinite='stop' raises NumericalFault naming reward, env, set and step."""
    group = faulty_group(num_envs=3, fault="nan_reward", at=3, once_file=str(tmp_path / "once"), nth=2)
    group.reset()
    run(group, 2)
    with pytest.raises(NumericalFault) as raised:
        group.step(np.zeros(3, dtype=np.int64))
    message = str(raised.value)
    for part in ["reward nan", "env 1 of Faulty-v0", "object set 'train'", "step 3", "env.on_nonfinite=skip"]:
        assert part in message


@pytest.mark.parametrize(
    "fault, dtype, value",
    [("nan_obs", "float32", "nan"), ("inf_obs", "float32", "inf"), ("huge_obs", "float64", "inf")],
)
def test_nonfinite_observation_stops(fault, dtype, value):
    """Test that a NaN or inf observation raises NumericalFault naming the observation, also a float64 one beyond
    float32's range, which the policy's tensors hold as inf (it passed the check made in float64)."""
    group = faulty_group(num_envs=1, fault=fault, at=2, dtype=dtype)
    group.reset()
    run(group, 1)
    with pytest.raises(NumericalFault, match=f"Non-finite observation value {value}") as info:
        group.step(np.zeros(1, dtype=np.int64))
    # obs_bound does not clip a NaN or inf: the message does not offer it as the way on (it did).
    assert "obs_bound bounds finite values only" in str(info.value) and "obs_bound=..." not in str(info.value)


def test_nonfinite_final_observation_stops():
    """Test that a NaN in the final observation of an episode (autoreset hides it from obs) is caught."""
    group = faulty_group(num_envs=1, fault="nan_obs", at=EPISODE_LEN)
    group.reset()
    run(group, EPISODE_LEN - 1)
    with pytest.raises(NumericalFault, match="final observation value nan"):
        group.step(np.zeros(1, dtype=np.int64))


def test_nan_reward_skip_truncates_counts_and_never_returns_nan():
    """Test that with on_nonfinite='skip' a NaN reward cuts the episode at its last good obs, counted, no NaN out."""
    group = faulty_group(fault="nan_reward", at=3, on_nonfinite="skip")
    group.reset()
    steps = run(group, 3)
    third = steps[-1]
    assert third.cut.all() and third.truncated.all() and not third.terminated.any()
    assert (third.reward == 0).all() and [third.final_obs[i][0] for i in range(2)] == [2.0, 2.0]
    assert (third.obs == 0).all()  # reset: the next episode's first observation
    steps += run(group, 20)
    assert all(np.isfinite(s.reward).all() and np.isfinite(s.obs).all() for s in steps)
    assert all(np.isfinite(s.final_obs).all() for s in steps)
    stats = group.pop_stats()
    assert len(stats) == 0  # every episode was cut at step 3
    assert stats.nonfinite_steps == 2 * (23 // 3)  # both envs, every third step


def test_skipped_episode_is_left_out_and_others_recorded(tmp_path):
    """Test that a skipped episode is not in the statistics while the other env's episodes are."""
    group = faulty_group(fault="nan_reward", at=3, once_file=str(tmp_path / "once"), nth=2, on_nonfinite="skip")
    group.reset()
    run(group, EPISODE_LEN)
    stats = group.pop_stats()
    assert stats.envs == [0] and stats.returns == [float(EPISODE_LEN)] and stats.nonfinite_steps == 1


def test_nonfinite_reset_observation_stop_and_skip(tmp_path):
    """Test that a NaN first observation stops the run at reset, or (skip) is reset again and counted."""
    with pytest.raises(NumericalFault, match="at reset"):
        faulty_group(fault="nan_reset_obs", once_file=str(tmp_path / "a")).reset()
    group = faulty_group(fault="nan_reset_obs", once_file=str(tmp_path / "b"), on_nonfinite="skip")
    assert np.isfinite(group.reset()).all()
    assert group.pop_stats().nonfinite_steps == 1


def test_env_producing_nan_every_episode_stops_even_when_skipping():
    """Test that an env that never finishes an episode under skip ends with NumericalFault, not an endless run."""
    group = faulty_group(num_envs=1, fault="nan_reward", at=1, on_nonfinite="skip")
    group.reset()
    with pytest.raises(NumericalFault, match="episodes in a row"):
        run(group, 200)


# ---------------------------------------------------------------- observation bound
def test_obs_bound_clip_clips_and_counts():
    """Test that obs_bound with clip clips observations to the bound and counts the clipped values."""
    group = faulty_group(fault="big_obs", at=2, obs_bound=10.0)
    group.reset()
    _, second = run(group, 2)
    assert (second.obs == 10.0).all() and second.cut is None
    assert group.pop_stats().obs_clipped == 2


def test_obs_bound_clip_applies_to_final_observations():
    """Test that a final observation outside the bound is clipped (on a copy) and counted."""
    group = faulty_group(num_envs=1, fault="big_obs", at=EPISODE_LEN, obs_bound=10.0)
    group.reset()
    last = run(group, EPISODE_LEN)[-1]
    assert last.final_obs[0][0] == 10.0 and group.pop_stats().obs_clipped == 1


def test_obs_bound_reject_stops_or_skips():
    """Test that obs_bound with reject treats an observation outside the bound like a non-finite one."""
    group = faulty_group(num_envs=1, fault="big_obs", at=2, obs_bound=10.0, obs_bound_mode="reject")
    group.reset()
    run(group, 1)
    with pytest.raises(NumericalFault, match="outside obs_bound=10.0"):
        run(group, 1)
    group = faulty_group(
        num_envs=1, fault="big_obs", at=2, obs_bound=10.0, obs_bound_mode="reject", on_nonfinite="skip"
    )
    group.reset()
    _, second = run(group, 2)
    assert second.cut[0] and second.truncated[0] and second.final_obs[0][0] == 1.0 and second.obs[0][0] == 0.0
    stats = group.pop_stats()
    assert stats.nonfinite_steps == 1 and stats.obs_clipped == 0


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"max_env_restarts": -1}, "max_env_restarts must be a non-negative integer"),
        ({"max_env_restarts": 1.5}, "max_env_restarts must be a non-negative integer"),
        ({"obs_bound": 0}, "obs_bound must be a positive finite number"),
        ({"obs_bound": float("inf")}, "obs_bound must be a positive finite number"),
        ({"obs_bound_mode": "wrap"}, "obs_bound_mode must be one of"),
        ({"on_nonfinite": "ignore"}, "on_nonfinite must be one of"),
    ],
)
def test_bad_fault_options_rejected(kwargs, match):
    """Test that invalid fault options raise a ValueError naming the argument."""
    with pytest.raises(ValueError, match=match):
        EnvGroup("CartPole-v1", 1, **kwargs)


# ---------------------------------------------------------------- a batched env that raises (the tensor path)
def _flaky_group(factory: str, max_env_restarts: int) -> EnvGroup:
    from tests.envs import batched_factory

    batched_factory.BUILT.clear()
    batched_factory.FAILED.clear()
    plain = {"train": [{}], "test": [{}]}
    return EnvGroup("Count-v0", 3, obj_sets=plain, backend="torch", max_env_restarts=max_env_restarts, seed=5,
                    env_factory=f"tests.envs.batched_factory.{factory}")  # fmt: skip


def test_a_batched_env_that_raises_is_rebuilt_and_every_episode_restarts_cut_short(monkeypatch):
    """Test that a batched env raising in step is rebuilt from its factory (a fresh seed): the step ends every
    episode where it was (truncated, reward 0, final_obs the last observation), cut short so no statistics count
    it, the next observations are the fresh starts, and the rebuild is counted once."""
    from tests.envs import batched_factory

    monkeypatch.setenv("FLAKY_FAIL_AT", "5")
    group = _flaky_group("make_flaky_count_envs", max_env_restarts=1)
    group.reset()
    zeros = torch.zeros(3, dtype=torch.long)
    steps = [group.step(zeros) for _ in range(5)]  # the 5th step of the first env raises
    before, failed = steps[3], steps[4]
    assert len(batched_factory.BUILT) == 2 and batched_factory.BUILT[1].seeds == [derive_seed(5, 1)]
    assert failed.done.all() and failed.cut.all() and failed.truncated.all() and not failed.terminated.any()
    assert torch.equal(failed.final_obs, before.obs) and failed.obs.eq(0).all() and failed.reward.eq(0).all()
    after = [group.step(zeros) for _ in range(3)]  # the rebuilt env runs whole episodes again
    assert [s.obs[0, 0].item() for s in after] == [1.0, 2.0, 0.0]
    stats = group.pop_stats()
    # Steps 1-3 and 4: one full episode (3 steps) per env before the fault, none cut ones, one after it.
    assert stats.env_restarts == 1 and stats.lengths == [3] * 6 and stats.returns == [3.0] * 6
    group.close()


@pytest.mark.parametrize("limit", [0, 2])
def test_a_batched_env_failing_past_the_limit_raises_env_fault_naming_the_env_the_call_and_the_error(limit):
    """Test that a batched env raising again after max_env_restarts rebuilds (at once with 0) raises EnvFault naming
    the env, the call and the exception, with the setting that allows more."""
    from tests.envs import batched_factory

    group = _flaky_group("make_broken_count_envs", max_env_restarts=limit)
    group.reset()
    zeros = torch.zeros(3, dtype=torch.long)
    with pytest.raises(EnvFault) as info:
        for _ in range(10):
            group.step(zeros)
    message = str(info.value)
    assert "The batched Count-v0 (object set 'train') (step)" in message
    assert "RuntimeError: simulator lost its context at step 2" in message
    assert f"max_env_restarts={limit}" in message and "env.max_env_restarts=" in message
    assert len(batched_factory.BUILT) == limit + 1
    group.close()


# ---------------------------------------------------------------- async workers that stop answering
@pytest.mark.parametrize(("hang", "sigterm_handled"), [("start", False), ("step", False), ("start", True)])
def test_async_workers_that_stop_answering_raise_env_fault_within_the_time_limit(hang, sigterm_handled):
    """Test that async workers hanging while they start or in a step end, within worker_timeout, in EnvFault naming the
    env, the call and the settings to change, and leave no worker process behind; also where the process has a Python
    SIGTERM handler that returns (Lightning's during a fit), which forked workers inherit."""
    import signal
    import time

    from tests.envs.hanging_env import HANGING_ID

    sets = {"train": [{"make_kwargs": {"hang": hang}}], "test": [{}]}
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: None) if sigterm_handled else None
    start = time.perf_counter()
    try:
        with pytest.raises(EnvFault) as info:
            group = EnvGroup(HANGING_ID, 2, obj_sets=sets, vectorization="async", worker_timeout=3)
            group.reset()
            for _ in range(5):
                group.step(np.zeros(2, dtype=np.int64))
    finally:
        if sigterm_handled:
            signal.signal(signal.SIGTERM, previous)
    assert time.perf_counter() - start < 60
    message = str(info.value)
    call = "start" if hang == "start" else "step"
    workers = f"The async workers of {HANGING_ID} (object set 'train')"
    assert f"{workers} did not answer {call} within worker_timeout=3 s" in message
    assert "env.worker_start_method=forkserver" in message and "env.worker_timeout=" in message
    time.sleep(0.5)
    assert not multiprocessing.active_children()


def test_bad_worker_options_are_refused_naming_the_setting():
    """Test that an unknown start method and a non-positive time limit are refused with the setting's name."""
    with pytest.raises(ValueError, match="worker_start_method must be one of"):
        EnvGroup("CartPole-v1", 2, vectorization="async", worker_start_method="clone")
    with pytest.raises(ValueError, match="worker_timeout must be a positive number"):
        EnvGroup("CartPole-v1", 2, vectorization="async", worker_timeout=0)


# ---------------------------------------------------------------- what a batched env's values and a caller's actions
def _fault_group(*faults: dict, num_envs: int = 2) -> EnvGroup:
    from tests.envs import batched_factory

    batched_factory.BUILT.clear()
    batched_factory.FAULTS[:] = list(faults)
    return EnvGroup("Fault-v0", num_envs, obj_sets={"train": [{}]}, backend="torch", max_env_restarts=1,
                    env_factory="tests.envs.batched_factory.make_fault_envs")  # fmt: skip


def test_a_batched_env_ending_episodes_on_a_nan_observation_stops_at_the_collection_end():
    """Test that a NaN final observation (what a truncated episode is bootstrapped from) is caught on the tensor path,
    though the next episodes' first observations are finite."""
    group = _fault_group({"nan_final": True})
    group.reset()
    step = group.step(torch.zeros(2, dtype=torch.long))
    assert step.obs.isfinite().all() and step.final_obs.isnan().all()
    with pytest.raises(NumericalFault, match="non-finite observation or reward"):
        group.pop_stats()


def test_the_first_observations_of_a_rebuilt_batched_env_are_checked():
    """Test that a batched env rebuilt after raising in step, whose fresh start is NaN, stops the run as a NaN reset
    would, and that a rebuild after a raising reset is counted as one after a raising step is."""
    group = _fault_group({"fail_step": True}, {"nan_reset": True})
    group.reset()
    group.step(torch.zeros(2, dtype=torch.long))  # raises inside: rebuilt, its first observations NaN
    with pytest.raises(NumericalFault):
        group.pop_stats()
    group = _fault_group({"fail_reset": True})
    assert group.reset().isfinite().all()  # the first build's reset raised: rebuilt
    assert group.pop_stats().env_restarts == 1


def test_finite_float16_observations_of_many_envs_are_not_taken_for_nan():
    """Test that the non-finite check sums float16 observations without overflowing (65,504 is float16's largest)."""
    group = _fault_group({"dtype": torch.float16}, num_envs=40_000)
    group.reset()
    group.step(torch.zeros(40_000, dtype=torch.long))
    assert len(group.pop_stats()) == 40_000  # every episode ended, no NumericalFault


@pytest.mark.parametrize(
    ("env_id", "backend", "action", "expected"),
    [("CartPole-v1", "torch", torch.zeros(3, dtype=torch.long), r"integer actions of shape \(2,\)"),
     ("Pendulum-v1", "torch", torch.zeros(2), r"actions of shape \(2, 1\) .* got torch.float32 \(2,\)"),
     ("CartPole-v1", "gymnasium", torch.tensor([0.7, 1.2]), r"integer actions .* got torch.float32 \(2,\)"),
     ("CartPole-v1", "envpool", torch.zeros(1, dtype=torch.long), r"\(2,\) \(num_envs, \*action shape\)")],
)  # fmt: skip
def test_malformed_actions_are_refused_before_any_env_steps(env_id, backend, action, expected):
    """Test that actions of the wrong batch, shape or kind raise a ValueError naming the shape expected, and are not
    taken for an env fault (no rebuild, no restart; EnvPool would abort the process)."""
    group = EnvGroup(env_id, 2, backend=backend, obj_sets={"train": [{}]}, seed=0)
    group.reset()
    with pytest.raises(ValueError, match=expected):
        group.step(action)
    assert group.pop_stats().env_restarts == 0
    group.close()
