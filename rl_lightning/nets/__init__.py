"""Networks: plain ``nn.Module`` s, usable without Lightning."""

from rl_lightning.nets.actor_critic import ActorCritic, check_spaces
from rl_lightning.nets.mlp import layer_init, mlp
from rl_lightning.nets.normalizer import RunningNormalizer

__all__ = ["ActorCritic", "RunningNormalizer", "check_spaces", "layer_init", "mlp"]
