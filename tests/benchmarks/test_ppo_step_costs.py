import torch

from benchmarks.ppo_step_costs import pieces


def test_each_piece_is_one_env_step_or_one_real_minibatch_update():
    """Test that the timed pieces are the ones the table names: acting and stepping 4 CartPoles, and an update that
    moves the policy's weights."""
    variants, model, close = pieces()
    try:
        assert list(variants) == [
            "ActorCritic.act (4 observations)", "the same under inference_mode", "gymnasium SyncVectorEnv.step",
            "GymnasiumVectorEnv.step",
            "EnvGroup.step", "Stable-Baselines3 DummyVecEnv.step", "PPO minibatch: loss, backward, Adam (128)",
        ]  # fmt: skip
        before = [p.detach().clone() for p in model.policy.parameters()]
        variants["PPO minibatch: loss, backward, Adam (128)"]()
        assert any(not torch.equal(a, b) for a, b in zip(before, model.policy.parameters(), strict=True))
        for name in list(variants)[:6]:
            variants[name]()
        assert sum(p.grad is not None for p in model.policy.parameters()) > 0
    finally:
        close()
