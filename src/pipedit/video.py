"""Writing frames (and a model's sound, as an AAC track) to an mp4 file that ffmpeg (and browsers) play.

imageio-ffmpeg never checks ffmpeg's exit status: on a full disk ffmpeg stops writing and the
writer still returns, leaving a truncated (even empty) file. So every mp4 is written under a
temporary name, checked (size > 0, every frame decodes), fsynced with its folder, and only then
renamed into place; a failed write raises VideoWriteError and removes the temporary file.
"""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

import imageio.v2 as imageio
import numpy as np
import torch

from .sound import Soundtrack, probe_audio, write_wav

# Hazard: imageio-ffmpeg starts ffmpeg with preexec_fn=os.setpgrp (to keep a terminal's Ctrl-C from
# it), and a preexec_fn makes subprocess fork() and run Python in the child. In a process with gRPC
# threads (every Ray worker; Serve replicas write the mp4s) gRPC's fork handlers then crashed the
# child before it became ffmpeg (SIGABRT after "epoll_wait error: Bad file descriptor"), and the
# write failed with a broken pipe. Without a preexec_fn subprocess uses vfork, which runs no fork
# handlers. ffmpeg then shares the caller's process group: a Ctrl-C stops it with the command.
os.environ.setdefault("IMAGEIO_FFMPEG_NO_PREVENT_SIGINT", "1")

LOW_SPACE_BYTES = 1 << 20  # free space under this after a failed write: the disk is full


class VideoWriteError(OSError):
    """An mp4 could not be written completely; str() is one line ("writing the mp4 failed: ...")."""

    def __init__(self, reason: str, code: int | None = None):
        super().__init__(code, f"writing the mp4 failed: {reason}")
        self.reason = reason

    def __str__(self) -> str:
        return self.strerror


def to_uint8(frames: torch.Tensor | np.ndarray) -> np.ndarray:
    """[F, H, W, 3] floats in [0, 1] -> uint8 (rounded, as diffusers' numpy_to_pil does)."""
    array = frames.detach().cpu().float().numpy() if isinstance(frames, torch.Tensor) else np.asarray(frames)
    return (np.clip(array, 0.0, 1.0) * 255).round().astype(np.uint8)


def temp_name(target: str | os.PathLike) -> Path:
    """Where write_mp4 writes before the rename: `.NAME.partial.mp4` beside the target."""
    target = Path(target)
    return target.with_name(f".{target.name}.partial.mp4")


def write_mp4(frames: torch.Tensor | np.ndarray, path: str | os.PathLike, fps: int = 24,
              partial: str | os.PathLike | None = None, sound: Soundtrack | None = None) -> Path:
    """Writes H.264/yuv420p (with `sound`: and an AAC track). The file appears only when complete
    and checked: written under `partial` (default temp_name(path)), verified, fsynced, then
    renamed. VideoWriteError if not."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    aside = Path(partial) if partial is not None else temp_name(target)
    encode_mp4(frames, aside, fps, sound)
    publish(aside, target)
    return target


def encode_mp4(frames: torch.Tensor | np.ndarray, path: str | os.PathLike, fps: int = 24,
               sound: Soundtrack | None = None) -> Path:
    """Writes the mp4 at `path` itself (callers pick a temporary name and rename it with
    `publish`), checks that all frames decode (and that the AAC track of `sound` is there) and
    fsyncs it. On failure the file is removed and VideoWriteError says why (e.g. "No space left on
    device"). Without sound the file is what it was before models made sound, byte for byte."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    images = to_uint8(frames)
    # The track ffmpeg muxes in while it encodes the frames: a WAV beside the mp4, removed after.
    wav = path.with_name(f"{path.name}.wav") if sound is not None else None
    try:
        # ffmpeg_log_level error: a WAV names no channel layout, and ffmpeg's note that it guessed
        # one (stereo, mono) would be printed for every video with sound.
        audio = {} if wav is None else {"audio_path": str(write_wav(sound, wav)), "audio_codec": "aac",
                                        "ffmpeg_log_level": "error"}
        # macro_block_size=1: sizes need only be even (yuv420p); never resize the user's video.
        with imageio.get_writer(path, format="FFMPEG", fps=fps, codec="libx264", pixelformat="yuv420p",
                                macro_block_size=1, quality=8, **audio) as writer:
            for image in images:
                writer.append_data(image)
        verify_mp4(path, len(images))
        if sound is not None:
            _verify_audio(path, sound)
        fsync_file(path)
    except BaseException as error:
        path.unlink(missing_ok=True)
        if isinstance(error, VideoWriteError):
            raise
        if isinstance(error, OSError):
            raise _write_error(error, path.parent) from error
        raise
    finally:
        if wav is not None:
            wav.unlink(missing_ok=True)
    return path


def _verify_audio(path: Path, sound: Soundtrack) -> None:
    stream = probe_audio(path)
    if stream is None or stream.codec != "aac" or stream.sample_rate != sound.sample_rate:
        found = "no audio stream" if stream is None else f"{stream.codec} at {stream.sample_rate} Hz"
        raise _truncated(path, f"{path.stat().st_size} bytes, {found} where an AAC track at {sound.sample_rate} Hz "
                               f"belongs")


def verify_mp4(path: str | os.PathLike, frames: int | None = None) -> None:
    """VideoWriteError unless `path` is a non-empty mp4 whose frames all decode (`frames` of them,
    when given). A cheap probe: ffmpeg decodes the file to nowhere."""
    import imageio_ffmpeg

    path = Path(path)
    size = path.stat().st_size if path.is_file() else 0
    try:
        if size == 0:
            raise ValueError("0 bytes")
        count = imageio_ffmpeg.count_frames_and_secs(str(path))[0]
    except (RuntimeError, ValueError, OSError) as error:
        raise _truncated(path, f"{size} bytes, no readable video ({str(error).splitlines()[0][:80]})") from None
    if frames is not None and count != frames:
        raise _truncated(path, f"{size} bytes, {count} of {frames} frames")


def publish(aside: str | os.PathLike, target: str | os.PathLike) -> None:
    """Renames a complete, fsynced file into place and makes the rename durable."""
    target = Path(target)
    try:
        fsync_dir(target.parent)  # the temporary file's entry, before it takes the final name
        os.replace(aside, target)
        fsync_dir(target.parent)
    except OSError as error:
        raise _write_error(error, target.parent) from error


def fsync_file(path: str | os.PathLike) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(folder: str | os.PathLike) -> None:
    """Makes a rename or a new file in `folder` durable (a no-op where folders cannot be opened)."""
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError as error:
        if error.errno not in (errno.EINVAL, errno.EBADF):  # folders that cannot be fsynced
            raise
    finally:
        os.close(fd)


def _disk_full(folder: Path) -> bool:
    try:
        return shutil.disk_usage(folder).free < LOW_SPACE_BYTES
    except OSError:
        return False


def _truncated(path: Path, detail: str) -> VideoWriteError:
    if _disk_full(path.parent):
        return VideoWriteError(f"{os.strerror(errno.ENOSPC)} ({detail})", errno.ENOSPC)
    return VideoWriteError(f"the file ffmpeg wrote is incomplete ({detail})", errno.EIO)


def _write_error(error: OSError, folder: Path) -> VideoWriteError:
    code = error.errno
    if code in (None, errno.EPIPE) and _disk_full(folder):  # ffmpeg died on the full disk; we saw the pipe
        code = errno.ENOSPC
    reason = os.strerror(code) if code else str(error).splitlines()[0]
    return VideoWriteError(reason, code)


def read_mp4(path: str | os.PathLike) -> np.ndarray:
    """All frames as uint8 [F, H, W, 3], decoded by the ffmpeg binary that imageio-ffmpeg ships."""
    import imageio_ffmpeg

    reader = imageio_ffmpeg.read_frames(str(path))
    meta = next(reader)
    width, height = meta["size"]
    frames = [np.frombuffer(raw, dtype=np.uint8).reshape(height, width, 3) for raw in reader]
    return np.stack(frames)
