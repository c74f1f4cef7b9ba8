"""PPO throughput against rsl_rl (the PPO Isaac Lab trains with) on 1024 batched torch Pendulums, same settings.

rsl_rl (``pip install rsl-rl-lib``, ETH Zurich's Robotic Systems Lab, version 5.5) is the
on-policy library of Isaac Lab's locomotion and manipulation tasks: its ``OnPolicyRunner``
steps a ``VecEnv`` of device tensors, keeps the rollout in a ``RolloutStorage`` on the same
device and runs PPO on it. Both contenders here step the same environment,
``rl_lightning.envs.TorchVectorEnv("Pendulum-v1", 1024)`` (1024 pendulums as torch tensors,
``SAME_STEP`` autoreset, the 200-step time limit truncates, nothing terminates): ours through
``RolloutDataModule(backend="torch")``, rsl_rl's through :class:`RslRlVecEnv`, an adapter that
speaks rsl_rl's ``VecEnv`` (``rsl_rl/env/vec_env.py``) as Isaac Lab's ``RslRlVecEnvWrapper``
does (``isaaclab_rl/rsl_rl/vecenv_wrapper.py``'s ``RslRlVecEnvWrapper.step``): observations in a
``TensorDict`` with the group ``"policy"`` (both networks read it), ``dones`` = terminated or
truncated as int64, ``extras["time_outs"]`` for rsl_rl's time-out bootstrap.

The timed call is ``Trainer.fit`` (ours) and ``OnPolicyRunner.learn`` (rsl_rl's), for the same
number of rollouts of ``num_envs x 24`` env steps, with the envs built and reset before the
clock starts, no evaluation, no logging (``logger=False``; rsl_rl's runner with
``log_dir=None``, which turns its writer and console log off) and no checkpoints. Contenders
alternate within every repeat (``benchmarks/run.py``'s ``alternate``).

Settings, the same on both sides: rsl_rl's PPO as Isaac Lab's locomotion presets set it
(``anymal_c/agents/rsl_rl_ppo_cfg.py``'s ``AnymalCRoughPPORunnerCfg``: 24 steps per env and rollout, 5 learning
epochs of 4 mini-batches, clip 0.2 for the ratio and the value, clipped value loss, gamma
0.99, lambda 0.95, max grad norm 1.0, entropy coefficient 0.005, value-loss coefficient 1.0,
learning rate 1e-3), but

- a fixed learning rate: rsl_rl ``schedule="fixed"`` (no KL-adaptive rate), ours
  ``anneal_lr=False``;
- networks of 64x64 tanh for the actor and the critic, separate, a Gaussian with a
  state-independent log standard deviation starting at 0 (rsl_rl ``GaussianDistribution(
  init_std=1.0, std_type="log")``, ours ``init_log_std=0.0``);
- no observation normalization (rsl_rl ``obs_normalization=False``, ours ``normalize_obs=False``);
- advantages normalized per mini-batch (rsl_rl ``normalize_advantage_per_mini_batch=True``,
  its default normalizes once per rollout in ``PPO.compute_returns``; ours ``norm_adv=True``,
  which is per minibatch), both as ``(A - mean) / (std + 1e-8)``;
- equal value losses: rsl_rl's is ``value_loss_coef * max(clipped, unclipped squared error).mean()``
  (``PPO.update``), ours CleanRL's ``vf_coef * 0.5 * max(...).mean()``
  (``rl_lightning/algos/ppo_loss.py``), so ours runs at ``vf_coef = 2 * value_loss_coef = 2.0``.

What differs and stays (written into one library's code, or a default kept as shipped; none
changes the work per step or per update much, except where said):

- truncation: rsl_rl bootstraps a time-out by adding ``gamma * V(s_t)`` of the step's own
  observation to its reward and ends the GAE recursion there (``PPO.process_env_step``); ours
  bootstraps from ``V`` of the true final observation (``info["final_obs"]``), one more critic
  pass over the cut envs in the rollout that holds a time-out (``rl_lightning/data/rollout.py``);
- gradient clipping: rsl_rl clips the actor's and the critic's gradients each to norm 1.0,
  ours clips their joint norm to 1.0;
- Adam's epsilon: rsl_rl torch's 1e-8, ours CleanRL's 1e-5;
- initialization: rsl_rl's ``MLPModel`` keeps torch's default (Kaiming-uniform) layers, ours is
  orthogonal (gain sqrt 2, 0.01 on the actor's last layer, 1 on the critic's);
- shuffling: rsl_rl draws one permutation per rollout and reuses it in every epoch
  (``RolloutStorage.mini_batch_generator``), ours draws one per epoch;
- checks: rsl_rl's runner checks every step's observations, rewards and dones for NaN (its
  default ``check_for_nan``: three host reads per step), ours checks the loss and gradients of
  every update (``on_nonfinite="stop"``) and keeps the env's non-finite count on the device.

These change what is learned more than the work: at 50 rollouts (1.2M env steps, seeds 0-2)
ours ended near -1070 and rsl_rl near -720 (mean episode return); ours with rsl_rl's clipping
per network, Adam's 1e-8 and torch's default layers (a subclass, not shipped; seeds 0-1) ended
at -780 and -704, so those three account for the gap (per-network clipping alone: -912, -927).

Besides env-steps/s, each run reports the mean return of the last episodes its envs finished
(all 1024 envs start together and are cut together every 200 steps, so these are the 1024
episodes that ended at the last multiple of 200 steps): a check that both learn the same task,
not a learning comparison (one seed per repeat, 1.2M env steps by default). The adapter
keeps it with three elementwise tensor operations per step; ours reads the episode statistics
its env group keeps anyway.

Usage::

    python -m benchmarks.rsl_rl_ppo                     # 3 repeats of 50 rollouts (about 2 minutes on 2 cores)
    python -m benchmarks.rsl_rl_ppo --quick             # 1 repeat, 2 rollouts: a smoke run
    python -m benchmarks.rsl_rl_ppo --threads 1         # what benchmarks/run.py sets; see below
    python -m benchmarks.rsl_rl_ppo --device cuda       # on a GPU

On a shared 2-core machine, two torch threads per process (torch's default there) make rollouts
of 0.3 s take 4 to 9 s whenever another process takes a core (the threads wait on each other);
one thread ran within 0.3 to 0.5 s under the same load, and is what the figures in
``benchmarks/README.md`` use.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import math
import time

import lightning.pytorch as pl
import torch

from benchmarks.run import alternate, finish, machine, paired, summarize, table
from benchmarks.throughput import bare_trainer, timed_fit, timed_rollout_data


@dataclasses.dataclass(frozen=True)
class Settings:
    """One PPO configuration, in rsl_rl's terms (``PPO.__init__``'s names); :func:`ours` translates it."""

    env_id: str = "Pendulum-v1"
    num_envs: int = 1024
    num_steps_per_env: int = 24
    num_learning_epochs: int = 5
    num_mini_batches: int = 4
    clip_param: float = 0.2
    gamma: float = 0.99
    lam: float = 0.95
    value_loss_coef: float = 1.0
    entropy_coef: float = 0.005
    learning_rate: float = 1e-3
    max_grad_norm: float = 1.0
    hidden_dims: tuple[int, ...] = (64, 64)
    init_std: float = 1.0


SETTINGS = Settings()


class RslRlVecEnv:
    """``TorchVectorEnv`` as rsl_rl's ``VecEnv`` (``rsl_rl/env/vec_env.py``), the way Isaac Lab's wrapper presents it.

    ``step`` returns ``(obs, rewards, dones, extras)``: ``obs`` a ``TensorDict`` holding the one
    observation group ``"policy"`` (rsl_rl's ``resolve_obs_groups`` gives it to the actor and the
    critic), ``dones`` (int64, terminated or truncated), and ``extras["time_outs"]`` where the
    time limit cut an episode that did not terminate (``PPO.process_env_step`` bootstraps
    those). The env resets once, here, before any clock starts.

    Duck-typed: the runner checks no type, and subclassing rsl_rl's abstract ``VecEnv`` would make
    importing this module need rsl_rl.

    Args:
        env: The batched env (``SAME_STEP`` autoreset).
        seed: Seed of its first reset.

    Attributes:
        env_steps: Env steps taken (``num_envs`` per ``step``).
        last_return: Per env, the return of its last finished episode (NaN before one ends).
    """

    def __init__(self, env, seed: int):
        from tensordict import TensorDict

        self._tensordict = TensorDict
        self.env = env
        self.num_envs = env.num_envs
        self.num_actions = int(env.single_action_space.shape[0])  # rsl_rl's PPO acts in continuous spaces only
        self.max_episode_length = env.max_episode_steps
        self.device = env.device
        self.cfg: dict = {}
        obs, _ = env.reset(seed=seed)
        self._obs = obs
        self.env_steps = 0
        self._return = torch.zeros(env.num_envs, device=env.device)
        self.last_return = torch.full((env.num_envs,), math.nan, device=env.device)

    @property
    def episode_length_buf(self) -> torch.Tensor:
        """Steps into each env's episode (the env's ``elapsed``; ``learn(init_at_random_ep_len=True)`` writes it)."""
        return self.env.elapsed

    @episode_length_buf.setter
    def episode_length_buf(self, value: torch.Tensor) -> None:
        self.env.elapsed = value.to(self.env.elapsed)

    def get_observations(self):
        """The current observations as rsl_rl's ``TensorDict`` of observation groups."""
        return self._tensordict({"policy": self._obs}, batch_size=[self.num_envs])

    def step(self, actions: torch.Tensor):
        """One batched step: ``(obs, rewards, dones, extras)`` as ``VecEnv.step`` documents them."""
        obs, reward, terminated, truncated, _ = self.env.step(actions)
        done = terminated | truncated
        # The return bookkeeping (rsl_rl's Logger keeps the same sums when logging is on, with a host read per step).
        self._return += reward
        self.last_return = torch.where(done, self._return, self.last_return)
        self._return = torch.where(done, 0.0, self._return)
        self._obs = obs
        self.env_steps += self.num_envs
        # Isaac Lab's wrapper passes `truncated` whole; a step that also terminated is terminal (the same here).
        extras = {"time_outs": truncated & ~terminated}
        return self.get_observations(), reward, done.long(), extras

    def close(self) -> None:
        self.env.close()


def rsl_rl_config(s: Settings) -> dict:
    """The ``train_cfg`` dict of rsl_rl 5's ``OnPolicyRunner`` for ``s`` (``PPO.construct_algorithm`` reads it)."""
    network = {"class_name": "MLPModel", "hidden_dims": list(s.hidden_dims), "activation": "tanh",
               "obs_normalization": False}  # fmt: skip
    # A state-independent std held as its log, as ours (rl_lightning/nets/actor_critic.py's log_std).
    gaussian = {"class_name": "GaussianDistribution", "init_std": s.init_std, "std_type": "log"}
    return {
        "num_steps_per_env": s.num_steps_per_env,
        "save_interval": 10**9,  # no checkpoints (none are written anyway without a log_dir)
        "obs_groups": {"actor": ["policy"], "critic": ["policy"]},
        "algorithm": {
            "class_name": "PPO",
            "num_learning_epochs": s.num_learning_epochs,
            "num_mini_batches": s.num_mini_batches,
            "clip_param": s.clip_param,
            "gamma": s.gamma,
            "lam": s.lam,
            "value_loss_coef": s.value_loss_coef,
            "entropy_coef": s.entropy_coef,
            "learning_rate": s.learning_rate,
            "max_grad_norm": s.max_grad_norm,
            "use_clipped_value_loss": True,
            "schedule": "fixed",
            "normalize_advantage_per_mini_batch": True,
        },
        "actor": {**network, "distribution_cfg": gaussian},
        "critic": network,
    }


def rsl_rl(s: Settings, iterations: int, seed: int, device: str = "cpu") -> dict[str, float]:
    """rsl_rl's ``OnPolicyRunner.learn`` for ``iterations`` rollouts on the batched torch env of ``s.env_id``."""
    from rsl_rl.runners import OnPolicyRunner

    from rl_lightning.envs import TorchVectorEnv

    torch.manual_seed(seed)  # rsl_rl seeds nothing itself (Isaac Lab's train.py seeds the env and torch)
    env = RslRlVecEnv(TorchVectorEnv(s.env_id, s.num_envs, device=device, seed=seed), seed)
    with contextlib.redirect_stdout(io.StringIO()):  # construct_algorithm prints both models
        runner = OnPolicyRunner(env, rsl_rl_config(s), log_dir=None, device=device)
    _sync(device)
    start = time.perf_counter()
    runner.learn(iterations)
    _sync(device)
    seconds = time.perf_counter() - start
    env.close()
    return {
        "env_steps": env.env_steps,
        "gradient_steps": iterations * s.num_learning_epochs * s.num_mini_batches,
        "seconds": seconds,
        "env_steps_per_second": env.env_steps / seconds,
        "final_return": _mean_finite(env.last_return),
    }


class LastReturns(pl.Callback):
    """Keeps the returns of the episodes that ended in the latest rollout that ended any (read once per epoch)."""

    def __init__(self):
        self.returns: list[float] = []

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        collection = trainer.datamodule.last_collection
        if collection is not None and collection.episodes.returns:
            self.returns = list(collection.episodes.returns)


def ours(s: Settings, iterations: int, seed: int, device: str = "cpu", **extra) -> dict[str, float]:
    """rl_lightning's PPO through ``Trainer.fit`` on the batched torch env of ``s.env_id``; ``extra``: more of
    ``PPO``'s arguments (``compile=True``)."""
    from rl_lightning import PPO

    pl.seed_everything(seed, verbose=False)
    data = timed_rollout_data(s.env_id, s.num_envs, s.num_steps_per_env, seed, backend="torch")
    model = PPO(
        lr=s.learning_rate,
        anneal_lr=False,
        gamma=s.gamma,
        gae_lambda=s.lam,
        update_epochs=s.num_learning_epochs,
        num_minibatches=s.num_mini_batches,
        clip_coef=s.clip_param,
        clip_vloss=True,
        ent_coef=s.entropy_coef,
        vf_coef=2 * s.value_loss_coef,  # ours is vf_coef * 0.5 * MSE, rsl_rl's value_loss_coef * MSE
        max_grad_norm=s.max_grad_norm,
        norm_adv=True,
        hidden_sizes=s.hidden_dims,
        normalize_obs=False,
        init_log_std=math.log(s.init_std),
        total_timesteps=iterations * s.num_steps_per_env * s.num_envs,
        **extra,
    )
    returns = LastReturns()
    trainer = bare_trainer(callbacks=[returns], accelerator="gpu" if device.startswith("cuda") else "cpu", devices=1)
    if device == "cpu":
        data.setup("fit")  # envs built before the clock starts, as rsl_rl's (on a GPU the trainer places them)
    result = timed_fit(trainer, model, data)
    return result | {"final_return": sum(returns.returns) / len(returns.returns) if returns.returns else None}


def _mean_finite(x: torch.Tensor) -> float | None:
    x = x[x.isfinite()]
    return float(x.mean()) if x.numel() else None


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--iterations", type=int, default=50, help="rollouts (learning iterations) per run")
    parser.add_argument("--num-envs", type=int, default=SETTINGS.num_envs)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads(), help="torch intra-op threads")
    parser.add_argument("--quick", action="store_true", help="1 repeat of 2 rollouts: a smoke run")
    parser.add_argument("--json", help="also write the figures here")
    parser.add_argument(
        "--compile", action="store_true", help="also ours with PPO(compile=True) (its compile time inside the fit)"
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.repeats, args.iterations = 1, 2
    torch.set_num_threads(args.threads)
    s = dataclasses.replace(SETTINGS, num_envs=args.num_envs)
    env_steps = args.iterations * s.num_steps_per_env * s.num_envs
    info = machine()
    from importlib import metadata

    info["versions"]["rsl_rl_lib"] = metadata.version("rsl-rl-lib")
    print(f"rsl_rl_ppo: {s.num_envs} envs on {args.device}, {args.iterations} rollouts ({env_steps} env steps) per "
          f"run, {args.threads} torch thread(s); {info}", flush=True)  # fmt: skip
    report: dict = {"machine": info, "settings": dataclasses.asdict(s), "iterations": args.iterations,
                    "env_steps": env_steps, "device": args.device, "threads": args.threads}  # fmt: skip
    contenders = {
        "rl_lightning": lambda seed: ours(s, args.iterations, seed, args.device),
        "rsl_rl": lambda seed: rsl_rl(s, args.iterations, seed, args.device),
    }
    if args.compile:
        contenders["rl_lightning_compile"] = lambda seed: ours(s, args.iterations, seed, args.device, compile=True)
    results = alternate(contenders, args.repeats)
    summary = summarize(results, "env_steps_per_second")
    ratio = summary["rl_lightning"]["median"] / summary["rsl_rl"]["median"]
    report |= {"runs": results, "env_steps_per_second": summary, "ratio_of_medians": ratio}
    returns = summarize(results, "final_return")
    report["final_return"] = returns
    lines = [
        f"### PPO, batched torch {s.env_id}, {s.num_envs} envs x {s.num_steps_per_env} steps on {args.device}, "
        f"against rsl_rl ({args.iterations} rollouts = {env_steps} env steps per run, {args.repeats} alternating "
        f"repeats, {args.threads} thread(s))",
        table("PPO", summary, "env-steps/s", ["rsl_rl"]),
        "",
        *(paired(results, "env_steps_per_second", name, "rsl_rl") for name in results if name != "rsl_rl"),
    ]
    if returns:
        shown = "; ".join(f"{name} {r['median']:.0f} ({r['min']:.0f} to {r['max']:.0f})" for name, r in returns.items())
        lines += ["", f"Mean return of the last episodes each run finished (median, range): {shown}."]
    return finish(lines, report, args.json)


if __name__ == "__main__":
    main()
