"""Video files: frames streamed to ffmpeg, counted and read back, and the GIF for TensorBoard."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from rl_lightning.video import VideoWriter, gif_bytes
from tests.helpers import count_frames, read_frames


def frames(n: int, height: int = 64, width: int = 96) -> list[np.ndarray]:
    """``n`` frames, each a different flat grey (so they can be told apart after lossy coding)."""
    return [np.full((height, width, 3), 20 + 10 * i, dtype=np.uint8) for i in range(n)]


def test_writes_every_frame_in_order(tmp_path):
    path = tmp_path / "sub" / "clip.mp4"  # parent directories are created
    with VideoWriter(path, fps=10) as video:
        for frame in frames(12):
            video.add(frame)
    assert video.frames == count_frames(path) == 12
    read = read_frames(path)
    assert [f.shape for f in read] == [(64, 96, 3)] * 12
    greys = [float(f.mean()) for f in read]
    assert greys == sorted(greys) and greys[-1] - greys[0] > 90  # order and content survive H.264


def test_odd_sizes_are_padded_not_refused(tmp_path):
    with VideoWriter(tmp_path / "odd.mp4", fps=5) as video:
        for frame in frames(3, height=51, width=77):
            video.add(frame)
    assert read_frames(tmp_path / "odd.mp4")[0].shape == (52, 78, 3)


def test_bad_frames_and_fps_are_refused_with_the_fix(tmp_path):
    with pytest.raises(ValueError, match="fps must be a positive number"):
        VideoWriter(tmp_path / "a.mp4", fps=0)
    video = VideoWriter(tmp_path / "a.mp4", fps=5)
    with pytest.raises(ValueError, match="render_mode='rgb_array'"):
        video.add(np.zeros((8, 8), dtype=np.uint8))
    video.add(frames(1)[0])
    with pytest.raises(ValueError, match="is 32x32, the video 96x64"):
        video.add(np.zeros((32, 32, 3), dtype=np.uint8))
    video.close()
    assert count_frames(tmp_path / "a.mp4") == 1


def test_frames_are_not_kept_in_memory(tmp_path):
    """200 frames of 500 x 500 (what Pendulum renders) are 150 MB; the writer holds about one."""
    frame_bytes = 500 * 500 * 3
    tracemalloc.start()
    try:
        with VideoWriter(tmp_path / "long.mp4", fps=30) as video:
            for i in range(200):
                video.add(np.full((500, 500, 3), i % 256, dtype=np.uint8))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert count_frames(tmp_path / "long.mp4") == 200
    assert peak < 5 * frame_bytes


def test_gif_for_tensorboard_is_an_animation_at_most_320_wide(tmp_path):
    from PIL import Image

    with VideoWriter(tmp_path / "clip.mp4", fps=10) as video:
        for frame in frames(6, height=400, width=600):
            video.add(frame)
    out = tmp_path / "clip.gif"
    out.write_bytes(gif_bytes(tmp_path / "clip.mp4"))
    with Image.open(out) as gif:
        assert gif.format == "GIF" and gif.size == (320, 214) and gif.n_frames == 6
