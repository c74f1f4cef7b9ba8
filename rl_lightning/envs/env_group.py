"""``EnvGroup``: the one env contract. Every backend steps as one batched env of torch tensors on a device.

Every backend is a gymnasium ``VectorEnv`` of tensors with ``SAME_STEP`` autoreset (an ended episode restarts in the
same call) and ``info["final_obs"]``, a full ``[num_envs, ...]`` batch of what each env reached (for an ended episode
its true last observation: truncated episodes bootstrap from it, replay stores it as ``next_obs``), as GPU simulators
(ManiSkill3, Isaac Lab) and rsl_rl's ``VecEnv`` do. Backends: ``"gymnasium"`` (:mod:`~rl_lightning.envs.gymnasium_env`:
single CPU envs, with restarts, value checks and ``on_nonfinite="skip"``), ``"torch"``
(:mod:`~rl_lightning.envs.batched` or a user's :mod:`~rl_lightning.envs.torchrl_env`, on the group's device) and
``"envpool"``. On a batched backend variations are per-env parameters, drawn again where an episode ended (no host
read); statistics and the non-finite check stay on the device until :meth:`EnvGroup.pop_stats`. Optional ``info``
entries, ``[num_envs]`` tensors: ``success`` where the env reports it (an ended env's from ``final_info``; gymnasium's
``is_success`` too), read at each episode's final step (``success_at_end``) and over its steps (``success_once``);
``episode_return`` (an env's own score) and ``cut`` (episodes a fault cut short) where an episode ended; ``faults``,
counts by name. ``final_observation`` (gymnasium 0.29's name, ManiSkill3's) is read as ``final_obs``; a user's env is
refused where its tensors break the contract.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import os
from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
import torch
from tensordict import TensorDict, is_tensor_collection

from rl_lightning import checks
from rl_lightning.envs.batched import DYNAMICS, TorchVectorEnv
from rl_lightning.envs.envpool_env import EnvPoolVectorEnv, check_envpool_task
from rl_lightning.envs.gymnasium_env import WORKER_TIMEOUT, GymnasiumVectorEnv, Restarts, derive_seed
from rl_lightning.envs.object_sets import ObjectSetWrapper, UserObjSets, select_obj_set, variation_table
from rl_lightning.envs.obs import Obs, leaves
from rl_lightning.envs.torchrl_env import EnvFactory, factory_path, user_factory
from rl_lightning.envs.wrappers import WrapperSpec, check_wrappers
from rl_lightning.faults import EnvFault, NumericalFault

__all__ = ["BACKENDS", "EnvGroup", "EpisodeStats", "Step", "check_env_id", "check_env_settings", "make_env"]


VECTORIZATION = ("sync", "async")
#: What steps a group's envs (``backend=``; Hydra ``env.backend``).
BACKENDS = ("gymnasium", "torch", "envpool")


#: Packages that register their gymnasium ids when imported, by the ids' prefix (named first: ``'ale_py:ALE/Pong-v5'``).
REGISTERED_ON_IMPORT = {"ALE/": "ale_py", "MiniGrid-": "minigrid", "BabyAI-": "minigrid"}


def check_env_id(env_id: str) -> None:
    """Raise a clear error if ``env_id`` is not registered with gymnasium (``"module:id"`` imports the module, which
    registers the id, first, as ``gymnasium.make`` does)."""
    if not isinstance(env_id, str) or not env_id:
        raise TypeError(f"env_id must be a gymnasium id string such as 'CartPole-v1', got {env_id!r}.")
    module, _, name = env_id.rpartition(":")
    if module:
        try:
            importlib.import_module(module)
        except ImportError as err:
            raise ValueError(
                f"env_id '{env_id}': the module '{module}' cannot be imported ({err}). Install the package that "
                "holds it, or put its directory on PYTHONPATH."
            ) from None
    if name in gym.registry:
        return
    package = next((p for prefix, p in REGISTERED_ON_IMPORT.items() if name.startswith(prefix) and not module), None)
    hint = checks.did_you_mean(name, gym.registry, cutoff=0.8)  # close ones only: other namespaces' are rarely meant
    if package and not hint:  # a package's id without the package (not imported), which registers its ids then
        hint = f" Try env_id='{package}:{name}': '{package}' registers its ids when imported."
    where = f" The module '{module}' did not register it." if module else ""
    raise ValueError(f"Unknown environment id '{env_id}'.{hint}{where} Register a custom env with "
                     "gymnasium.register(id=..., entry_point=...) in a module of yours and name it as 'module:id' "
                     "(env_id='mypkg.envs:mypkg/Task-v0'), which imports the module first.")  # fmt: skip


def check_env_settings(
    env_id: str, num_envs: int = 1, max_episode_steps: int | None = None, backend: str = "gymnasium",
    env_factory: Any = None, vectorization: str = "sync", max_env_restarts: int = 3, obs_bound: Any = None,
    obs_bound_mode: str = "clip", on_nonfinite: str = "stop", wrappers: Sequence[Any] | None = (),
    worker_start_method: str | None = None, worker_timeout: float = WORKER_TIMEOUT,
) -> list[WrapperSpec]:  # fmt: skip
    """Refuse, naming the fix, settings an :class:`EnvGroup` cannot run, before any env is built (a backend not in
    :data:`BACKENDS`, or one that cannot run these settings: wrappers, ``obs_bound``, ``on_nonfinite="skip"`` and
    async vectorization act on single gymnasium envs); the wrapper specs as plain values."""
    if env_factory is None:  # a user's simulator need not be in gymnasium's registry
        check_env_id(env_id)
    wrappers = check_wrappers(wrappers)
    checks.check_positive_int(num_envs=num_envs)
    checks.check_positive_int(max_episode_steps=max_episode_steps, none="None")
    checks.check_one_of(VECTORIZATION, vectorization=vectorization)
    checks.check_max_env_restarts(max_env_restarts)
    checks.check_value_options(obs_bound, obs_bound_mode, on_nonfinite)
    checks.check_worker_options(worker_start_method, worker_timeout)
    checks.check_one_of(BACKENDS, " (Hydra: env.backend=gymnasium, torch or envpool)", backend=backend)
    if env_factory is not None and backend != "torch":
        raise ValueError(
            f"env_factory={factory_path(env_factory)!r} builds a batched tensor env, which backend={backend!r} does "
            "not step. Set backend='torch' (Hydra: env.backend=torch), or drop env_factory."
        )
    if backend == "gymnasium":
        return wrappers
    if backend == "envpool":
        check_envpool_task(env_id)
    if backend == "torch" and env_factory is None and env_id not in DYNAMICS:
        raise ValueError(
            f"env.backend=torch steps a batched torch env, and rl_lightning has none of {env_id!r}; it has "
            f"{sorted(DYNAMICS)}. Pick one of those, give your simulator as env_factory, or keep env.backend=gymnasium."
        )
    single_env_only = (("wrappers", wrappers, []), ("obs_bound", obs_bound, None),
                       ("on_nonfinite", on_nonfinite, "stop"), ("vectorization", vectorization, "sync"))  # fmt: skip
    for name, value, fine in single_env_only:
        if value != fine:
            raise ValueError(
                f"{name}={value!r} acts on single gymnasium envs; the {backend} backend steps one batched env "
                f"(a non-finite value stops the run there). Set env.{name}={str(fine).lower() if fine else 'null'} "
                "or keep env.backend=gymnasium."
            )
    return wrappers


def make_env(
    env_id: str, obj_set: str = "train", obj_sets: UserObjSets = None, max_episode_steps: int | None = None,
    render_mode: str | None = None, wrappers: Sequence[WrapperSpec] = (),
) -> ObjectSetWrapper:  # fmt: skip
    """One gymnasium env drawing episodes from an object set (videos and ``play`` step it), never reset by itself."""
    check_env_id(env_id)
    checks.check_positive_int(max_episode_steps=max_episode_steps, none="None")
    sets = select_obj_set(env_id, obj_sets, obj_set)
    if render_mode is not None and not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        # No display: MuJoCo renders through EGL, pygame (classic control) through SDL's dummy driver (or the user's).
        os.environ.setdefault("MUJOCO_GL", "egl")
        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
    return ObjectSetWrapper(
        sets, obj_set, max_episode_steps=max_episode_steps, render_mode=render_mode, wrappers=check_wrappers(wrappers)
    )


@dataclasses.dataclass
class Step:
    """One step of every env, tensors ``[num_envs, ...]``: ``obs`` starts the next episode where one ended;
    ``final_obs`` is what each env reached (a cut episode's last good observation); ``cut`` marks episodes cut short
    by an env fault or a skipped non-finite value (also ``truncated``, no true transition), ``None`` when none was."""

    obs: Obs
    reward: torch.Tensor
    terminated: torch.Tensor
    truncated: torch.Tensor
    final_obs: Obs
    done: torch.Tensor
    cut: torch.Tensor | None = None


@dataclasses.dataclass
class EpisodeStats:
    """Episodes completed since the last :meth:`EnvGroup.pop_stats` (success NaN where the env reports none; cut
    episodes are not entries), and the period's fault counts: env recreations and worker rebuilds, skipped
    non-finite steps or resets, observation values clipped to ``obs_bound``."""

    returns: list[float] = dataclasses.field(default_factory=list)
    lengths: list[int] = dataclasses.field(default_factory=list)
    successes: list[float] = dataclasses.field(default_factory=list)  # at the final step (success_at_end)
    successes_once: list[float] = dataclasses.field(default_factory=list)  # at any step (ManiSkill's success_once)
    envs: list[int] = dataclasses.field(default_factory=list)  # index of the env that ran it
    env_restarts: int = 0
    nonfinite_steps: int = 0
    obs_clipped: int = 0

    def __len__(self) -> int:
        return len(self.returns)


class EnvGroup:
    """A batch of ``num_envs`` environments drawing their episodes from the object set ``obj_set``, stepped as tensors.

    Args:
        env_id: Gymnasium id (or the id a user's factory builds).
        obj_sets: All object sets; ``None`` takes the shipped ones for ``env_id`` (or the env itself, with a warning).
        max_episode_steps: Time limit; ``None`` keeps the env's.
        seed: Base seed (gymnasium: env ``i`` gets ``seed + i``; batched: the batch's generators).
        device: Where a batched env lives (the gymnasium and envpool backends are on the CPU).
        backend: ``"gymnasium"``, ``"torch"`` or ``"envpool"`` (see the module).
        env_factory: With ``backend="torch"``, a user's simulator (:data:`~rl_lightning.envs.torchrl_env.EnvFactory`).
        max_env_restarts: Rebuilds in a row allowed when an env raises (the gymnasium backend recreates that env; a
            batched one is rebuilt whole with a fresh seed, its running episodes cut short, ``info["cut"]``); one more
            raises ``EnvFault`` naming the env, the call and the error. The count restarts once an episode finishes.
        vectorization, render_mode, obs_bound, obs_bound_mode, on_nonfinite, wrappers, worker_start_method,
            worker_timeout: The gymnasium backend's (:class:`~rl_lightning.envs.gymnasium_env.GymnasiumVectorEnv`).

    Raises:
        ValueError: A setting the backend cannot run, an env of another batch size or device than asked, object
            sets that vary what the env cannot (each naming the fix).
    """

    def __init__(
        self, env_id: str, num_envs: int = 1, obj_set: str = "train", obj_sets: UserObjSets = None,
        max_episode_steps: int | None = None, seed: int = 0, device: torch.device | str = "cpu",
        backend: str = "gymnasium", env_factory: EnvFactory | str | None = None, vectorization: str = "sync",
        render_mode: str | None = None, max_env_restarts: int = 3, obs_bound: float | None = None,
        obs_bound_mode: str = "clip", on_nonfinite: str = "stop", wrappers: Sequence[WrapperSpec] = (),
        worker_start_method: str | None = None, worker_timeout: float = WORKER_TIMEOUT,
    ):  # fmt: skip
        wrappers = check_env_settings(env_id, num_envs, max_episode_steps, backend, env_factory, vectorization,
                                      max_env_restarts, obs_bound, obs_bound_mode, on_nonfinite, wrappers,
                                      worker_start_method, worker_timeout)  # fmt: skip
        self.env_id, self.num_envs, self.obj_set, self.seed = env_id, num_envs, obj_set, seed
        self.obj_sets = select_obj_set(env_id, obj_sets, obj_set)
        self.label, self.max_episode_steps = f"{env_id} (object set '{obj_set}')", max_episode_steps
        # A batched env is rebuilt whole when it raises (the gymnasium backend restarts its own envs one by one).
        self._build: Any = None
        if backend == "gymnasium":
            self.env = GymnasiumVectorEnv(self.obj_sets, obj_set, num_envs, self.label, max_episode_steps,
                                          vectorization, render_mode, max_env_restarts, obs_bound, obs_bound_mode,
                                          on_nonfinite, wrappers, worker_start_method, worker_timeout)  # fmt: skip
        else:
            make = None if env_factory is None else user_factory(env_factory)

            def build(seed: int) -> Any:
                if backend == "envpool":
                    return EnvPoolVectorEnv(env_id, num_envs, seed=seed, max_episode_steps=max_episode_steps)
                if make is not None:
                    return make(env_id, num_envs, torch.device(device), seed, max_episode_steps)
                return TorchVectorEnv(env_id, num_envs, device=device, seed=seed, max_episode_steps=max_episode_steps)

            self._build, self.env = build, build(seed)
        self.rebuilds = Restarts(max_env_restarts, f"The batched {self.label}")  # a batched env that raised
        self.device = torch.device(getattr(self.env, "device", "cpu"))
        if self.env.num_envs != num_envs:
            raise ValueError(
                f"The batched {env_id} holds {self.env.num_envs} envs, but num_envs={num_envs} was asked for. Build "
                f"it with {num_envs} envs, or set num_envs={self.env.num_envs} (Hydra: env.num_envs)."
            )
        if backend == "torch" and not checks.same_device(self.device, torch.device(device)):
            raise ValueError(
                f"The batched {env_id} lives on {self.device}, but the policy trains on {torch.device(device)}. "
                f"Build the env on {device}, or train on {self.device} (Trainer(accelerator=...))."
            )
        self.observation_space, self.action_space = self.env.single_observation_space, self.env.single_action_space
        # A batched env's object set: a table of per-env parameters per variation, drawn per episode.
        # The gymnasium backend draws in each env, and checks every value in numpy already.
        self._checked = backend == "gymnasium"
        params, where = getattr(self.env, "params", {}), f"object set '{obj_set}'"
        self._table = {} if self._checked else variation_table(self.obj_sets[obj_set], env_id, params, where)
        self._num_variations = len(self.obj_sets[obj_set])
        self.generator = torch.Generator(device=self.device).manual_seed(seed)
        self.variation = torch.zeros(num_envs, dtype=torch.int64, device=self.device)
        space, self._bounds = self.action_space, None
        self._action_shape = torch.Size((num_envs, *space.shape)) if space.shape is not None else None
        if isinstance(space, gym.spaces.Box):
            self._bounds = [torch.as_tensor(b, device=self.device) for b in (space.low, space.high)]
        start = getattr(space, "start", None)
        shifted = start is not None and bool((start != 0).any())
        self._start = torch.as_tensor(start, device=self.device) if shifted else None
        self.obs: Obs | None = None
        self._step_checked = False  # against the contract once, at the first step after a reset: not every step
        self._clear_episodes()
        self.stats = EpisodeStats()

    def env_action(self, action: torch.Tensor) -> torch.Tensor:
        """Policy actions as the env takes them, on its device: ``Box`` actions clipped to the bounds, indices of
        ``Discrete`` and ``MultiDiscrete`` shifted by ``start`` (the policy's count from 0)."""
        action = torch.as_tensor(action, device=self.device)  # a tensor on any device, or an array
        shape = self._action_shape
        if (shape is not None and action.shape != shape) or (self._bounds is None and action.is_floating_point()):
            # A caller's mistake: refused before the env sees it (EnvPool aborts the process on a short batch).
            raise ValueError(f"{self.label} takes {'' if self._bounds is not None else 'integer '}actions of shape "
                             f"{tuple(shape or ())} (num_envs, *action shape); got {action.dtype} "
                             f"{tuple(action.shape)}.")  # fmt: skip
        if self._bounds is not None:
            return torch.clamp(action, *self._bounds)
        return action if self._start is None else action + self._start

    def _clear_episodes(self) -> None:
        # The running episodes' return, length, and counts of successful and success-reporting steps before the steps
        # logged since the last pop_stats.
        self._ep_return = torch.zeros(self.num_envs, dtype=torch.float64, device=self.device)
        self._ep_length = torch.zeros(self.num_envs, dtype=torch.int64, device=self.device)
        self._ep_hits = torch.zeros(2, self.num_envs, dtype=torch.float64, device=self.device)
        self._log: list[tuple] = []  # per step: reward, done, counted, success, episode_return (read at pop_stats)
        # The sum of every observation and reward seen: non-finite exactly where one of them was (IEEE 754),
        # so one addition per step checks them without a host read.
        self._checksum = torch.zeros((), dtype=torch.float64, device=self.device)

    def _draw_variations(self, where: torch.Tensor | None) -> None:
        """Draw a variation for the envs ``where`` (all: ``None``) and write their parameters."""
        if not self._table:
            return
        drawn = torch.randint(self._num_variations, (self.num_envs,), generator=self.generator, device=self.device)
        self.variation = drawn if where is None else torch.where(where, drawn, self.variation)
        self.env.set_params(**{name: values[self.variation] for name, values in self._table.items()})

    def _check(self, obs: Obs, reward: torch.Tensor | None = None, final_obs: Obs = None) -> None:
        if not self._checked:  # final observations too: a NaN an episode ended on is bootstrapped from
            finals = [] if final_obs is None or final_obs is obs else leaves(final_obs)
            for value in [*leaves(obs), reward, *finals]:
                if value is not None and value.is_floating_point():
                    self._checksum += value.sum(dtype=torch.float64)  # float16 sums overflow at 65504

    def _contract(self, what: str, value: Any, shape: tuple[int, ...], dtype: torch.dtype | None = None) -> None:
        """Refuse ``value`` (``what`` the env returned: ``"rewards"``) unless a tensor of ``shape`` (and ``dtype``)."""
        if not (torch.is_tensor(value) and tuple(value.shape) == shape and dtype in (None, value.dtype)):
            got = (
                f"{type(value).__name__} of shape {tuple(getattr(value, 'shape', ()))} ({getattr(value, 'dtype', '-')})"
            )
            raise ValueError(f"The batched {self.label} returned {what} as {got}; the env contract asks for a torch "
                             f"tensor of shape {shape}{f' ({dtype})' if dtype else ''} on {self.device}. Fix the env "
                             "(its env_factory).")  # fmt: skip

    def _add_faults(self, info: Mapping[str, Any]) -> None:
        for key, count in (info.get("faults") or {}).items():
            setattr(self.stats, key, getattr(self.stats, key) + int(count))

    def reset(self, seed: int | None = None) -> Obs:
        """Start every env's episode afresh (from ``seed``; the group's own by default); observations on the device."""
        seed = self.seed if seed is None else seed
        self.generator.manual_seed(seed)
        self._draw_variations(None)
        try:
            obs, info = self.env.reset(seed=seed)
        except Exception as err:
            obs, info = self._rebuilt(err, "reset"), {}
        self._add_faults(info)
        self._clear_episodes()
        if isinstance(self.observation_space, gym.spaces.Box):
            self._contract("observations", obs, (self.num_envs, *self.observation_space.shape))
        self.obs, self._step_checked = _batch(obs, self.num_envs, self.device), False
        self._check(self.obs)
        return self.obs

    def step(self, action: torch.Tensor) -> Step:
        """Step every env with the policy's ``action`` ``[num_envs, ...]``; ended episodes restart within the step."""
        action = self.env_action(action)  # a malformed action raises here, not taken for an env fault
        try:
            obs, reward, terminated, truncated, info = self.env.step(action)
        except Exception as err:
            return self._restarted_step(err)
        if not self._step_checked:  # integer dones would negate to 254 and 255 in GAE: refused, as rewards of a shape
            self._contract("rewards", reward, (self.num_envs,))
            for what, done in (("terminated", terminated), ("truncated", truncated)):
                self._contract(what, done, (self.num_envs,), torch.bool)
            self._step_checked = True
        obs, done, reward = _batch(obs, self.num_envs, self.device), terminated | truncated, reward.float()
        # gymnasium 1's name, or 0.29's (ManiSkill3's ManiSkillVectorEnv); absent where no episode ended.
        final_obs = info.get("final_obs", info.get("final_observation"))
        if final_obs is None and bool(done.any()):
            raise ValueError(f"The batched {self.label} ended episodes without info['final_obs'] (what each env "
                             "reached: the contract's SAME_STEP autoreset). Return it from the env.")  # fmt: skip
        final_obs, cut = obs if final_obs is None else _batch(final_obs, self.num_envs, self.device), info.get("cut")
        self._check(obs, reward, final_obs)
        self._add_faults(info)
        ended = (info.get("final_info") or {}).get("success")  # an ended env's own, not its next episode's first
        if (success := info.get("success")) is not None or ended is not None:
            success = torch.as_tensor(float("nan") if success is None else success, device=self.device).float()
            if ended is not None:
                success = torch.where(done, torch.as_tensor(ended, device=self.device).float(), success)
        self._log.append((reward, done, done if cut is None else done & ~cut, success, info.get("episode_return")))
        self._draw_variations(done)  # the next episodes' variations, from their first step on
        self.obs = obs
        return Step(obs, reward, terminated, truncated, final_obs, done, cut)

    def _rebuilt(self, err: Exception, call: str) -> Obs:
        """Rebuild the batched env that raised ``err`` in ``call`` and reset it; its first observations.

        Raises:
            EnvFault: Past ``max_env_restarts`` rebuilds in a row (at once with 0), naming the env, the call and
                the error; any exception where the env cannot be rebuilt (the gymnasium backend's own).
        """
        if self._build is None or isinstance(err, EnvFault):
            raise err
        while True:
            seed = derive_seed(self.seed, self.rebuilds.failed(err, call, action="rebuilding it"))
            with contextlib.suppress(Exception):  # the env is broken; its close may be too
                self.env.close()
            try:
                self.env = self._build(seed)
                self.generator.manual_seed(seed)
                self._draw_variations(None)
                obs, _ = self.env.reset(seed=seed)
                self.stats.env_restarts += 1
                return obs
            except Exception as again:  # a rebuild that fails is one more failure in a row
                err, call = again, "rebuild"

    def _restarted_step(self, err: Exception) -> Step:
        """The step of a batched env that raised: rebuilt (:meth:`_rebuilt`), every episode ends where it was, cut
        short (truncated, reward 0, ``final_obs`` the last observation, not counted), and starts afresh."""
        if self.obs is None:  # stepped before any reset: a caller's mistake, not a fault (as RestartingEnv)
            raise err
        last, n = self.obs, self.num_envs
        obs = _batch(self._rebuilt(err, "step"), n, self.device)
        self._check(obs)
        reward = torch.zeros(n, device=self.device)
        ended = torch.ones(n, dtype=torch.bool, device=self.device)
        going_on = torch.zeros_like(ended)
        self._log.append((reward, ended, going_on, None, None))
        self.obs = obs
        return Step(obs, reward, going_on, ended, last, ended, ended)

    def pop_stats(self) -> EpisodeStats:
        """The episodes that ended since the last call (read to the host at once) and the fault counts; cleared. An
        episode's return is the cumulative reward at its end less that at its env's previous end (or the running
        episode's return carried over), for every env at once. A non-finite value since then raises NumericalFault."""
        stats, self.stats = self.stats, EpisodeStats()
        if self._log:
            nan = torch.full((self.num_envs,), float("nan"), device=self.device)  # where a step reports nothing
            log = (torch.stack([nan if v is None else v for v in column]) for column in zip(*self._log, strict=True))
            reward, done, counted, success, scored = log  # each [T, N]
            self._log = []
            T = reward.shape[0]
            envs, steps = done.T.nonzero(as_tuple=True)  # each env's episode ends, in time order
            first = torch.ones_like(envs, dtype=torch.bool)
            first[1:] = envs[1:] != envs[:-1]  # the env's first end since the last call
            time = torch.arange(T, device=self.device)[:, None].expand_as(done)
            last = torch.where(done, time, -1).max(0).values
            ended, all_envs = last >= 0, torch.arange(self.num_envs, device=self.device)

            def per_episode(cumulative: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
                """Sums ``[..., T, N]`` running from the last call (the running episodes' included) -> each ended
                episode's sum, and what the running episodes carry on with from their env's last end."""
                ends = cumulative[..., steps, envs]
                start = cumulative[..., last.clamp(min=0), all_envs]
                return ends - torch.where(first, 0.0, ends.roll(1, -1)), cumulative[..., -1, :] - ended * start

            returns, self._ep_return = per_episode(self._ep_return + reward.double().cumsum(0))
            lengths = steps - torch.where(first, -1 - self._ep_length[envs], steps.roll(1))
            self._ep_length = torch.where(ended, T - 1 - last, self._ep_length + T)
            # success_once: any successful step in the episode, NaN where none of its steps reported success.
            hits = torch.stack([success > 0.5, ~success.isnan()]).double()  # NaN > 0.5 is false
            (hit, graded), self._ep_hits = per_episode(self._ep_hits[:, None] + hits.cumsum(1))
            once = torch.where(graded > 0, (hit > 0).double(), float("nan"))
            keep = counted[steps, envs]  # episodes cut short by a fault are not entries
            order = (steps * self.num_envs + envs)[keep].argsort()  # step order, each env's first episodes first
            scored = scored[steps, envs].double()
            returns = torch.where(scored.isnan(), returns, scored)  # the env's own score where it reports one
            entries = (x[keep][order].tolist() for x in (returns, lengths, success[steps, envs], once, envs))
            stats.returns, stats.lengths, stats.successes, stats.successes_once, stats.envs = entries
            if stats.returns:
                self.rebuilds.worked()
        if not bool(self._checksum.isfinite()):
            self._checksum.zero_()
            raise NumericalFault(
                f"{self.label} returned a non-finite observation or reward since the last collection. A batched env "
                "stops on them (on_nonfinite='skip' needs the gymnasium backend); fix the simulation or bound its "
                "state."
            )
        return stats

    def close(self) -> None:
        """Close the envs."""
        self.env.close()


def _batch(obs: Obs, num_envs: int, device: torch.device) -> Obs:
    """A mapping of tensors as a ``TensorDict`` ``[num_envs]`` on ``device``; float64 (EnvPool's MuJoCo) in float32."""
    if isinstance(obs, Mapping) and not is_tensor_collection(obs):
        return TensorDict(dict(obs), batch_size=[num_envs], device=device)
    return obs.float() if obs.dtype == torch.float64 else obs
