"""Networks: plain ``nn.Module`` s, usable without Lightning."""

from rl_lightning.nets.actor_critic import ActorCritic, check_spaces
from rl_lightning.nets.dqn import LinearSchedule, QValueNetwork
from rl_lightning.nets.mlp import layer_init, mlp
from rl_lightning.nets.normalizer import RewardScaler, RunningNormalizer
from rl_lightning.nets.recurrent import RecurrentActorCritic
from rl_lightning.nets.sac import QNetwork, SquashedGaussianActor

__all__ = [
    "ActorCritic", "LinearSchedule", "QNetwork", "QValueNetwork", "RecurrentActorCritic", "RewardScaler",
    "RunningNormalizer", "SquashedGaussianActor", "check_spaces", "layer_init", "mlp",
]  # fmt: skip
