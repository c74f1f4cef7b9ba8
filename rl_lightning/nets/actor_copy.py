"""A copy of the policy that acts on another device or in another dtype, synced from the learner.

The "train policy / eval policy" split of large-model RL: the learner keeps its weights where the optimizer needs them
(e.g. a GPU in fp32); rollouts and evaluation act with a copy elsewhere (the CPU next to the simulator, or bf16 to halve
memory and bandwidth). ``ActorCopy`` implements the policy protocols of the data layer, so rollouts, replay collection
and evaluation use it without knowing. After the learner changes (``mark_stale``, called once per optimizer step), the
next act pulls the weights in (``sync``): once per rollout for PPO, every ``sync_interval`` gradient steps for
off-policy algorithms.

``fingerprint`` is the consistency check: per parameter and buffer, the float64 sum and
sum of squares of the learner's tensors cast to the copy's dtype, against the copy's own.
``verify`` raises :class:`WeightSyncError` naming the first tensor that differs.
"""

from __future__ import annotations

import copy
import time

import torch
from torch import nn

from rl_lightning.checks import check_one_of, check_positive_int

#: Spellings accepted for ``dtype``.
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16, "float64": torch.float64}


class WeightSyncError(RuntimeError):
    """The acting copy's weights are not the learner's."""


def _named_tensors(module: nn.Module) -> list[tuple[str, torch.Tensor]]:
    return [*module.named_parameters(), *module.named_buffers()]


def _copy_dtypes(module: nn.Module, dtype: torch.dtype) -> list[torch.dtype]:
    """The dtype of each of ``_named_tensors(module)`` in a copy of dtype ``dtype``.

    Floating parameters take ``dtype``; buffers keep theirs: observation statistics in bf16
    would erase features (a feature of mean 50 and std 0.05 normalizes to all zeros), so the
    networks normalize in float32 and cast after (``ActorCritic.features``).
    """
    params = [p.dtype if not p.is_floating_point() else dtype for p in module.parameters()]
    return params + [b.dtype for b in module.buffers()]


def fingerprint(module: nn.Module, dtype: torch.dtype | None = None) -> dict[str, torch.Tensor]:
    """Per-tensor ``(sum, sum of squares)`` in float64, of the tensors cast to ``dtype`` first.

    Tensors are cast as a copy in ``dtype`` holds them (:func:`_copy_dtypes`), then summed in
    float64 on their own device.
    """
    prints = {}
    named = _named_tensors(module)
    dtypes = _copy_dtypes(module, dtype) if dtype is not None else [t.dtype for _, t in named]
    with torch.no_grad():
        for (name, tensor), target in zip(named, dtypes, strict=True):
            t = tensor.to(target).double()
            prints[name] = torch.stack([t.sum(), (t * t).sum()]).cpu()
    return prints


class ActorCopy:
    """The acting copy of a policy, on ``device`` in ``dtype``, kept in sync with the learner.

    Args:
        learner: The policy the optimizer updates (the algorithm's ``policy``).
        device: Where the copy acts (``"cpu"``, ``"cuda:0"``, ...).
        dtype: The copy's floating dtype (``"float32"``, ``"bfloat16"``, ``"float16"``).
        sync_interval: Learner updates (optimizer steps) between syncs; the first act after
            the interval has passed pulls the weights.
        verify: Check the fingerprint after every sync.
    """

    def __init__(
        self, learner: nn.Module, device: str | torch.device = "cpu", dtype: str = "float32", sync_interval: int = 1,
        verify: bool = False,
    ):  # fmt: skip
        check_one_of(sorted(DTYPES), " (the acting copy's)", dtype=dtype)
        check_positive_int(sync_interval=sync_interval)
        self.learner = learner
        self.device = torch.device(device)
        self.dtype = DTYPES[dtype]
        self.sync_interval = sync_interval
        self.verify_each_sync = verify
        self.module = copy.deepcopy(learner).to(self.device).requires_grad_(False).eval()
        dtypes = _copy_dtypes(self.module, self.dtype)
        with torch.no_grad():
            for (_, tensor), target in zip(_named_tensors(self.module), dtypes, strict=True):
                tensor.data = tensor.data.to(target)
        self.pending_updates = 0  # learner updates not yet pulled in
        self.syncs = 0
        self.sync_seconds = 0.0

    # ------------------------------------------------------------ syncing
    def mark_stale(self, updates: int = 1) -> None:
        """Record that the learner took ``updates`` optimizer steps since the last sync."""
        self.pending_updates += updates

    def sync(self) -> None:
        """Copy the learner's parameters and buffers into the copy (cast to its device and dtype)."""
        start = time.perf_counter()
        self._copy_weights()
        self.pending_updates = 0
        self.syncs += 1
        self.sync_seconds += time.perf_counter() - start
        if self.verify_each_sync:
            self.verify()

    def _copy_weights(self) -> None:
        with torch.no_grad():
            for (_, dst), (_, src) in zip(_named_tensors(self.module), _named_tensors(self.learner), strict=True):
                dst.copy_(src)  # casts to the copy's dtype; a device-to-host copy is synchronous

    def maybe_sync(self) -> None:
        """Sync when at least ``sync_interval`` learner updates are pending."""
        if self.pending_updates >= self.sync_interval:
            self.sync()

    def verify(self) -> None:
        """Compare fingerprints of learner and copy; raise :class:`WeightSyncError` on a mismatch."""
        expected = fingerprint(self.learner, self.dtype)
        actual = fingerprint(self.module)
        for name, value in expected.items():
            if not torch.allclose(actual[name], value, rtol=1e-9, atol=1e-12):
                raise WeightSyncError(
                    f"The acting copy's '{name}' differs from the learner's after sync {self.syncs} "
                    f"(sum, sum of squares: copy {actual[name].tolist()}, learner {value.tolist()}). "
                    "Something wrote to the copy, or the sync missed a tensor; the run stops rather than "
                    "collect data with a policy that is not the one being trained."
                )

    # ------------------------------------------------------------ the policy protocols
    def _in(self, x: torch.Tensor | None) -> torch.Tensor | None:
        # Observations and states go to the copy's device as they are: the networks cast to their
        # weights' dtype after any normalization. The copy syncs first when the learner moved on.
        self.maybe_sync()
        return x if x is None else x.to(device=self.device)

    @staticmethod
    def _out(t: torch.Tensor | None) -> torch.Tensor | None:
        # Float outputs come back in float32 (the rollout's dtype); actions keep theirs.
        return t.float() if t is not None and t.is_floating_point() else t

    def initial_state(self, batch_size: int, device: torch.device | str | None = None) -> torch.Tensor | None:
        """The copied policy's initial state, on the copy's device."""
        return self.module.initial_state(batch_size, self.device)

    def act(self, obs, state=None, episode_start=None, deterministic: bool = False, value: bool = True):
        """The copy's ``act``; floating outputs in float32."""
        out = self.module.act(self._in(obs), self._in(state), self._in(episode_start), deterministic, value)
        return tuple(self._out(t) for t in out)

    def value(self, obs, state=None, episode_start=None) -> torch.Tensor:
        """The copy's state values, float32."""
        return self._out(self.module.value(self._in(obs), self._in(state), self._in(episode_start)))

    def explore(self, obs: torch.Tensor, env_steps: int) -> torch.Tensor:
        """The copy's exploration actions (off-policy collection)."""
        return self._out(self.module.explore(self._in(obs), env_steps))

    def parameters(self):
        """The copy's parameters (their device is where the data layer sends observations)."""
        return self.module.parameters()
