"""The argument checks the algorithms, data modules and envs share: each names the argument and what is allowed."""

import numpy as np
import pytest
import torch

from rl_lightning.checks import (
    check_hidden_sizes,
    check_non_negative,
    check_positive,
    check_positive_int,
    check_unit_interval,
    same_device,
)


@pytest.mark.parametrize(
    "check, kwargs, match",
    [
        (check_positive, {"lr": 0.0}, r"lr must be a positive number, got 0.0"),
        (check_positive, {"lr": True}, r"lr must be a positive number, got True"),
        (check_non_negative, {"ent_coef": -1e-3}, r"ent_coef must be a non-negative number"),
        (check_positive_int, {"num_envs": 2.0}, r"num_envs must be a positive integer, got 2.0"),
        (check_positive_int, {"num_envs": None}, r"num_envs must be a positive integer, got None"),
        (check_unit_interval, {"gamma": 1.01}, r"gamma must be a number in \[0, 1\], got 1.01"),
        (check_unit_interval, {"tau": 0.0, "open_low": True}, r"tau must be a number in \(0, 1\], got 0.0"),
    ],
)
def test_a_bad_value_is_refused_naming_the_argument_and_what_is_allowed(check, kwargs, match):
    """Test that each check refuses a bad value with the argument's name, the value and the allowed range."""
    with pytest.raises(ValueError, match=match):
        check(**kwargs)


def test_good_values_pass_numpy_scalars_included():
    """Test that allowed values (numpy integers and floats too, None where it means something) pass."""
    check_positive(lr=np.float32(1e-3), max_grad_norm=None)
    check_non_negative(ent_coef=0)
    check_positive_int(num_envs=np.int64(4), keep_last=None, none="None (keep all)")
    check_unit_interval(gamma=1, gae_lambda=np.float64(0.0))
    check_hidden_sizes([64, np.int64(32)])
    with pytest.raises(ValueError, match="keep_last must be a positive integer or None"):
        check_positive_int(keep_last=0, none="None (keep all)")
    with pytest.raises(ValueError, match="hidden_sizes must be a non-empty list"):
        check_hidden_sizes([64, 0])
    with pytest.raises(ValueError, match="hidden_sizes must be a non-empty list"):
        check_hidden_sizes([])  # SAC's and DQN's networks need a hidden layer
    check_hidden_sizes([], allow_empty=True)  # PPO's linear heads on an encoder
    with pytest.raises(ValueError, match="hidden_sizes must be a list of positive integers, got '64'"):
        check_hidden_sizes("64", allow_empty=True)


def test_a_fresh_run_dir_is_refused_only_where_its_files_would_be_written_over(tmp_path):
    """Test that checkpoints/*.ckpt or metrics.csv in the directory refuse a fresh run naming the file and the fix,
    and that runs in its subdirectories (runs/<date>/...) do not."""
    from rl_lightning.checks import check_new_run_dir

    (tmp_path / "runs" / "old" / "checkpoints").mkdir(parents=True)
    (tmp_path / "runs" / "old" / "checkpoints" / "last.ckpt").write_bytes(b"x")
    (tmp_path / "runs" / "old" / "metrics.csv").write_text("step\n")
    check_new_run_dir(str(tmp_path), "Resume it, or pass another dir.")
    # A run without checkpoints (save_interval off) has nothing to resume: only the other directory is offered.
    for name, fix in (
        ("checkpoints/last.ckpt", "Resume it, or"),
        ("checkpoints/epoch=0-step=256.ckpt", "Resume it, or"),
        ("metrics.csv", "It keeps no checkpoint to resume from"),
    ):
        run = tmp_path / name.replace("/", "_")
        (run / name).parent.mkdir(parents=True, exist_ok=True)
        (run / name).write_text("x")
        with pytest.raises(ValueError, match=f"holds an earlier run .*{name}.* {fix}.* pass another dir."):
            check_new_run_dir(str(run), "Resume it, or pass another dir.")


def test_switches_take_python_and_numpy_bools_and_refuse_text():
    """Test that check_bool takes True/False and numpy's bools (a user's config read with numpy) and refuses text
    ('no', 'False': `if` takes either for on) and numbers, naming the switch."""
    import numpy as np

    from rl_lightning.checks import check_bool

    check_bool(a=True, b=np.bool_(False))
    for value in ("no", "False", 1, None):
        with pytest.raises(TypeError, match=f"flag must be true or false, got {value!r}"):
            check_bool(flag=value)


def test_an_unindexed_cuda_env_is_on_the_policys_indexed_device():
    """Test that an env on ``cuda`` (ManiSkill3's GPU envs) counts as on ``cuda:0``, where Lightning puts the policy (it
    was refused: "lives on cuda, but the policy trains on cuda:0"); other devices and indices still differ."""
    cuda, cuda0, cuda1, cpu = (torch.device(d) for d in ("cuda", "cuda:0", "cuda:1", "cpu"))
    assert same_device(cuda, cuda0) and same_device(cuda1, cuda) and same_device(cpu, cpu)
    assert not same_device(cuda0, cuda1) and not same_device(cpu, cuda) and not same_device(cuda0, cpu)
