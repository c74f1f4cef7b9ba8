"""The acting actor in numpy: ``ActorCritic.explore``'s forward pass and discrete sample on views of its CPU parameters.

Why: a rollout asks the actor for actions once per env step, on a handful of observations
(CleanRL's CartPole: 4 rows through 4x64x64x2). There the cost is per call, not arithmetic:
a torch op costs several microseconds to dispatch, numpy's matmul on such arrays and its
ufuncs less, and views that share memory with the parameters see every in-place update
(optimizer steps, ``load_state_dict``, an acting copy's sync) without a copy. :func:`explore`
is the seam ``ActorCritic.explore`` calls; ``python -m benchmarks.acting`` measures it
(``docs/fast_path.md``).

It takes exactly the layouts :func:`~rl_lightning.nets.mlp.mlp` builds (``nn.Sequential`` of
``nn.Linear`` with ``nn.Tanh`` or ``nn.ReLU``), float32 on the CPU, and only while nothing
could make torch's forward differ: no forward hooks (the module's, its layers' or global
ones), no parametrization (it changes a layer's class). Anything else returns ``None`` and
the caller takes torch's forward.
"""

from __future__ import annotations

import weakref

import numpy as np
import torch
from torch import nn
from torch.nn.modules import module as _module

from rl_lightning.fast.switch import is_class, on_for

#: Activations mirrored, by exact class (a subclass may change ``forward``).
_ACTIVATIONS = {nn.Tanh: np.tanh, nn.ReLU: lambda x, out: np.maximum(x, 0.0, out=out)}

#: Multiply-adds per layer (rows x in x out) up to which the numpy pass is taken: 32 rows through
#: a 64x64 layer. Beyond, the arithmetic outweighs torch's dispatch, and numpy's BLAS
#: (OpenBLAS) would start splitting a product over threads ``torch.set_num_threads`` does not govern.
MAX_LAYER_SIZE = 2**17


def _plain(module: nn.Module) -> bool:
    """No forward hooks, and still a class mirrored (a parametrization swaps the class in)."""
    if module._forward_hooks or module._forward_pre_hooks:
        return False
    kind = type(module)
    return kind is nn.Linear or kind in _ACTIVATIONS


class NumpyMLP:
    """Evaluates ``net`` in numpy, or says it cannot (``None``) so the caller uses torch.

    Args:
        net: The network to mirror. Its layout, hooks, devices and dtypes are checked on every
            call (any of them can change between calls); the numpy views are rebuilt when a
            layer holds another parameter (``load_state_dict(assign=True)``, a new
            ``nn.Parameter``) or a parameter another storage (``.to()``, ``param.data = ...``).
    """

    def __init__(self, net: nn.Module):
        self.net = net
        self._modules: list[nn.Module] = []
        #: Per parameter: the dict it lives in, its name there, the tensor mirrored, its storage.
        self._slots: list[tuple[dict, str, torch.Tensor, int]] = []
        self._layers: list = []
        self._max_rows = 0

    def _rebuild(self) -> bool:
        """Mirror ``net`` as it is now; whether it can be mirrored at all."""
        net = self.net
        modules = list(net._modules.values()) if type(net) is nn.Sequential else []
        linears = [m for m in modules if type(m) is nn.Linear]
        self._modules, self._slots, self._layers = modules, [], []
        # A Linear first: the activations work in place, on the arrays the Linears return.
        if not modules or type(modules[0]) is not nn.Linear:
            return False
        if any(type(m) is not nn.Linear and type(m) not in _ACTIVATIONS for m in modules):
            return False
        params = [p for m in linears for p in (m.weight, m.bias)]
        if any(p is None or p.dtype != torch.float32 or p.device.type != "cpu" for p in params):
            return False
        self._slots = [
            (m._parameters, name, m._parameters[name], m._parameters[name].data_ptr())
            for m in linears
            for name in ("weight", "bias")
        ]
        self._max_rows = MAX_LAYER_SIZE // max(m.in_features * m.out_features for m in linears)
        self._layers = [
            (m.weight.detach().numpy().T, m.bias.detach().numpy()) if type(m) is nn.Linear else _ACTIVATIONS[type(m)]
            for m in modules
        ]
        return True

    def _current(self) -> bool:
        """Whether ``net`` is mirrored as it is now (plain loops: this runs every env step)."""
        net = self.net
        if net._forward_hooks or net._forward_pre_hooks:
            return False
        if _module._global_forward_hooks or _module._global_forward_pre_hooks:
            return False
        modules = self._modules
        # A net that could not be mirrored is looked at again (its dtype or device may be back).
        current = bool(self._layers) and len(net._modules) == len(modules)
        if current:
            for params, name, param, ptr in self._slots:
                if params.get(name) is not param or param.data_ptr() != ptr:
                    current = False
                    break
        if current:  # one pass: the same modules, each still plain
            for module, own in zip(net._modules.values(), modules, strict=True):
                if module is not own:
                    break
                if not _plain(module):
                    return False
            else:
                return True
        return self._rebuild() and all(_plain(module) for module in self._modules)

    def __call__(self, x: np.ndarray) -> np.ndarray | None:
        """``net(x)`` for float32 inputs ``[B, in]`` as a new float32 array, or ``None`` (use torch's forward).

        ``x`` is not written: the first layer (a Linear) returns a new array, which the rest
        of the pass works on.
        """
        if not self._current() or x.shape[0] > self._max_rows:
            return None
        for layer in self._layers:
            if type(layer) is tuple:
                x = x @ layer[0]
                x += layer[1]
            else:
                layer(x, out=x)
        return x


#: The policy class whose acting this path mirrors.
ACTOR_CRITIC = "rl_lightning.nets.actor_critic.ActorCritic"

#: Per policy: the numpy mirror of its actor and the reused noise buffer. Keyed weakly by the
#: policy object, so a copy or an unpickled policy builds its own on its own tensors.
_CACHE: weakref.WeakKeyDictionary[nn.Module, dict] = weakref.WeakKeyDictionary()


def _normalizer_stats(policy: nn.Module) -> tuple[np.ndarray, np.ndarray, float, float] | None | bool:
    """``(mean, var, eps, clip)`` of the policy's running normalizer; ``None`` without one; ``False``: not mirrored."""
    if not policy.normalize_obs:
        return None
    norm = policy._modules["normalizer"]
    if not is_class(norm, "rl_lightning.nets.normalizer.RunningNormalizer"):
        return False
    if norm._forward_hooks or norm._forward_pre_hooks:
        return False
    mean, var = norm.mean, norm.var
    if not mean.is_cpu or mean.dtype != torch.float32 or var.dtype != torch.float32:
        return False
    return mean.numpy(), var.numpy(), norm.eps, norm.clip


def _actor_out(policy: nn.Module, obs: torch.Tensor) -> np.ndarray | None:
    """``policy.actor(policy.features(obs))`` computed in numpy, or ``None`` where only torch's forward applies."""
    if type(obs) is not torch.Tensor or not obs.is_cpu or obs.dtype != torch.float32 or obs.requires_grad:
        return None
    actor = policy._modules["actor"]
    cache = _CACHE.get(policy)
    if cache is None:
        cache = _CACHE[policy] = {"mlp": None, "noise": None}
    numpy_actor = cache["mlp"]
    if numpy_actor is None or numpy_actor.net is not actor:  # new, or the actor was replaced
        numpy_actor = cache["mlp"] = NumpyMLP(actor)
    if obs.dim() != 2 or obs.shape[1] != policy.obs_dim:
        obs = obs.reshape(obs.shape[0], policy.obs_dim)  # raises on a wrong size, as features() does
    x = obs.numpy()
    stats = _normalizer_stats(policy)
    if stats is False:
        return None
    if stats is not None:
        mean, var, eps, clip = stats
        # RunningNormalizer.forward's formula, in float32 as there.
        x = (x - mean) / np.sqrt(var + np.float32(eps))
        np.clip(x, -clip, clip, out=x)
    return numpy_actor(x)


def _exponential_noise(policy: nn.Module, shape: tuple[int, ...]) -> np.ndarray:
    """What ``torch.empty(shape).exponential_()`` draws, in a buffer reused across env steps.

    A new tensor per step costs about as much as the draw. The buffer is made outside
    inference mode, so calls under ``inference_mode`` and under ``no_grad`` can both fill it.
    """
    cache = _CACHE[policy]
    buffer = cache["noise"]
    if buffer is None or buffer.shape != shape:
        with torch.inference_mode(False):
            buffer = cache["noise"] = torch.empty(shape, dtype=torch.float32)
    return buffer.exponential_().numpy()


def explore(policy: nn.Module, obs: torch.Tensor) -> torch.Tensor | None:
    """``policy.explore(obs)`` for an :class:`~rl_lightning.nets.ActorCritic`, its actor run in numpy; or ``None``.

    The same function, and the same draws from torch's generator, as the torch path
    (Gumbel-max on one ``exponential_`` draw for discrete actions; ``policy.sample`` on the
    actor's output for continuous ones). ``None`` (take torch's forward): the switch is off,
    gradients are on, the observations are not CPU float32, or the actor or normalizer is
    not one :class:`NumpyMLP` mirrors.
    """
    if torch.is_grad_enabled() or not on_for("torch") or not is_class(policy, ACTOR_CRITIC):
        return None
    out = _actor_out(policy, obs)
    if out is None:
        return None
    if not policy.discrete:
        return policy.sample(torch.from_numpy(out))
    noise = _exponential_noise(policy, out.shape)
    out -= np.log(noise, out=noise)
    return torch.from_numpy(out.argmax(-1))
