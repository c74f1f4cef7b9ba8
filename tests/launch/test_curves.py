"""``rl-lightning plot``'s reading and aggregation of learning curves."""

from __future__ import annotations

import numpy as np
import pytest

from rl_lightning.launch.curves import aggregate, find_runs, plot_runs, read_curves


def _write_csv(path, rows):
    path.mkdir(parents=True, exist_ok=True)
    keys = ["step", "time/env_steps", "eval/return_mean", "eval_ood/return_mean", "train/policy_loss"]
    lines = [",".join(keys)] + [",".join("" if r.get(k) is None else str(r[k]) for k in keys) for r in rows]
    (path / "metrics.csv").write_text("\n".join(lines) + "\n")


def test_read_curves_takes_env_steps_and_the_last_value_per_step(tmp_path):
    """Test that curves come from rows that have the metric, keyed by env steps, the final test overriding a repeat."""
    _write_csv(
        tmp_path,
        [
            {"step": 100, "time/env_steps": 100, "train/policy_loss": 0.1},
            {"step": 100, "time/env_steps": 100, "eval/return_mean": 10, "eval_ood/return_mean": 5},
            {"step": 200, "time/env_steps": 200, "eval/return_mean": 20, "eval_ood/return_mean": 8},
            {"step": 200, "time/env_steps": 200, "eval/return_mean": 22, "eval_ood/return_mean": 9},
        ],
    )
    curves = read_curves(str(tmp_path))
    np.testing.assert_array_equal(curves["eval/return_mean"][0], [100, 200])
    np.testing.assert_array_equal(curves["eval/return_mean"][1], [10, 22])
    np.testing.assert_array_equal(curves["eval_ood/return_mean"][1], [5, 9])


def test_aggregate_interpolates_seeds_onto_shared_steps():
    """Test that mean/min/max are taken on the union of steps up to the shortest seed's end."""
    a = (np.array([0.0, 100.0, 200.0]), np.array([0.0, 10.0, 20.0]))
    b = (np.array([0.0, 150.0]), np.array([0.0, 30.0]))
    steps, mean, low, high = aggregate([a, b])
    np.testing.assert_array_equal(steps, [0, 100, 150])
    np.testing.assert_allclose(mean, [0, (10 + 20) / 2, (15 + 30) / 2])
    np.testing.assert_allclose(low, [0, 10, 15])
    np.testing.assert_allclose(high, [0, 20, 30])


def test_plot_counts_seeds_per_path_and_refuses_paths_without_metrics(tmp_path):
    """Test that each path's runs are found recursively, and a path without metrics, or that does not exist, gets a
    message naming the fix."""
    for seed in range(3):
        _write_csv(
            tmp_path / "sweep" / str(seed),
            [{"step": s, "eval/return_mean": s * seed, "eval_ood/return_mean": 1} for s in (100, 200)],
        )
    assert len(find_runs(str(tmp_path / "sweep"))) == 3
    seeds = plot_runs([str(tmp_path / "sweep")], str(tmp_path / "out.png"))
    assert seeds == {str(tmp_path / "sweep"): 3} and (tmp_path / "out.png").stat().st_size > 1000
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="logger=\\[wandb,csv\\]"):
        plot_runs([str(tmp_path / "empty")], str(tmp_path / "none.png"))
    with pytest.raises(FileNotFoundError, match="'.*swep': no such file or directory; check the path"):  # a typo
        plot_runs([str(tmp_path / "swep")], str(tmp_path / "none.png"))
    with pytest.raises(FileNotFoundError, match="'.*empty.a': no such file or directory"):  # a group of runs
        plot_runs([[str(tmp_path / "empty" / "a"), str(tmp_path / "empty" / "b")]], str(tmp_path / "none.png"))


def _write_hparams(path, lr, seed, hydra=True):
    """An ``hparams.yaml`` as the CSV logger writes it: a Hydra run's config and the modules' own, or the modules'."""
    flat = f"lr: {lr}\nseed: {seed}\nenv_id: CartPole-v1\nhidden_sizes:\n- 64\n"
    config = f"config:\n  algo:\n    lr: {lr}\n    compile: {seed % 2 == 0}\n  seed: {seed}\n  run_dir: {path}\n"
    config += f"  logger:\n    csv:\n      save_dir: {path}\n" + "    wandb:\n      mode: auto\n" * (seed == 2)
    config += f"  env:\n    worker_timeout: {seed}\n  callbacks:\n    video:\n      video_interval: {seed}\n"
    (path / "hparams.yaml").write_text((config if hydra else "") + flat)


@pytest.mark.parametrize("hydra", [True, False], ids=["hydra", "python"])
def test_a_sweep_draws_a_curve_per_setting_not_every_run_as_a_seed(tmp_path, hydra):
    """Test that runs under one path that differ in more than the seed and where they keep their files (a sweep over
    the learning rate) are drawn as a curve per setting, labelled by what differs, each with its own seeds; settings of
    how a run runs (compile, its loggers, callbacks, worker_timeout) do not split a curve."""
    for run, (lr, seed) in enumerate([(0.001, 0), (0.001, 1), (0.0005, 0), (0.0005, 1), (0.0005, 2)]):
        _write_csv(tmp_path / "sweep" / str(run), [{"step": s, "eval/return_mean": lr * s, "eval_ood/return_mean": 1}
                                                   for s in (100, 200)])  # fmt: skip
        _write_hparams(tmp_path / "sweep" / str(run), lr, seed, hydra)
    seeds = plot_runs([str(tmp_path / "sweep")], str(tmp_path / "out.png"))
    key = "algo.lr" if hydra else "lr"
    assert seeds == {f"{tmp_path / 'sweep'} ({key}=0.001)": 2, f"{tmp_path / 'sweep'} ({key}=0.0005)": 3}
    for run in range(2, 5):  # the seeds of one setting alone: one curve, named by its path
        (tmp_path / "sweep" / str(run) / "metrics.csv").unlink()
    assert plot_runs([str(tmp_path / "sweep")], str(tmp_path / "out.png")) == {str(tmp_path / "sweep"): 2}


def test_a_run_evaluated_once_is_drawn_as_a_point(tmp_path, monkeypatch):
    """Test that a curve of one evaluation (a short run's final test only) gets a marker: a line of one point is
    invisible, and the plot came out as empty axes."""
    from matplotlib.axes import Axes

    _write_csv(tmp_path / "short", [{"step": 512, "eval/return_mean": 9.0, "eval_ood/return_mean": 8.0}])
    _write_csv(tmp_path / "long", [{"step": s, "eval/return_mean": 1.0, "eval_ood/return_mean": 1.0} for s in (1, 2)])
    markers, plot = [], Axes.plot
    monkeypatch.setattr(
        Axes, "plot", lambda ax, *args, **kwargs: markers.append(kwargs.get("marker")) or plot(ax, *args, **kwargs)
    )
    plot_runs([str(tmp_path / "short"), str(tmp_path / "long")], str(tmp_path / "out.png"))
    assert markers == ["o", "o", None, None]  # both panels of the short run, then of the long one


def test_plot_refuses_an_output_format_matplotlib_does_not_write(tmp_path, capsys):
    """Test that `plot --out curves.xyz` ends with the usage line naming the formats, before any directory is made."""
    from rl_lightning.launch.curves import main

    _write_csv(tmp_path / "run", [{"step": 100, "eval/return_mean": 1, "eval_ood/return_mean": 1}])
    with pytest.raises(SystemExit) as info:
        main([str(tmp_path / "run"), "--out", str(tmp_path / "reporting" / "curves.xyz")])
    assert info.value.code == 2 and "no such format" in capsys.readouterr().err
    assert not (tmp_path / "reporting").exists()
    main([str(tmp_path / "run"), "--out", str(tmp_path / "reporting" / "curves.svg")])
    assert (tmp_path / "reporting" / "curves.svg").stat().st_size > 1000
