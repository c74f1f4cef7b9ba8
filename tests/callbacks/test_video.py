"""``EvaluationVideo``: one filmed episode per object set at every video_interval-th evaluation."""

from __future__ import annotations

import glob
import os
import shutil

import numpy as np
import pytest
from lightning.pytorch.loggers import TensorBoardLogger

from rl_lightning.callbacks import EvaluationVideo
from rl_lightning.data.evaluation import play_episode
from rl_lightning.envs import make_env
from tests.helpers import count_frames, quiet_trainer, read_frames, tiny_ppo, tiny_rollout_data

STEPS_PER_EPOCH = 32  # tiny_rollout_data: 2 envs x 16 steps
CONF = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "conf")


def videos(root) -> dict[str, list[str]]:
    """The mp4 files under ``root/videos``, by object set, sorted by env steps."""
    found = {}
    for obj_set in ("train", "test"):
        paths = glob.glob(os.path.join(root, "videos", obj_set, "*.mp4"))
        found[obj_set] = sorted(paths, key=lambda p: int(p.rsplit("=", 1)[1][:-4]))
    return found


def test_cartpole_videos_of_both_object_sets_have_the_episodes_frames(tmp_path):
    """Test that each evaluation films one episode per object set, n steps giving n + 1 frames."""
    callback = EvaluationVideo(video_interval=1)
    model = tiny_ppo(hidden_sizes=[16, 16])
    trainer = quiet_trainer(tmp_path, callbacks=[callback], max_epochs=2)
    trainer.fit(model, tiny_rollout_data())
    found = videos(tmp_path)
    steps = [STEPS_PER_EPOCH, 2 * STEPS_PER_EPOCH]
    for obj_set in ("train", "test"):
        assert [os.path.basename(p) for p in found[obj_set]] == [f"env_steps={s}.mp4" for s in steps]
        # The last video is the episode the final policy plays from the callback's seed, on the
        # evaluation time limit (eval_max_episode_steps=20 in tiny_rollout_data).
        env = make_env("CartPole-v1", obj_set, max_episode_steps=20)
        expected = play_episode(model.policy, env, seed=callback.seed)
        path = found[obj_set][-1]
        assert callback.last_videos[obj_set] == path
        assert count_frames(path) == expected.length + 1
        first, last = (read_frames(path)[i].astype(int) for i in (0, -1))
        changed = (np.abs(first - last).max(-1) > 60).sum()  # pixels clearly redrawn, not coding noise
        assert first.shape == (400, 600, 3) and changed > 100  # the cart and pole moved


def test_video_interval_counts_evaluations_and_survives_a_resume(tmp_path):
    """Test that video_interval=2 films evaluations 2 and 4, also when the run resumes after the third: the
    cadence is read from the env-step grid, not counted by the callback (an evaluation rerun at a resume, outside
    the validation loop, shifted the count)."""
    trainer = quiet_trainer(tmp_path, callbacks=[EvaluationVideo(video_interval=2)], max_epochs=3)
    trainer.fit(tiny_ppo(hidden_sizes=[16, 16]), tiny_rollout_data())
    ckpt = str(tmp_path / "epoch3.ckpt")
    trainer.save_checkpoint(ckpt)
    assert [os.path.basename(p) for p in videos(tmp_path)["test"]] == [f"env_steps={2 * STEPS_PER_EPOCH}.mp4"]
    resumed = EvaluationVideo(video_interval=2)
    trainer = quiet_trainer(tmp_path, callbacks=[resumed], max_epochs=4)
    trainer.fit(tiny_ppo(hidden_sizes=[16, 16]), tiny_rollout_data(), ckpt_path=ckpt)
    names = [os.path.basename(p) for p in videos(tmp_path)["train"]]
    assert names == [f"env_steps={2 * STEPS_PER_EPOCH}.mp4", f"env_steps={4 * STEPS_PER_EPOCH}.mp4"]


def test_an_evaluation_rerun_at_a_resume_keeps_the_video_cadence(tmp_path):
    """Test that a run stopped between its second collection and that collection's evaluation (rerun when the fit
    resumes, outside the validation loop) still films evaluations 2 and 4 with video_interval=2, not 2 and 3, and
    films the rerun evaluation 2 itself (it was never filmed)."""
    callback = EvaluationVideo(video_interval=2)
    trainer = quiet_trainer(tmp_path, callbacks=[callback], max_epochs=2)
    data = tiny_rollout_data()
    trainer.fit(tiny_ppo(hidden_sizes=[16, 16]), data)
    data.counters.evaluated = 1  # as the stop left it: the second collection's evaluation undone, and its video
    shutil.rmtree(tmp_path / "videos")
    ckpt = str(tmp_path / "cut.ckpt")
    trainer.save_checkpoint(ckpt)
    trainer = quiet_trainer(tmp_path, callbacks=[EvaluationVideo(video_interval=2)], max_epochs=4)
    trainer.fit(tiny_ppo(hidden_sizes=[16, 16]), tiny_rollout_data(), ckpt_path=ckpt)
    names = [os.path.basename(p) for p in videos(tmp_path)["train"]]
    assert names == [f"env_steps={2 * STEPS_PER_EPOCH}.mp4", f"env_steps={4 * STEPS_PER_EPOCH}.mp4"]


def test_videos_are_logged_to_tensorboard_and_wandb(tmp_path):
    """Test that eval/video and eval_ood/video reach TensorBoard (a GIF at env steps) and W&B (the mp4)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from rl_lightning.loggers import WandbLogger

    tensorboard = TensorBoardLogger(str(tmp_path), name="tb", version=0)
    wandb = WandbLogger(save_dir=str(tmp_path), mode="offline")
    trainer = quiet_trainer(
        tmp_path,
        callbacks=[EvaluationVideo(video_interval=1, video_obj_sets=["test"])],
        max_epochs=1,
        logger=[tensorboard, wandb],
    )
    trainer.fit(tiny_ppo(hidden_sizes=[16, 16]), tiny_rollout_data())
    wandb.experiment.finish()
    events = EventAccumulator(tensorboard.log_dir, size_guidance={"images": 0})
    events.Reload()
    assert events.Tags()["images"] == ["eval_ood/video"]  # video_obj_sets=["test"]: the training set is not filmed
    (image,) = events.Images("eval_ood/video")
    assert image.step == STEPS_PER_EPOCH and image.encoded_image_string[:6] == b"GIF89a"
    media = glob.glob(str(tmp_path / "wandb" / "offline-run-*" / "files" / "media" / "videos" / "eval_ood" / "*.mp4"))
    assert len(media) == 1 and count_frames(media[0]) >= 2


def test_off_by_default_in_the_config_and_with_interval_zero(tmp_path):
    """Test that the Hydra config's default is video_interval=0, and that it then writes nothing."""
    from hydra import compose, initialize_config_dir

    from tests.launch.conftest import REPO

    with initialize_config_dir(os.path.join(REPO, "conf"), version_base=None):
        cfg = compose("config", overrides=["+experiment=ppo"])
    assert cfg.callbacks.video.video_interval == 0
    callback = EvaluationVideo(video_interval=0)
    trainer = quiet_trainer(tmp_path, callbacks=[callback], max_epochs=2)
    trainer.fit(tiny_ppo(hidden_sizes=[16, 16]), tiny_rollout_data())
    assert not os.path.exists(tmp_path / "videos")


def test_an_env_that_cannot_render_fails_before_training(tmp_path, scripted_sets):
    """Test that a render failure is reported when fit starts, naming the env and the fixes, before any env step."""
    from tests.conftest import SCRIPTED_ID

    data = tiny_rollout_data(env_id=SCRIPTED_ID, obj_sets=scripted_sets)
    trainer = quiet_trainer(tmp_path, callbacks=[EvaluationVideo()], max_epochs=1)
    with pytest.raises(RuntimeError, match=f"EvaluationVideo cannot render {SCRIPTED_ID}.*video_interval=0"):
        trainer.fit(tiny_ppo(hidden_sizes=[16, 16]), data)
    assert data.env_steps == 0


def test_a_video_that_fails_mid_run_is_skipped_with_a_warning(tmp_path, monkeypatch):
    """Test that a failed recording leaves no partial file, warns, and training goes on to its end."""
    import rl_lightning.callbacks.video as video_module

    def full_disk(policy, env, seed, deterministic, video, *args, **kwargs):
        video.add(env.render())  # the file exists by now
        raise OSError("No space left on device")

    monkeypatch.setattr(video_module, "play_episode", full_disk)
    callback = EvaluationVideo()
    trainer = quiet_trainer(tmp_path, callbacks=[callback], max_epochs=2)
    model = tiny_ppo(hidden_sizes=[16, 16])
    with pytest.warns(UserWarning, match="object set 'train' failed and was skipped.*No space left"):
        trainer.fit(model, tiny_rollout_data())
    assert model.env_steps == 2 * STEPS_PER_EPOCH and trainer.current_epoch == 2
    assert videos(tmp_path) == {"train": [], "test": []} and callback.last_videos == {}


def test_video_obj_sets_must_be_evaluated_sets(tmp_path):
    trainer = quiet_trainer(tmp_path, callbacks=[EvaluationVideo(video_obj_sets=["tset"])], max_epochs=1)
    with pytest.raises(ValueError, match=r"names \['tset'\], which the data module does not evaluate"):
        trainer.fit(tiny_ppo(hidden_sizes=[16, 16]), tiny_rollout_data())


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"video_interval": -1}, "video_interval must be an integer >= 0"), ({"max_frames": 0}, "max_frames must be")],
)
def test_impossible_settings_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        EvaluationVideo(**kwargs)


@pytest.mark.parametrize(
    ("env_config", "experiment", "frame_shapes"),
    # MiniGrid renders 32 pixels per cell: the test set's 6x6 and 8x8 rooms.
    [
        ("atari_breakout", "ppo_atari", {(210, 160, 3)}),
        ("minigrid_doorkey", "ppo_minigrid", {(192, 192, 3), (256, 256, 3)}),
    ],
)
def test_atari_and_minigrid_videos_film_the_game_screen_while_the_policy_reads_its_image_observations(
    env_config, experiment, frame_shapes, tmp_path
):
    """Test that a filmed episode of the shipped Atari and MiniGrid envs (their wrappers and test object sets) has
    one frame per step plus the reset's, of the game screen, while the image policy acts on frame stacks / views."""
    from omegaconf import OmegaConf

    from rl_lightning.nets import ActorCritic
    from rl_lightning.video import VideoWriter

    conf = OmegaConf.to_container(OmegaConf.load(os.path.join(CONF, "env", f"{env_config}.yaml")))
    encoder = OmegaConf.to_container(OmegaConf.load(os.path.join(CONF, "experiment", f"{experiment}.yaml")))[
        "algo"
    ].get("encoder")
    env = make_env(conf["env_id"], "test", conf["obj_sets"], render_mode="rgb_array", wrappers=conf["wrappers"])
    policy = ActorCritic(env.observation_space, env.action_space, encoder=encoder)
    path = str(tmp_path / "episode.mp4")
    with VideoWriter(path, fps=30) as video:
        episode = play_episode(policy, env, seed=0, video=video, max_frames=40)
    env.close()
    frames = read_frames(path)
    assert count_frames(path) == len(frames) == min(episode.length + 1, 40)
    assert frames[0].shape in frame_shapes  # the screen, not the 84x84 grey stack or 7x7 codes the policy reads
