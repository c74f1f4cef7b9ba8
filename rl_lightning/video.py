"""Video files of episodes: frames streamed into an mp4, and a GIF of it for TensorBoard.

Frames go to ffmpeg (the binary that ``imageio-ffmpeg`` ships) one at a time through a
pipe, so recording holds one frame in memory however long the episode is: a 500-step
CartPole episode is 500 frames of 400 x 600 x 3 bytes, 360 MB if they were kept.
"""

from __future__ import annotations

import numbers
import os
import subprocess
import tempfile
from typing import Any

import numpy as np

#: Output options of every mp4: H.264 in yuv420p, which browsers, W&B and players show. That
#: pixel format needs even sides, so an odd side is padded by one pixel (CartPole's 600 x 400
#: and MuJoCo's 480 x 480 need nothing).
_MP4_OPTIONS = ["-vf", "pad=ceil(iw/2)*2:ceil(ih/2)*2"]


def _ffmpeg() -> Any:
    try:
        import imageio_ffmpeg
    except ImportError as err:  # a dependency of the package; missing only in a broken install
        raise ImportError("Recording videos needs the imageio-ffmpeg package (it ships the ffmpeg binary): "
                          "pip install imageio-ffmpeg, or reinstall rl_lightning.") from err  # fmt: skip
    return imageio_ffmpeg


class VideoWriter:
    """Writes RGB frames to an mp4 file as they come.

    The file is opened at the first frame (its size fixes the video's) and complete once
    :meth:`close` returns; use it as a context manager. Parent directories are created.

    Args:
        path: The ``.mp4`` file to write (replaced if it exists).
        fps: Frames per second of the video (an env's ``metadata["render_fps"]``).

    Raises:
        ValueError: ``fps`` is not positive.
    """

    def __init__(self, path: str | os.PathLike, fps: float):
        if not isinstance(fps, numbers.Real) or isinstance(fps, bool) or not fps > 0:
            raise ValueError(f"Video fps must be a positive number, got {fps!r}.")
        self.path = os.fspath(path)
        self.fps = float(fps)
        self.frames = 0
        self._size: tuple[int, int] | None = None  # (width, height)
        self._pipe = None

    def add(self, frame: np.ndarray) -> None:
        """Append one frame, ``[height, width, 3]`` uint8 (what ``env.render()`` returns in ``rgb_array`` mode).

        Raises:
            ValueError: The frame is not an RGB image, or its size differs from the first frame's.
        """
        frame = np.asarray(frame)
        if frame.ndim != 3 or frame.shape[2] != 3 or frame.dtype != np.uint8:
            raise ValueError(f"A video frame must be an RGB image [height, width, 3] of uint8, got shape {frame.shape} "
                             f"{frame.dtype}. Make the env with render_mode='rgb_array'.")  # fmt: skip
        size = (frame.shape[1], frame.shape[0])
        if self._pipe is None:
            os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
            self._size = size
            self._pipe = _ffmpeg().write_frames(
                self.path,
                size,
                fps=self.fps,
                codec="libx264",
                macro_block_size=1,  # no resizing to multiples of 16: the pad above keeps the frame as drawn
                output_params=_MP4_OPTIONS,
                ffmpeg_log_level="error",
            )
            self._pipe.send(None)  # start the generator (and ffmpeg)
        elif size != self._size:
            raise ValueError(f"Frame {self.frames} is {size[0]}x{size[1]}, the video {self._size[0]}x{self._size[1]}.")
        self._pipe.send(np.ascontiguousarray(frame))
        self.frames += 1

    def close(self) -> None:
        """Finish the file (nothing is written when no frame came)."""
        if self._pipe is not None:
            self._pipe.close()
            self._pipe = None

    def __enter__(self) -> VideoWriter:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def gif_bytes(path: str | os.PathLike, max_width: int = 320) -> bytes:
    """An animated GIF of an mp4 file, at most ``max_width`` pixels wide (for TensorBoard).

    TensorBoard shows a video as an animated GIF in an image summary, which is what ``SummaryWriter.add_video`` writes;
    it encodes with ``moviepy.editor``, gone since moviepy 2, so the same summary is made here with the ffmpeg binary
    already at hand. Scaling down keeps event files small (a 501-frame CartPole episode: 89 KB).
    """
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "video.gif")
        command = [
            _ffmpeg().get_ffmpeg_exe(),
            "-loglevel",
            "error",
            "-i",
            os.fspath(path),
            "-vf",
            # One palette per GIF (ffmpeg's palettegen/paletteuse) keeps the colours true.
            f"scale='min({max_width},iw)':-2:flags=lanczos,split[a][b];[a]palettegen[p];[b][p]paletteuse",
            out,
        ]
        subprocess.run(command, check=True, capture_output=True)
        with open(out, "rb") as f:
            return f.read()
