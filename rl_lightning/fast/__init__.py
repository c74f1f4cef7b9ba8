"""The fast path: every speed shortcut of the library, behind one switch and one seam.

The library's reference path is plain public torch, Lightning and gymnasium; each shortcut
below replaces one piece of it where that gives the same result faster, and is held
against the plain piece by the tests in ``tests/fast/``. Core modules call only the
functions this module exports (one narrow seam each); each returns ``None`` or ``False``
where the plain path must run. ``RL_LIGHTNING_FAST=0`` (or :func:`set_enabled`,
:func:`disabled`) turns every one off; shortcuts into a package's private APIs also stay off
outside the versions they were written against (:data:`~rl_lightning.fast.switch.WRITTEN_AGAINST`).
What each buys is measured in ``docs/fast_path.md``, with the command that measures it.

Each row: the seam (module) -- what it replaces, called from; when it falls back to the plain path.

- :func:`ppo_minibatch_loss` (``ppo.py``) -- ``policy.evaluate_actions`` + ``algos/ppo_loss.ppo_loss``
  through autograd, from ``algos/ppo_loss.minibatch_loss``; networks other than the default tanh
  MLPs, a module or global hook, autocast.
- :func:`sac_objective` (``sac.py``) -- the actor's layers, the squashed-Gaussian sample and the
  three SAC losses through autograd, from ``algos/sac_loss.sac_objective``; networks other than the
  default ReLU MLPs (an encoder, a hook), non-float32 tensors, autocast.
- :func:`backward` (``lightning.py``) -- ``LightningModule.manual_backward`` (hook dispatch, then
  autograd's engine), from ``RLModule.manual_backward``; unless :func:`plain_calls` allowed it at
  fit start; the engine still runs for a tensor or post-accumulate hook, anomaly mode, inputs
  needing a gradient.
- :func:`optimizer_step` (``lightning.py``) -- ``LightningOptimizer.step`` (strategy, precision
  plugin, closure), from ``RLModule.step_optimizer``; another strategy or precision, a hook
  override, automatic optimization, Fabric.
- :func:`fused_adam` (``adam.py``) -- ``torch.optim.Adam``'s ``Optimizer.step`` wrapping, from
  ``algos/update.adam``; hooks, a profiler, a closure, the first step, AMSGrad and the other
  options, mixed devices or dtypes.
- :func:`clear_grads`, :func:`total_norm`, :func:`scale_to_norm`, :func:`polyak` (``grads.py``) --
  ``zero_grad``, ``get_total_norm``, ``clip_grads_with_norm_``, a ``lerp_`` loop, from
  ``algos/update.py`` and ``algos/sac.py``; several devices or dtypes.
- :func:`ensemble_forward`, :func:`ensemble_min` (``mlp_grad.py``) -- ``QEnsemble``'s layers
  through autograd, from ``nets/sac.py``; a forward or backward hook, the layers' own or global.
- :func:`explore` (``numpy_actor.py``) -- ``ActorCritic``'s torch forward per env step, from
  ``ActorCritic.explore``; gradients on, not CPU float32, another actor or normalizer class,
  hooks, a parametrization, large layers.
- :func:`channels_last` (``conv.py``) -- the CNN's NCHW image batches, from
  ``nets/encoders.MultiInputEncoder``; no gradients recorded, batches under 32, not the CPU.
- :func:`sync_vector_env` (``vector_env.py``) -- gymnasium's ``SyncVectorEnv.step``, from
  ``envs/restart.py``; non-array spaces or actions.
- :class:`FlushDenormals` (``denormals.py``) -- torch's default CPU float handling (denormal
  numbers computed in full, slowly), from ``RLModule.configure_callbacks``; the fast path off, a
  CPU without the flags, a thread that flushes already.
- :func:`sample_batch`, :func:`store_transitions` (``replay.py``) -- ``TensorDictReplayBuffer``'s
  ``sample`` / ``extend``, from ``data/replay.py``; a prioritized sampler, transforms, ``dim_extend``.
"""

from rl_lightning.fast.adam import fused_adam
from rl_lightning.fast.conv import channels_last
from rl_lightning.fast.denormals import FlushDenormals
from rl_lightning.fast.grads import clear_grads, polyak, scale_to_norm, total_norm
from rl_lightning.fast.lightning import PlainCalls, backward, optimizer_step, plain_calls
from rl_lightning.fast.mlp_grad import ensemble_forward, ensemble_min
from rl_lightning.fast.numpy_actor import explore
from rl_lightning.fast.ppo import minibatch_loss as ppo_minibatch_loss
from rl_lightning.fast.replay import sample_batch, store_transitions
from rl_lightning.fast.sac import objective as sac_objective
from rl_lightning.fast.switch import ENV_VAR, disabled, enabled, set_enabled
from rl_lightning.fast.vector_env import sync_vector_env

__all__ = [
    "ENV_VAR",
    "FlushDenormals",
    "PlainCalls",
    "backward",
    "channels_last",
    "clear_grads",
    "disabled",
    "enabled",
    "ensemble_forward",
    "ensemble_min",
    "explore",
    "fused_adam",
    "optimizer_step",
    "plain_calls",
    "polyak",
    "ppo_minibatch_loss",
    "sac_objective",
    "sample_batch",
    "scale_to_norm",
    "set_enabled",
    "store_transitions",
    "sync_vector_env",
    "total_norm",
]
