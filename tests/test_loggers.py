"""``rl_lightning.loggers.WandbLogger``: offline unless a key is configured; online only with one."""

from __future__ import annotations

import pytest

from rl_lightning.loggers import WandbLogger, wandb_api_key_configured


@pytest.fixture
def no_key(tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))
    return tmp_path


def test_auto_mode_is_offline_without_a_key(no_key):
    """Test that mode='auto' logs offline when no API key is configured."""
    assert not wandb_api_key_configured()
    logger = WandbLogger(save_dir=str(no_key), mode="auto")
    assert logger.mode == "offline" and logger._offline


def test_auto_mode_is_online_with_a_key_in_env_or_netrc(no_key, monkeypatch):
    """Test that a WANDB_API_KEY or a netrc entry for the W&B host makes mode='auto' online."""
    (no_key / "netrc").write_text("machine api.wandb.ai login user password abc123\n")
    assert wandb_api_key_configured()
    assert WandbLogger(save_dir=str(no_key)).mode == "online"
    (no_key / "netrc").unlink()
    monkeypatch.setenv("WANDB_API_KEY", "abc123")
    assert WandbLogger(save_dir=str(no_key)).mode == "online"


def test_online_without_a_key_fails_early_with_the_fix(no_key):
    """Test that mode='online' with no key raises before any run starts, naming wandb login and offline mode."""
    with pytest.raises(ValueError, match="wandb login.*offline"):
        WandbLogger(save_dir=str(no_key), mode="online")


def test_unknown_mode_is_refused(no_key):
    """Test that a mode outside auto/online/offline is refused with the choices."""
    with pytest.raises(ValueError, match="auto.*online.*offline"):
        WandbLogger(save_dir=str(no_key), mode="cloud")
