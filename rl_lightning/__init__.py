"""rl_lightning: reinforcement learning whose engine is PyTorch Lightning.

Trainer.fit(PPO(...), RolloutDataModule(env_id="CartPole-v1"))
"""

from rl_lightning.algos import DQN, PPO, SAC, RLModule
from rl_lightning.data import ReplayDataModule, RolloutDataModule
from rl_lightning.envs import EnvGroup, Variation

__all__ = ["DQN", "PPO", "SAC", "EnvGroup", "RLModule", "ReplayDataModule", "RolloutDataModule", "Variation"]
__version__ = "0.1.0"
