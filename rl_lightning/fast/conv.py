"""Images in channels-last memory for the CNN's gradient steps on CPU.

The plain path hands the CNN ``[B, C, H, W]`` images in torch's default (NCHW, contiguous)
memory layout. On CPU, oneDNN's convolution backward runs faster on NHWC memory (the same
tensor, strides reordered by ``Tensor.contiguous(memory_format=torch.channels_last)``; torch's
"Channels Last Memory Format" tutorial): the Nature CNN's forward and backward on a batch of
256 Atari frame stacks took 168-198 against 244-282 ms (one thread), about 1.4x, and the
layout then flows through every conv layer. Forward passes without gradients (acting,
targets) and batches of 8 ran 4-11% slower in that layout, so the shortcut is taken only
where gradients are recorded and the batch is large (``docs/fast_path.md``,
``python -m benchmarks.conv_layout``). Public torch only; the values and gradients equal
the plain path's to float rounding (a different summation order).
"""

from __future__ import annotations

import torch

from rl_lightning.fast.switch import enabled

#: The smallest batch laid out channels-last (forward and backward at 32 were 1.2-1.3x faster, at 8 slower).
MIN_BATCH = 32


def channels_last(images: torch.Tensor) -> torch.Tensor | None:
    """``images`` (``[B, C, H, W]`` floats about to enter a CNN) in channels-last memory, for a gradient step.

    Returns:
        ``None`` (the plain path keeps its layout) with the fast path off, gradients not being
        recorded, while tracing (export), a batch under :data:`MIN_BATCH`, a device other than the CPU, a tensor that is
        not 4-D or already channels-last (an ``[B, H, W, C]`` image permuted to channels first is).
    """
    if not (
        enabled()
        and not torch.jit.is_tracing()  # an exported graph keeps the plain layout (tracing checks rerun it)
        and torch.is_grad_enabled()
        and images.dim() == 4
        and images.device.type == "cpu"
        and images.shape[0] >= MIN_BATCH
    ):
        return None
    if images.is_contiguous(memory_format=torch.channels_last):
        return None
    return images.contiguous(memory_format=torch.channels_last)
