"""BestCheckpoint keeps the state of the best evaluation, and only evaluations count."""

from __future__ import annotations

import os

import lightning.pytorch as pl
import torch
from torch.utils.data import DataLoader

from rl_lightning.callbacks import BestCheckpoint

# eval/return_mean of the epochs that evaluate; None: no evaluation that epoch.
RETURNS = [1.0, None, 3.0, 2.0, None, 5.0, 4.0]


class _ScriptedModule(pl.LightningModule):
    """Logs a scripted eval/return_mean at validation and a marker of the epoch in its weights."""

    def __init__(self):
        super().__init__()
        self.marker = torch.nn.Parameter(torch.zeros(()))

    def training_step(self, batch, batch_idx):
        return (self.marker * 0).sum()

    def on_train_epoch_start(self):
        with torch.no_grad():
            self.marker.fill_(self.current_epoch)

    def validation_step(self, batch, batch_idx):
        value = RETURNS[self.current_epoch]
        if value is not None:
            self.log("eval/return_mean", value)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.0)


def test_best_checkpoint_holds_the_epoch_of_the_highest_evaluation(tmp_path):
    """Test that best.ckpt is the epoch whose eval/return_mean was highest (5.0, epoch 5), a single file."""
    data = DataLoader(torch.zeros(2, 1), batch_size=1)
    trainer = pl.Trainer(
        max_epochs=len(RETURNS),
        default_root_dir=tmp_path,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        callbacks=[BestCheckpoint()],
    )
    trainer.fit(_ScriptedModule(), data, data)
    files = os.listdir(tmp_path / "checkpoints")
    assert files == ["best.ckpt"]
    state = torch.load(tmp_path / "checkpoints" / "best.ckpt", weights_only=True)
    assert state["epoch"] == 5 and state["state_dict"]["marker"].item() == 5.0
