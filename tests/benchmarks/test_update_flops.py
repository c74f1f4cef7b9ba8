import pytest

from benchmarks.update_flops import ours, sb3

pytest.importorskip("stable_baselines3")


def test_our_sac_update_does_less_arithmetic_than_stable_baselines3s_and_dqn_the_same():
    """Test the counts the table reports: our SAC update holds the critics fixed in the actor loss (no weight
    gradients there), so it multiplies less than Stable-Baselines3's; DQN's losses are the same products."""
    sac, sac_sb3 = ours("SAC"), sb3("SAC")
    assert 0 < sac < sac_sb3
    assert sac_sb3 / sac == pytest.approx(1.125, abs=0.01)  # SB3: the critics' weight gradients too
    assert ours("DQN") == sb3("DQN") > 0
