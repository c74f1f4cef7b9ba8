"""The optimizer every algorithm builds: ``rl_lightning.algos.update.adam``."""

from __future__ import annotations

import torch

from rl_lightning.algos.update import adam


def test_adam_keeps_every_parameter_of_groups_given_as_generators():
    """Test that parameter groups whose tensors come from generators lose none of them, and that they step."""
    actor, critic = torch.nn.Linear(3, 2), torch.nn.Linear(3, 1)
    optimizer = adam([{"params": actor.parameters(), "lr": 1e-2}, {"params": critic.parameters(), "lr": 1e-3}], 1e-2)
    assert [len(group["params"]) for group in optimizer.param_groups] == [2, 2]
    before = actor.weight.detach().clone()
    (actor(torch.ones(1, 3)).sum() + critic(torch.ones(1, 3)).sum()).backward()
    optimizer.step()
    assert not torch.equal(actor.weight, before)


def test_adam_is_fused_for_float_cpu_parameters_and_takes_a_plain_generator():
    """Test the fused kernel for float32 CPU parameters given as a module's parameter generator."""
    optimizer = adam(torch.nn.Linear(3, 2).parameters(), lr=1e-3, eps=1e-5)
    assert len(optimizer.param_groups[0]["params"]) == 2
    assert optimizer.defaults["fused"] and optimizer.defaults["eps"] == 1e-5
