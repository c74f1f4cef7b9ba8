"""Plain MLP builder with the orthogonal initialization of the PPO literature."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn


def weight_dtype(module: nn.Module) -> torch.dtype:
    """The dtype of ``module``'s first parameter (bf16 in a reduced-precision acting copy).

    float32 when it has none in sight: functional calls (torchrl's losses, ``torch.func``)
    lift the parameters out of the module while it runs.
    """
    param = next(module.parameters(), None)
    return torch.float32 if param is None else param.dtype


def layer_init(layer: nn.Linear, gain: float = math.sqrt(2), bias: float = 0.0) -> nn.Linear:
    """Orthogonal weights and constant bias ("The 37 Implementation Details of PPO", detail 2)."""
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.constant_(layer.bias, bias)
    return layer


def mlp(
    in_features: int,
    hidden_sizes: Sequence[int],
    out_features: int,
    activation: type[nn.Module] = nn.Tanh,
    out_gain: float = 1.0,
) -> nn.Sequential:
    """Build an MLP with orthogonal init: ``sqrt(2)`` gain on hidden layers, ``out_gain`` last.

    Args:
        in_features: Input width.
        hidden_sizes: Widths of the hidden layers.
        out_features: Output width.
        activation: Activation class between layers (Tanh as in CleanRL's PPO).
        out_gain: Gain of the output layer (0.01 for policy logits/means, 1.0 for values).
    """
    layers: list[nn.Module] = []
    width = in_features
    for size in hidden_sizes:
        layers += [layer_init(nn.Linear(width, size)), activation()]
        width = size
    layers.append(layer_init(nn.Linear(width, out_features), gain=out_gain))
    return nn.Sequential(*layers)
