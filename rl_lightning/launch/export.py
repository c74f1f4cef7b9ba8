"""``rl-lightning export CKPT``: a checkpoint's policy as one TorchScript or ONNX file for deployment.

    rl-lightning export runs/<run>/checkpoints/last.ckpt --format onnx --out policy.onnx
    rl-lightning export runs/<run>/checkpoints/last.ckpt --format torchscript --out policy.pt

The file maps a batch of raw observations (float32 or uint8 ``[batch, *obs_shape]``, input ``obs``; one input per key of
a ``Dict`` space) to the deterministic env actions (output ``action``: int64 ``[batch]`` for discrete actions, int64
``[batch, n]`` for multi-discrete and multi-binary ones, float32 ``[batch, action_dim]`` within the bounds otherwise),
observation normalization included; it runs with ``torch.jit.load`` or ONNX Runtime alone. See
:mod:`rl_lightning.export`.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from typing import Any, NoReturn

from rl_lightning.algos import load_with_data_settings
from rl_lightning.export import EXPORT_FORMATS, export_policy

SUFFIXES = {"torchscript": ".pt", "onnx": ".onnx"}


def main(args: Sequence[str] | None = None) -> dict[str, Any]:
    """``rl-lightning export CKPT --format torchscript|onnx [--out FILE]``; returns the file's contract."""
    parser = argparse.ArgumentParser(
        prog="rl-lightning export", description="A checkpoint's policy as one TorchScript or ONNX file for deployment."
    )
    parser.add_argument("checkpoint", help="a .ckpt file from a run's checkpoints/ directory")
    parser.add_argument("--format", required=True, choices=EXPORT_FORMATS, help="file format")
    parser.add_argument(
        "--out", default=None, metavar="FILE", help="file to write (default: the checkpoint's name with .pt or .onnx)"
    )
    ns = parser.parse_args(args)
    out = ns.out or os.path.splitext(ns.checkpoint)[0] + SUFFIXES[ns.format]

    def fail(message: str) -> NoReturn:
        parser.exit(2, f"rl-lightning export: error: {message}\n")

    if (same := os.path.realpath(out) == os.path.realpath(ns.checkpoint)) or out.endswith(".ckpt"):  # links resolved
        what = "the checkpoint itself" if same else "named as a checkpoint (a run's would be replaced)"
        fail(f"--out {out} is {what}; name another file (e.g. policy{SUFFIXES[ns.format]}).")
    if other := next((f for f, suffix in SUFFIXES.items() if f != ns.format and out.endswith(suffix)), None):
        fail(f"--out {out} is named as a {other} file, but --format {ns.format} writes {ns.format}: name it "
             f"{os.path.splitext(out)[0] + SUFFIXES[ns.format]}, or pass --format {other}.")  # fmt: skip
    if os.path.isdir(out):
        example = os.path.join(out, "policy" + SUFFIXES[ns.format])
        fail(f"--out {out} is a directory; name the file to write (e.g. {example}).")
    try:
        model, data = load_with_data_settings(ns.checkpoint)
    except (FileNotFoundError, ValueError) as err:
        fail(str(err))
    algorithm, env = type(model).__name__, data.get("env_id")
    # The run's obs_bound in clip mode clipped what its policy saw: the exported actor clips too.
    obs_bound = data["obs_bound"] if env and data["obs_bound_mode"] == "clip" else None
    meta = {"env_id": env, "wrappers": data["wrappers"]} if env else None  # the observations are the wrapped env's
    try:
        contract = export_policy(model, out, ns.format, metadata=meta, obs_bound=obs_bound)
    except ImportError as err:
        fail(str(err))
    except OSError as err:
        fail(f"Cannot write {out}: {err} (--out)")

    def tensor(t: dict) -> str:
        return f"{t['name']} {t['dtype']} [{', '.join(map(str, t['shape']))}]"

    inputs, outputs = list(contract["inputs"]), [contract["output"]]
    if state := contract.get("state"):  # a recurrent policy takes its state in and gives it out beside them
        inputs, outputs = [*inputs, {**state, "name": "state_in"}], [*outputs, {**state, "name": "state_out"}]
    print(f"Wrote {out} ({ns.format}, {algorithm}{' on ' + env if env else ''}): {', '.join(map(tensor, inputs))} -> "
          f"{', '.join(map(tensor, outputs))}")  # fmt: skip
    return contract
