"""Algorithms: one LightningModule per algorithm on the ``RLModule`` base."""

from rl_lightning.algos.base import RLModule
from rl_lightning.algos.dqn import DQN
from rl_lightning.algos.dqn_loss import DQNLossTerms, dqn_loss
from rl_lightning.algos.ppo import PPO
from rl_lightning.algos.ppo_loss import PPOLossTerms, minibatch_loss, ppo_loss
from rl_lightning.algos.sac import SAC

__all__ = ["DQN", "DQNLossTerms", "PPO", "PPOLossTerms", "RLModule", "SAC", "dqn_loss", "minibatch_loss", "ppo_loss"]
