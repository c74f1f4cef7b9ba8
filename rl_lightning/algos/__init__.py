"""Algorithms: one LightningModule per algorithm on the ``RLModule`` base."""

from rl_lightning.algos.base import RLModule
from rl_lightning.algos.dqn import DQN
from rl_lightning.algos.dqn_loss import DQNLossTerms, dqn_loss
from rl_lightning.algos.loading import ALGORITHMS, load_checkpoint, load_with_data_settings, read_checkpoint
from rl_lightning.algos.ppo import PPO
from rl_lightning.algos.ppo_loss import PPOLossTerms, compute_gae, ppo_loss
from rl_lightning.algos.sac import SAC

__all__ = [
    "ALGORITHMS", "DQN", "DQNLossTerms", "PPO", "PPOLossTerms", "RLModule", "SAC", "dqn_loss", "load_checkpoint",
    "load_with_data_settings", "compute_gae", "ppo_loss", "read_checkpoint"
]  # fmt: skip
