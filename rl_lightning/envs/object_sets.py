"""Object sets: named lists of environment variations, and the wrapper that draws from them.

A variation names an env id, ``gymnasium.make`` keyword arguments, attribute overrides of the unwrapped env (e.g.
CartPole's pole ``length``) and a range of episode seeds. Training draws episodes from the ``train`` set;
evaluation also runs the held-out ``test`` set, so every run measures its generalization gap.
"""

from __future__ import annotations

import copy
import dataclasses
import importlib.resources
import operator
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
import torch
import yaml
from gymnasium.envs.classic_control.cartpole import CartPoleEnv

from rl_lightning.envs.wrappers import WrapperSpec, apply_wrappers

# Special attribute keys that are not plain ``setattr`` on the unwrapped env.
BODY_MASS_SCALE = "body_mass_scale"  # MuJoCo: {body name: factor on its default mass}


@dataclasses.dataclass(frozen=True)
class Variation:
    """One variation of an environment.

    Args:
        env_id, make_kwargs: What ``gymnasium.make`` builds (``env_id=None``: the id of the group using the set);
            ``make_kwargs`` win over the run's own (a variation's ``max_episode_steps`` over the run's).
        attrs: Overrides of the unwrapped env's attributes (dotted paths too: ``model.opt.gravity``) before each
            reset; ``body_mass_scale`` maps MuJoCo body names to a factor on their default mass.
        seeds: Half-open range ``(low, high)`` of episode seeds, or ``None`` to seed the env once and let it run on.
        name: A label for logs.
    """

    env_id: str | None = None
    make_kwargs: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    attrs: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    seeds: tuple[int, int] | None = None
    name: str = ""

    @classmethod
    def from_any(cls, value: Variation | Mapping[str, Any]) -> Variation:
        """Build a variation from itself or a mapping (as written in a config file)."""
        if isinstance(value, Variation):
            return value
        if not isinstance(value, Mapping):
            raise TypeError(
                f"An object-set variation must be a mapping or a Variation, got {type(value).__name__}: "
                f"{value!r}. Write it as e.g. {{'attrs': {{'length': 0.6}}, 'seeds': [0, 1000]}}."
            )
        if unknown := set(value) - {f.name for f in dataclasses.fields(cls)}:
            raise ValueError(f"Unknown key(s) {sorted(unknown)} in object-set variation {dict(value)!r}; "
                             "allowed keys are env_id, make_kwargs, attrs, seeds, name.")  # fmt: skip
        if (seeds := value.get("seeds")) is not None:
            try:  # two whole numbers (1e5 as YAML reads it, numpy's too); a string ("0,100"), 7 or 0.5 is no range
                low, high = (int(s) for s in seeds if not isinstance(s, str | bool) and float(s).is_integer())
            except (TypeError, ValueError):
                low = high = -1
            if not 0 <= low < high <= 2**32:  # what gymnasium's seeding takes
                raise ValueError(f"Variation seeds must be a range [low, high) of integers, 0 <= low < high <= 2**32; "
                                 f"got {seeds!r}.")  # fmt: skip
            seeds = (low, high)
        for key in ("make_kwargs", "attrs"):
            if not isinstance(given := value.get(key) or {}, Mapping) or not all(isinstance(k, str) for k in given):
                raise ValueError(f"Variation {key} must map names to values, got {given!r} in {dict(value)!r}. Write "
                                 f"it as e.g. {{'{key}': {{'length': 0.6}}}}.")  # fmt: skip
        return cls(
            env_id=value.get("env_id"), make_kwargs=dict(value.get("make_kwargs") or {}),
            attrs=dict(value.get("attrs") or {}), seeds=seeds, name=str(value.get("name", "")),
        )  # fmt: skip


ObjSets = dict[str, list[Variation]]
#: Object sets as a user gives them (``None``: the shipped ones).
UserObjSets = Mapping[str, Sequence[Variation | Mapping[str, Any]]] | None

#: The object sets shipped for some env ids (``obj_sets=None`` takes them), ``{env_id: {"train": [...], "test":
#: [...]}}``: data, written in ``obj_sets.yaml`` as a user writes theirs.
SHIPPED_OBJ_SETS: dict[str, dict[str, list[dict[str, Any]]]] = yaml.safe_load(
    importlib.resources.files(__package__).joinpath("obj_sets.yaml").read_text()
)


class NoObjectSetsWarning(UserWarning):
    """No object sets are shipped for ``env_id`` and none were given (``how``: how to pass them, in the caller's
    terms): train = test = the env itself."""

    def __init__(self, env_id: str, how: str = "obj_sets={'train': [...], 'test': [...]}"):
        super().__init__(
            f"No object sets are shipped for '{env_id}': train = test = the env itself, so no "
            f"out-of-distribution evaluation takes place. Pass {how} to measure the generalization gap."
        )
        self.env_id = env_id


def resolve_obj_sets(env_id: str, obj_sets: UserObjSets) -> ObjSets:
    """The object sets for ``env_id`` (filling variations that name no id): ``obj_sets``, else the shipped ones,
    else the env itself (with a :class:`NoObjectSetsWarning`); each a non-empty list of variations."""
    if obj_sets is None and env_id not in SHIPPED_OBJ_SETS:
        warnings.warn(NoObjectSetsWarning(env_id), stacklevel=3)
    if obj_sets is None:
        obj_sets = SHIPPED_OBJ_SETS.get(env_id, {"train": [{}], "test": [{}]})
    if not isinstance(obj_sets, Mapping) or not obj_sets:
        raise ValueError(f"obj_sets must be a non-empty mapping of set name -> variations, got {obj_sets!r}.")
    resolved: ObjSets = {}
    for name, variations in obj_sets.items():
        if isinstance(variations, (str, bytes, Mapping)) or not isinstance(variations, Sequence) or not variations:
            raise ValueError(
                f"obj_sets.{name}: object set '{name}' must be a non-empty list of variations, got {variations!r}."
            )
        variations = [Variation.from_any(v) for v in variations]
        resolved[str(name)] = [dataclasses.replace(v, env_id=v.env_id or env_id) for v in variations]
    return resolved


def select_obj_set(env_id: str, obj_sets: UserObjSets, obj_set: str) -> ObjSets:
    """:func:`resolve_obj_sets`, checking that ``obj_set`` is one of them (a ``ValueError`` naming those there are)."""
    resolved = resolve_obj_sets(env_id, obj_sets)
    if obj_set not in resolved:
        raise ValueError(f"Unknown object set '{obj_set}' for {env_id}; available: {sorted(resolved)}. "
                         "Pick one of those or pass obj_sets with that name.")  # fmt: skip
    return resolved


def _built_from(variation: Variation) -> tuple[str | None, str]:
    """What ``gymnasium.make`` builds a variation's env from: its id and ``make_kwargs``."""
    return variation.env_id, repr(sorted(variation.make_kwargs.items()))


class ObjectSetWrapper(gym.Wrapper):
    """Draws each episode's variation from the object set ``obj_set`` of ``obj_sets`` and applies it before reset.

    Variation draws and episode seeds come from the wrapper's own generator, seeded by the first ``reset(seed=...)``:
    a seeded run is reproducible. ``max_episode_steps``, ``render_mode`` and ``wrappers``
    (:mod:`~rl_lightning.envs.wrappers`) make each env.
    """

    def __init__(
        self, obj_sets: ObjSets, obj_set: str, max_episode_steps: int | None = None, render_mode: str | None = None,
        wrappers: Sequence[WrapperSpec] = (),
    ):  # fmt: skip
        if obj_set not in obj_sets:
            raise KeyError(f"Unknown object set '{obj_set}'; available: {sorted(obj_sets)}.")
        self.obj_sets, self.obj_set = obj_sets, obj_set
        self._make_args = {"max_episode_steps": max_episode_steps, "render_mode": render_mode}
        self._wrappers = list(wrappers)
        self._rng, self._seeded_once = np.random.default_rng(), False
        self.variation = obj_sets[obj_set][0]
        super().__init__(self._make(self.variation))
        for variation in obj_sets[obj_set][1:]:  # applied once now: one that cannot be (other spaces) is refused here
            self._apply(variation)

    def _make(self, variation: Variation) -> gym.Env:
        kwargs = {k: v for k, v in self._make_args.items() if v is not None}
        try:  # a keyword the env does not take is the object set's mistake, not an env fault
            env = gym.make(variation.env_id, **{**kwargs, **variation.make_kwargs})
        except TypeError as err:
            if not (variation.make_kwargs and "unexpected keyword" in str(err)):
                raise
            raise ValueError(f"Variation '{variation.name or variation.env_id}' passes make_kwargs "
                             f"{variation.make_kwargs} that {variation.env_id} does not take ({err}). Fix or drop them "
                             "in the object set.") from None  # fmt: skip
        env = apply_wrappers(env, self._wrappers)
        self._make_key = _built_from(variation)
        # Defaults of every attribute a variation of this env overrides, to restore between draws (others: at theirs).
        self._defaults: dict[str, Any] = {}
        unwrapped = env.unwrapped
        mine = [v for variations in self.obj_sets.values() for v in variations if _built_from(v) == self._make_key]
        overridden = (key for var in mine for key in var.attrs)
        for key in dict.fromkeys(overridden):
            if key == BODY_MASS_SCALE:
                if not hasattr(unwrapped, "model"):
                    raise ValueError(f"'{BODY_MASS_SCALE}' needs a MuJoCo env, but {variation.env_id} has no model.")
                self._defaults[key] = unwrapped.model.body_mass.copy()
                continue
            try:
                self._defaults[key] = copy.deepcopy(operator.attrgetter(key)(unwrapped))
            except AttributeError:
                raise ValueError(
                    f"A variation overrides attribute '{key}', which {type(unwrapped).__name__} "
                    f"({variation.env_id}) does not have. Check the spelling in the object set."
                ) from None
        # A value an attribute cannot take is the object set's mistake, refused here, not an env fault at a reset.
        for var, key, value in ((v, k, x) for v in mine for k, x in v.attrs.items()):
            default, label = self._defaults[key], f"Variation '{var.name or var.env_id}' sets '{key}' to {value!r}"
            if key == BODY_MASS_SCALE:
                try:  # body names the model has, each with a number
                    [(unwrapped.model.body(body), float(factor)) for body, factor in (value or {}).items()]
                except (AttributeError, KeyError, TypeError, ValueError) as err:
                    raise ValueError(f"{label}; give body names of the model and factors, e.g. {{torso: 1.5}} "
                                     f"({type(err).__name__}: {err}).") from None  # fmt: skip
            elif value is not None and np.asarray(default).dtype.kind in "biuf":
                shape, given = np.shape(default), np.shape(value)[::-1]  # it must broadcast to the default's shape
                fits = isinstance(default, list | tuple) or (  # a list is replaced whole; arrays are written in place
                    len(given) <= len(shape) and all(a in (1, b) for a, b in zip(given, shape[::-1], strict=False))
                )
                if np.asarray(value).dtype.kind not in "biuf" or not fits:
                    raise ValueError(f"{label}; give {'an array of shape ' + str(shape) if shape else 'a number'}: "
                                     f"{type(unwrapped).__name__}.{key} is {default!r}.")  # fmt: skip
        return env

    def _apply(self, variation: Variation) -> None:
        if _built_from(variation) != self._make_key:
            old = self.env
            self.env = self._make(variation)
            if self.env.observation_space != old.observation_space or self.env.action_space != old.action_space:
                raise ValueError(f"Variation '{variation.name or variation.env_id}' changes the observation or action "
                                 "space; all variations of an object set must share their spaces.")  # fmt: skip
            old.close()
            self._seeded_once = False
        unwrapped = self.env.unwrapped
        for attr, default in self._defaults.items():
            value = variation.attrs.get(attr)
            if attr == BODY_MASS_SCALE:
                masses = default.copy()
                for body, factor in (value or {}).items():
                    masses[unwrapped.model.body(body).id] *= float(factor)
                unwrapped.model.body_mass[:] = masses
            else:  # a dotted path (model.opt.gravity); numpy arrays (MuJoCo model fields) are written in place
                parent, _, name = attr.rpartition(".")
                owner = operator.attrgetter(parent)(unwrapped) if parent else unwrapped
                value = default if value is None else value
                if isinstance(current := getattr(owner, name), np.ndarray):
                    current[...] = np.asarray(value, dtype=current.dtype)
                else:
                    setattr(owner, name, copy.deepcopy(value))
        # gymnasium/envs/classic_control/cartpole.py: total_mass and polemass_length are set in __init__ from masspole,
        # masscart and length, and step() only reads these derived values (a user's subclass's too).
        if isinstance(unwrapped, CartPoleEnv):
            unwrapped.total_mass = unwrapped.masspole + unwrapped.masscart
            unwrapped.polemass_length = unwrapped.masspole * unwrapped.length
        self.variation = variation

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        """Draw a variation from the active set, apply it and reset the inner env."""
        if seed is not None:
            self._rng = np.random.default_rng(seed)
            self._seeded_once = False
        variations = self.obj_sets[self.obj_set]
        variation = variations[int(self._rng.integers(len(variations)))] if len(variations) > 1 else variations[0]
        self._apply(variation)
        episode_seed = (int(self._rng.integers(*variation.seeds)) if variation.seeds is not None
                        else None if self._seeded_once else int(self._rng.integers(2**31 - 1)))  # fmt: skip
        self._seeded_once = True
        obs, info = self.env.reset(seed=episode_seed, options=options)
        info["variation"] = variation.name
        return obs, info


def variation_table(
    variations: Sequence[Variation], env_id: str, params: Mapping[str, torch.Tensor], where: str
) -> dict[str, torch.Tensor]:
    """A batched env's object set: per parameter a ``[num_variations]`` table of the variations' values (the env's
    default, from its ``[num_envs]`` ``params``, where a variation leaves it out), as ManiSkill3 and Isaac Lab
    randomize a batch. Another env id, ``make_kwargs``, a non-number or a parameter the env lacks is refused."""
    names: dict[str, None] = {}  # the parameters any variation sets, in order
    for k, variation in enumerate(variations):
        label = f"variation {variation.name or k} of {where}"
        if variation.env_id not in (None, env_id):
            raise ValueError(
                f"{label} names env_id {variation.env_id!r}; a batched env runs one task ({env_id!r}). Put other "
                "tasks in their own run, or vary this task's parameters (attrs)."
            )
        if variation.make_kwargs:
            raise ValueError(
                f"{label} has make_kwargs {dict(variation.make_kwargs)}; a batched env is built once for all its "
                "envs. Give per-env parameters as attrs instead (e.g. attrs: {length: 0.6})."
            )
        if unknown := sorted(set(variation.attrs) - set(params)):
            fix = "give object sets without attrs (obj_sets: {train: [{}], test: [{}]})"  # EnvPool has none
            fix = f"It has {sorted(params) or 'none'}: {'vary those' if params else fix}"
            raise ValueError(
                f"{label} sets {unknown}, which the batched {env_id} does not have as per-env parameters. {fix}, or "
                "run the gymnasium backend (env.backend=gymnasium)."
            )
        names.update(dict.fromkeys(variation.attrs))
    table = {}
    for name in names:
        table[name] = [variation.attrs.get(name, float(params[name][0])) for variation in variations]
        for k, value in enumerate(table[name]):
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(
                    f"attrs.{name} of variation {variations[k].name or k} of {where} is {value!r}; a batched env's "
                    "parameters are numbers (one per env)."
                )
    like = next(iter(params.values()), None)
    return {name: torch.tensor(values, dtype=like.dtype, device=like.device) for name, values in table.items()}
