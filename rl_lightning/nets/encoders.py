"""Encoders: images, vectors and dictionaries of them -> one feature vector per observation.

:class:`MultiInputEncoder` routes each key of a ``Dict`` observation (or a single image ``Box``) to a CNN (image-like
keys) or to the flat vector part (vector-like keys), and concatenates the results, as Stable-Baselines3's
``CombinedExtractor`` does (its ``MultiInputPolicy``) and SheepRL's ``cnn_keys`` / ``mlp_keys`` encoders. The actor and
critic heads (MLPs of the algorithm's ``hidden_sizes``) sit on top.

- Images (rank-3 ``Box``, ``HxWxC`` or ``CxHxW``) go through :class:`NatureCNN`, the CNN of Mnih et al. (2015),
  "Human-level control through deep reinforcement learning", as SB3's ``NatureCNN`` and CleanRL's ``ppo_atari.py`` use
  it; its kernels and strides are settings, so small images (MiniGrid's 7x7 view) get a CNN that fits them. uint8 images
  are stored as uint8 and scaled by 1/255 inside the network (SB3's ``preprocess_obs``).
- Vectors (rank-1 or rank-2 float ``Box``) are flattened and, with ``normalize_obs``, normalized by a
  :class:`RunningNormalizer` (vector keys only: images and one-hots are not); ``Discrete`` / ``MultiDiscrete`` keys
  become one-hots and ``MultiBinary`` keys floats (SB3's ``preprocess_obs`` again).

A key that is neither, a key the settings name that the space lacks, an image too small for the CNN, and an image whose
channel axis cannot be told are refused when the encoder is built, before any env step, naming the key and the setting
or wrapper that fixes it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from rl_lightning.nets.mlp import layer_init
from rl_lightning.nets.normalizer import RunningNormalizer

#: The smallest gradient-step image batch laid out channels-last (``EncoderSettings.channels_last``): forward and
#: backward at 32 images were 1.2-1.3x faster that way, at 8 slower.
CHANNELS_LAST_MIN_BATCH = 32

#: The key of a single (non-``Dict``) observation in routes and messages.
WHOLE = "obs"

_SETTING = "algo.encoder"  # where the messages point a Hydra user; PPO(encoder={...}) in Python


@dataclasses.dataclass(frozen=True)
class EncoderSettings:
    """How :class:`MultiInputEncoder` reads an observation (Hydra: ``algo.encoder.<name>=...``).

    Args:
        cnn_keys: ``Dict`` keys that go through a CNN; ``None``: every image-like key.
        mlp_keys: ``Dict`` keys that go into the flat vector part; ``None``: every vector-like
            key. Naming either list leaves the keys neither list names unused.
        channels_first: Whether images are ``CxHxW`` (``True``) or ``HxWxC`` (``False``);
            ``None`` tells them by the smaller end axis and refuses a tie.
        cnn_channels: Output channels of each conv layer (Nature CNN: 32, 64, 64).
        cnn_kernels: Kernel size of each conv layer (Nature CNN: 8, 4, 3).
        cnn_strides: Stride of each conv layer (Nature CNN: 4, 2, 1).
        cnn_features: Width of the linear layer after the convolutions (Nature CNN: 512).
        normalize_images: Divide uint8 images by 255 (pixels; SB3's ``normalize_images``).
            ``False`` for images of small integer codes, such as MiniGrid's object, colour
            and state indices (0-10), which 1/255 would squash towards 0.
        actor_keys: Observation groups (asymmetric actor-critic): the ``Dict`` keys the policy reads;
            ``None``: every key the routes read. What the policy reads is all that ``predict``,
            evaluation, ``play`` and an exported policy need.
        critic_keys: The ``Dict`` keys the critic reads (PPO's value head, SAC's Q-networks), which may include
            privileged keys the policy never sees (object poses, contact forces, friction: Isaac Lab's ``critic`` group,
            rsl_rl's ``obs_groups["critic"]``); the critic then gets an encoder of its own. ``None``: the policy's keys,
            through the shared encoder. Needs ``actor_keys``, so no privileged key reaches the policy by default.
        channels_last: Lay the image batches of gradient steps on the CPU out channels-last (NHWC)
            in memory (:data:`CHANNELS_LAST_MIN_BATCH` images or more): oneDNN's convolution backward
            runs faster on that layout (torch's "Channels Last Memory Format" tutorial); the Nature
            CNN's forward and backward on 256 Atari frame stacks took 168-198 against 244-282 ms, and
            Atari PPO ran 1.18-1.22x faster (``python -m benchmarks.conv_layout``). Acting (no
            gradients) and small batches keep the default layout, where it measured 4-11% slower.
    """

    cnn_keys: tuple[str, ...] | None = None
    mlp_keys: tuple[str, ...] | None = None
    channels_first: bool | None = None
    cnn_channels: tuple[int, ...] = (32, 64, 64)
    cnn_kernels: tuple[int, ...] = (8, 4, 3)
    cnn_strides: tuple[int, ...] = (4, 2, 1)
    cnn_features: int = 512
    normalize_images: bool = True
    channels_last: bool = True
    actor_keys: tuple[str, ...] | None = None
    critic_keys: tuple[str, ...] | None = None

    def __post_init__(self):
        for name in ("cnn_keys", "mlp_keys", "cnn_channels", "cnn_kernels", "cnn_strides", "actor_keys", "critic_keys"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, str) or not isinstance(value, Sequence)):
                raise TypeError(f"{_SETTING}.{name} must be a list, got {value!r}.")
            if value is not None:
                object.__setattr__(self, name, tuple(value))
        lengths = {len(self.cnn_channels), len(self.cnn_kernels), len(self.cnn_strides)}
        if len(lengths) != 1 or not self.cnn_channels:
            raise ValueError(
                f"{_SETTING}.cnn_channels, cnn_kernels and cnn_strides give one entry per conv layer and must have "
                f"the same, non-zero length; got {list(self.cnn_channels)}, {list(self.cnn_kernels)}, "
                f"{list(self.cnn_strides)}."
            )
        for name in ("cnn_channels", "cnn_kernels", "cnn_strides"):
            if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in getattr(self, name)):
                raise ValueError(f"{_SETTING}.{name} must hold positive integers, got {list(getattr(self, name))}.")
        for name in ("normalize_images", "channels_last"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{_SETTING}.{name} must be true or false, got {getattr(self, name)!r}.")
        if not isinstance(self.cnn_features, int) or self.cnn_features <= 0:
            raise ValueError(f"{_SETTING}.cnn_features must be a positive integer, got {self.cnn_features!r}.")
        if self.critic_keys is not None and self.actor_keys is None:
            raise ValueError(
                f"{_SETTING}.critic_keys={list(self.critic_keys)} needs {_SETTING}.actor_keys too: name the keys the "
                "policy reads, so a key meant for the critic alone never reaches the policy."
            )
        for name in ("actor_keys", "critic_keys"):
            if getattr(self, name) == ():
                raise ValueError(f"{_SETTING}.{name} names no key; name some, or null for the default.")

    @property
    def privileged_critic(self) -> bool:
        """Whether the critic reads other keys than the policy (it then has an encoder of its own)."""
        return self.critic_keys is not None and set(self.critic_keys) != set(self.actor_keys or ())

    @classmethod
    def of(cls, value: EncoderSettings | Mapping[str, Any] | None) -> EncoderSettings:
        """Settings from a mapping (Hydra, the CLI, a checkpoint's hyperparameters), or the defaults for ``None``.

        A ``None`` value takes the default (Hydra's ``conf/algo/encoder/default.yaml`` lists every setting as null).
        """
        if value is None:
            return cls()
        if isinstance(value, cls):
            return value
        if not isinstance(value, Mapping):
            raise TypeError(f"{_SETTING} must be a mapping of encoder settings, got {value!r}.")
        known = {field.name for field in dataclasses.fields(cls)}
        if unknown := sorted(set(value) - known):
            raise ValueError(f"Unknown encoder setting(s) {unknown} in {_SETTING}; the settings are {sorted(known)}.")
        return cls(**given_settings(value))


def given_settings(value: Mapping[str, Any]) -> dict[str, Any]:
    """The settings of ``value`` that are given (not ``None``), lists as plain lists: what hyperparameters keep."""
    return {name: list(v) if isinstance(v, Sequence) and not isinstance(v, str) else v
            for name, v in value.items() if v is not None}  # fmt: skip


def needs_encoder(space: gym.Space) -> bool:
    """Whether observations of ``space`` go through :class:`MultiInputEncoder` (a ``Dict``, or an image ``Box``).

    A ``Box`` of rank 1 or 2 keeps the flat MLP path (flattened, normalized), as before.
    """
    return isinstance(space, gym.spaces.Dict) or (isinstance(space, gym.spaces.Box) and len(space.shape) >= 3)


@dataclasses.dataclass(frozen=True)
class ImageInput:
    """An image key: its shape as stored, whether channels come first, whether it is uint8."""

    key: str
    shape: tuple[int, ...]
    channels_first: bool
    uint8: bool

    @property
    def chw(self) -> tuple[int, int, int]:
        return self.shape if self.channels_first else (self.shape[2], self.shape[0], self.shape[1])


@dataclasses.dataclass(frozen=True)
class VectorInput:
    """A vector key: how it becomes floats (``"box"`` flattened and normalized, ``"onehot"``, ``"binary"``)."""

    key: str
    kind: str
    width: int
    nvec: tuple[int, ...] = ()  # one-hot sizes (Discrete: one; MultiDiscrete: one per entry)
    start: tuple[int, ...] = ()


def _image_layout(key: str, space: gym.spaces.Box, channels_first: bool | None) -> bool:
    """``True`` for ``CxHxW``, ``False`` for ``HxWxC``; the smaller end axis is the channel axis."""
    if channels_first is not None:
        return channels_first
    first, last = space.shape[0], space.shape[2]
    if first == last:
        raise ValueError(
            f"Observation key {key!r} is an image of shape {space.shape}, and its channel axis cannot be told (both "
            f"end axes have size {first}). Say which: {_SETTING}.channels_first=true (CxHxW) or false (HxWxC)."
        )
    return first < last


def _vector_input(key: str, space: gym.Space) -> VectorInput | None:
    """How a vector-like key becomes floats, or ``None`` when it is not vector-like."""
    if isinstance(space, gym.spaces.Box) and len(space.shape) <= 2:
        return VectorInput(key, "box", int(np.prod(space.shape)))
    if isinstance(space, gym.spaces.Discrete):
        return VectorInput(key, "onehot", int(space.n), (int(space.n),), (int(space.start),))
    if isinstance(space, gym.spaces.MultiDiscrete) and space.nvec.ndim == 1:
        return VectorInput(
            key, "onehot", int(space.nvec.sum()), tuple(space.nvec.tolist()), tuple(space.start.tolist())
        )
    return VectorInput(key, "binary", int(np.prod(space.n))) if isinstance(space, gym.spaces.MultiBinary) else None


def _neither(key: str, space: gym.Space) -> ValueError:
    if isinstance(space, gym.spaces.Dict):
        why = "is itself a Dict; the encoder reads one level of keys"
        fix = "move its entries to the top level with a gymnasium.ObservationWrapper, or drop it"
    elif isinstance(space, gym.spaces.Box) and len(space.shape) == 2:
        why = f"is a uint8 array of shape {space.shape}: a one-channel image or a table of small integers"
        fix = (
            "give it a channel axis to make it an image (gymnasium.wrappers.ReshapeObservation, or "
            f"AtariPreprocessing(grayscale_newaxis=True)), or list it in {_SETTING}.mlp_keys to flatten it"
        )
    elif isinstance(space, gym.spaces.Box):
        why = f"has rank {len(space.shape)} (shape {space.shape}); images have rank 3 (HxWxC or CxHxW)"
        fix = (
            "merge the extra axes into the channels with a gymnasium.ObservationWrapper (a frame stack of RGB "
            "images: stack grayscale frames instead, or reshape to (frames x channels, H, W))"
        )
    else:
        why = f"is a {type(space).__name__} space, neither an image nor a vector"
        fix = "drop it with gymnasium.wrappers.FilterObservation, or name the keys to use"
    return ValueError(
        f"Observation key {key!r} {why}. Fix: {fix}; or leave it out by naming the keys the encoder reads: "
        f"{_SETTING}.cnn_keys=[...] {_SETTING}.mlp_keys=[...]."
    )


def route_keys(space: gym.Space, settings: EncoderSettings) -> tuple[list[ImageInput], list[VectorInput]]:
    """Which keys go to a CNN and which to the vector part, checked against ``space``.

    A ``Box`` image is one key, :data:`WHOLE`. With neither key list given, every key must be
    image-like or vector-like; naming a list uses exactly the keys named.

    Raises:
        ValueError: Naming the key and the fix: a named key the space lacks, a key that is neither image- nor
            vector-like (or not of the kind its list says), an ambiguous channel axis.
        TypeError: For an observation space that is neither a ``Box`` nor a ``Dict``.
    """
    if isinstance(space, gym.spaces.Box):
        spaces = {WHOLE: space}
    elif isinstance(space, gym.spaces.Dict):
        spaces = dict(space.spaces)
    else:
        raise TypeError(
            f"Observations must be a Box (vectors, images) or a Dict of them, got {space}. Turn a Tuple into a Dict "
            "or a Box with a gymnasium.ObservationWrapper (or gymnasium.wrappers.FlattenObservation)."
        )
    for name in ("cnn_keys", "mlp_keys"):
        if missing := [key for key in getattr(settings, name) or () if key not in spaces]:
            raise ValueError(
                f"{_SETTING}.{name} names {missing}, which the observation space does not have; its keys are "
                f"{sorted(spaces)}."
            )
    if both := set(settings.cnn_keys or ()) & set(settings.mlp_keys or ()):
        raise ValueError(f"Keys {sorted(both)} are in both {_SETTING}.cnn_keys and mlp_keys; give each key one route.")
    chosen = settings.cnn_keys is not None or settings.mlp_keys is not None
    images, vectors = [], []
    for key, sub in spaces.items():
        is_image = isinstance(sub, gym.spaces.Box) and len(sub.shape) == 3
        if chosen:
            if key in (settings.cnn_keys or ()):
                if not is_image:
                    raise ValueError(
                        f"{_SETTING}.cnn_keys names {key!r}, but it is {sub}, not an image (a rank-3 Box, HxWxC or "
                        f"CxHxW); list it in {_SETTING}.mlp_keys instead, or reshape it into an image."
                    )
                route = "cnn"
            elif key in (settings.mlp_keys or ()):
                route = "mlp"
            else:
                continue
        else:
            plain_vector = _vector_input(key, sub) is not None and not (
                isinstance(sub, gym.spaces.Box) and len(sub.shape) == 2 and sub.dtype == np.uint8
            )
            if not (is_image or plain_vector):
                raise _neither(key, sub)
            route = "cnn" if is_image else "mlp"
        if route == "cnn":
            channels_first = _image_layout(key, sub, settings.channels_first)
            images.append(ImageInput(key, tuple(sub.shape), channels_first, sub.dtype == np.uint8))
        else:
            if (vector := _vector_input(key, sub)) is None:
                raise ValueError(
                    f"{_SETTING}.mlp_keys names {key!r}, but it is {sub}, which cannot be flattened into a vector; "
                    f"list it in {_SETTING}.cnn_keys if it is an image, or drop it."
                )
            vectors.append(vector)
    if not images and not vectors:
        raise ValueError(f"The encoder reads no observation key; name some in {_SETTING}.cnn_keys or mlp_keys.")
    return images, vectors


def conv_output_size(size: int, kernels: Sequence[int], strides: Sequence[int]) -> int:
    """Spatial size after valid (unpadded) convolutions; <= 0 where the image is too small."""
    for kernel, stride in zip(kernels, strides, strict=True):
        if size < kernel:
            return 0
        size = (size - kernel) // stride + 1
    return size


class NatureCNN(nn.Module):
    """The CNN of Mnih et al. (2015): conv 32x8/4, 64x4/2, 64x3/1, each ReLU, then a ReLU linear layer of 512.

    Layer sizes are :class:`EncoderSettings`; orthogonal init with gain ``sqrt(2)`` as in
    CleanRL's ``ppo_atari.py`` (``layer_init``). Takes ``[B, C, H, W]`` floats.
    """

    def __init__(self, image: ImageInput, settings: EncoderSettings):
        super().__init__()
        c, h, w = image.chw
        out_h, out_w = (conv_output_size(size, settings.cnn_kernels, settings.cnn_strides) for size in (h, w))
        if out_h <= 0 or out_w <= 0:
            raise ValueError(
                f"Observation key {image.key!r} is an image of {h}x{w} pixels, too small for the CNN's kernels "
                f"{list(settings.cnn_kernels)} and strides {list(settings.cnn_strides)}. Give it a CNN that fits "
                f"(e.g. {_SETTING}.cnn_kernels=[2,2,2] {_SETTING}.cnn_strides=[1,1,1] for a 7x7 view), or enlarge the "
                "image with gymnasium.wrappers.ResizeObservation."
            )
        layers: list[nn.Module] = []
        channels = c
        for out, kernel, stride in zip(settings.cnn_channels, settings.cnn_kernels, settings.cnn_strides, strict=True):
            layers += [layer_init(nn.Conv2d(channels, out, kernel, stride)), nn.ReLU()]
            channels = out
        layers += [nn.Flatten(), layer_init(nn.Linear(channels * out_h * out_w, settings.cnn_features)), nn.ReLU()]
        self.net = nn.Sequential(*layers)
        self.features_dim = settings.cnn_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class MultiInputEncoder(nn.Module):
    """Observations (an image ``Box``, or a ``Dict`` of images and vectors) -> features ``[B, features_dim]``.

    Args:
        observation_space: A ``Box`` image or a ``Dict`` (see :func:`route_keys`).
        settings: Key routes and CNN sizes.
        normalize_obs: Normalize the ``Box`` vector keys by running statistics.

    Attributes:
        features_dim: Width of the features (CNN outputs, then the vector part).
        images, vectors: The routes (:class:`ImageInput`, :class:`VectorInput`).
    """

    def __init__(
        self, observation_space: gym.Space, settings: EncoderSettings | None = None, normalize_obs: bool = True
    ):
        super().__init__()
        settings = EncoderSettings.of(settings)
        self.images, self.vectors = route_keys(observation_space, settings)
        self.cnns = nn.ModuleList(NatureCNN(image, settings) for image in self.images)
        self.box_dim = sum(v.width for v in self.vectors if v.kind == "box")
        self.normalizer = RunningNormalizer((self.box_dim,)) if normalize_obs and self.box_dim else None
        self.features_dim = sum(cnn.features_dim for cnn in self.cnns) + sum(v.width for v in self.vectors)
        self.normalize_images, self.channels_last = settings.normalize_images, settings.channels_last
        self._whole = isinstance(observation_space, gym.spaces.Box)

    def _get(self, obs: Any, key: str) -> torch.Tensor:
        return obs if self._whole else obs[key]

    def box_part(self, obs: Any) -> torch.Tensor | None:
        """The ``Box`` vector keys, flattened and concatenated as floats ``[B, box_dim]`` (before normalization)."""
        parts = [self._get(obs, v.key) for v in self.vectors if v.kind == "box"]
        return torch.cat([p.reshape(p.shape[0], -1).float() for p in parts], -1) if parts else None

    def forward(self, obs: Any) -> torch.Tensor:
        """Features of a batch of raw observations (a tensor for a ``Box``, a mapping of tensors for a ``Dict``)."""
        dtype = next(self.parameters(), torch.empty(0)).dtype
        features = []
        for image, cnn in zip(self.images, self.cnns, strict=True):
            x = self._get(obs, image.key)
            if not image.channels_first:
                x = x.permute(0, 3, 1, 2)
            # uint8 pixels scaled to [0, 1] inside the network (SB3's preprocess_obs, CleanRL's x / 255.0).
            x = x.to(dtype) / 255.0 if image.uint8 and self.normalize_images else x.to(dtype)
            if self.channels_last and torch.is_grad_enabled() and x.device.type == "cpu" and not torch.jit.is_tracing():
                x = x.contiguous(memory_format=torch.channels_last) if x.shape[0] >= CHANNELS_LAST_MIN_BATCH else x
            features.append(cnn(x))
        if (box := self.box_part(obs)) is not None:
            features.append((self.normalizer(box) if self.normalizer is not None else box).to(dtype))
        for vector in self.vectors:
            x = self._get(obs, vector.key)
            if vector.kind == "onehot":
                hots = [
                    nn.functional.one_hot((x.reshape(x.shape[0], -1)[:, i] - start).long(), n)
                    for i, (n, start) in enumerate(zip(vector.nvec, vector.start, strict=True))
                ]
                features.append(torch.cat(hots, -1).to(dtype))
            elif vector.kind == "binary":
                features.append(x.reshape(x.shape[0], -1).to(dtype))
        return torch.cat(features, -1)

    def update_normalizer(self, obs: Any) -> None:
        """Merge raw observations into the statistics of the ``Box`` vector keys (images and one-hots have none)."""
        if self.normalizer is not None:
            self.normalizer.update(self.box_part(obs))


#: What an algorithm's ``encoder`` argument may be: settings, a module, or a callable building one from the space.
EncoderArgument = Any


def check_encoder_argument(encoder: EncoderArgument) -> tuple[EncoderArgument, bool]:
    """An algorithm's ``encoder`` argument, checked before any env is made: ``(value to keep, is one's own)``.

    Settings (a mapping) are checked and kept as the given entries (``None`` when none is given), so hyperparameters
    list what the user set; one's own encoder (a module, or a callable that builds one from the observation space) is
    kept as it is and not saved with the hyperparameters.

    Raises:
        TypeError: Neither a mapping, a module nor a callable.
        ValueError: Unknown or impossible settings.
    """
    own = encoder is not None and not isinstance(encoder, Mapping)
    if own and not callable(encoder):
        raise TypeError(
            f"encoder must be a mapping of encoder settings, a module or a callable that builds one from the "
            f"observation space, got {encoder!r}."
        )
    if isinstance(encoder, Mapping):
        EncoderSettings.of(encoder)
        encoder = given_settings(encoder) or None
    return encoder, own


def group_space(observation_space: gym.Space, keys: Sequence[str] | None) -> gym.Space:
    """The part of ``observation_space`` an observation group reads: a ``Dict`` of ``keys`` (``None``: all of it).

    Raises:
        ValueError: Groups on a space that is not a ``Dict``, or a key the space lacks, naming the fix.
    """
    if keys is None:
        return observation_space
    if not isinstance(observation_space, gym.spaces.Dict):
        raise ValueError(
            f"{_SETTING}.actor_keys / critic_keys pick keys of a Dict observation, got {observation_space}. Give the "
            "env Dict observations (e.g. {policy: ..., privileged: ...}), or drop the keys."
        )
    if missing := [key for key in keys if key not in observation_space.spaces]:
        raise ValueError(
            f"{_SETTING}.actor_keys / critic_keys name {missing}, which the observation space does not have; its keys "
            f"are {sorted(observation_space.spaces)}."
        )
    return gym.spaces.Dict({key: observation_space[key] for key in keys})


def actor_space(observation_space: gym.Space, encoder: EncoderArgument) -> gym.Space:
    """What the policy reads of ``observation_space`` under the ``encoder`` argument: its group, or all of it."""
    if encoder is not None and not isinstance(encoder, Mapping):
        return observation_space  # one's own encoder reads what it reads
    return group_space(observation_space, EncoderSettings.of(encoder).actor_keys)


def build_encoder(
    encoder: EncoderArgument, observation_space: gym.Space, normalize_obs: bool, reader: str = "actor"
) -> nn.Module | None:
    """The encoder a network reads raw observations through, or ``None`` for the flat vector path.

    One's own encoder is built by calling it with the space (a module is used as it is); settings (or ``None``) give a
    :class:`MultiInputEncoder` where the space needs one (:func:`needs_encoder`: images, ``Dict``), else ``None``. With
    observation groups, the encoder of ``reader`` (``"actor"`` or ``"critic"``) reads only that group's keys (the key
    routes ``cnn_keys`` / ``mlp_keys`` are kept for the keys the group has).
    """
    if isinstance(encoder, nn.Module):
        return encoder
    if callable(encoder):
        return encoder(observation_space)
    settings = EncoderSettings.of(encoder)
    keys = settings.critic_keys if reader == "critic" and settings.critic_keys is not None else settings.actor_keys
    space = group_space(observation_space, keys)
    if keys is not None:
        routes = {name: getattr(settings, name) for name in ("cnn_keys", "mlp_keys")}
        settings = dataclasses.replace(
            settings, **{name: None if v is None else tuple(k for k in v if k in keys) for name, v in routes.items()}
        )
        if routes["cnn_keys"] is not None or routes["mlp_keys"] is not None:
            if unrouted := [k for k in keys if k not in (routes["cnn_keys"] or ()) + (routes["mlp_keys"] or ())]:
                raise ValueError(
                    f"{_SETTING}.{reader}_keys names {unrouted}, which neither {_SETTING}.cnn_keys nor mlp_keys "
                    "routes; add them to one of the lists."
                )
    return MultiInputEncoder(space, settings, normalize_obs) if needs_encoder(space) else None
