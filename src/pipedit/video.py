"""Writing frames to an mp4 file that ffmpeg (and browsers) play."""

from __future__ import annotations

import os
from pathlib import Path

import imageio.v2 as imageio
import numpy as np
import torch


def to_uint8(frames: torch.Tensor | np.ndarray) -> np.ndarray:
    """[F, H, W, 3] floats in [0, 1] -> uint8 (rounded, as diffusers' numpy_to_pil does)."""
    array = frames.detach().cpu().float().numpy() if isinstance(frames, torch.Tensor) else np.asarray(frames)
    return (np.clip(array, 0.0, 1.0) * 255).round().astype(np.uint8)


def write_mp4(frames: torch.Tensor | np.ndarray, path: str | os.PathLike, fps: int = 24) -> Path:
    """Writes H.264/yuv420p. The file appears only when complete (written aside, then renamed)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.partial.mp4")
    images = to_uint8(frames)
    # macro_block_size=1: sizes need only be even (yuv420p); never resize the user's video.
    with imageio.get_writer(partial, format="FFMPEG", fps=fps, codec="libx264", pixelformat="yuv420p",
                            macro_block_size=1, quality=8) as writer:
        for image in images:
            writer.append_data(image)
    os.replace(partial, target)
    return target


def read_mp4(path: str | os.PathLike) -> np.ndarray:
    """All frames as uint8 [F, H, W, 3], decoded by the ffmpeg binary that imageio-ffmpeg ships."""
    import imageio_ffmpeg

    reader = imageio_ffmpeg.read_frames(str(path))
    meta = next(reader)
    width, height = meta["size"]
    frames = [np.frombuffer(raw, dtype=np.uint8).reshape(height, width, 3) for raw in reader]
    return np.stack(frames)
