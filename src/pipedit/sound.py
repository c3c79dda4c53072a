"""A model's sound track, beside its frames: plain data that travels with a VideoResult, and the
reading and writing the mp4's AAC track needs (the ffmpeg binary imageio-ffmpeg ships).

A model that makes sound says so in its capabilities (`has_sound`) and returns a Soundtrack from
its adapter's `decode_sound` hook (pipedit.model_hooks); pipedit.video muxes it into the mp4."""

from __future__ import annotations

import re
import subprocess
import wave
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

# The sampling rates an AAC track may have (ffmpeg's encoder refuses the others).
AAC_SAMPLE_RATES = (7350, 8000, 11025, 12000, 16000, 22050, 24000, 32000, 44100, 48000, 64000, 88200, 96000)
CHANNELS = (1, 2)  # mono, stereo


@dataclass(frozen=True)
class Soundtrack:
    """One request's sound: `samples` [channels, n] float32 in [-1, 1] at `sample_rate` Hz."""

    samples: torch.Tensor
    sample_rate: int

    def __post_init__(self) -> None:
        samples = self.samples
        if not isinstance(samples, torch.Tensor) or samples.ndim != 2 or samples.shape[0] not in CHANNELS:
            shape = tuple(samples.shape) if isinstance(samples, torch.Tensor) else type(samples).__name__
            raise ValueError(f"a sound track's samples must be a tensor [channels, n] with channels in {CHANNELS}, "
                             f"got {shape}")
        if samples.shape[1] == 0:
            raise ValueError("a sound track must have at least one sample per channel, got 0")
        if self.sample_rate not in AAC_SAMPLE_RATES:
            raise ValueError(f"a sound track's sample_rate must be one an AAC track takes "
                             f"({', '.join(map(str, AAC_SAMPLE_RATES))} Hz), got {self.sample_rate}")
        object.__setattr__(self, "samples", samples.detach().float().cpu().contiguous())

    @property
    def channels(self) -> int:
        return self.samples.shape[0]

    @property
    def duration_s(self) -> float:
        return self.samples.shape[1] / self.sample_rate


def write_wav(sound: Soundtrack, path: str | Path) -> Path:
    """16-bit PCM WAV (ffmpeg's input for the AAC track; AAC keeps less than 16 bits anyway).
    Samples outside [-1, 1] are clipped, NaN written as silence."""
    samples = torch.nan_to_num(sound.samples, nan=0.0).clamp(-1.0, 1.0).numpy()
    levels = np.round(samples.T * 32767.0).astype("<i2")  # interleaved: one frame per row
    with wave.open(str(path), "wb") as out:
        out.setnchannels(sound.channels)
        out.setsampwidth(2)
        out.setframerate(sound.sample_rate)
        out.writeframes(levels.tobytes())
    return Path(path)


@dataclass(frozen=True)
class AudioStream:
    """The first audio stream of a media file, as ffmpeg describes it."""

    codec: str
    sample_rate: int
    channels: int


_AUDIO_LINE = re.compile(r"Stream #\d+:\d+.*?: Audio: (\w+).*?, (\d+) Hz, (mono|stereo|\d+ channels)")


def probe_audio(path: str | Path) -> AudioStream | None:
    """The file's first audio stream (None: it has none), read from `ffmpeg -i`'s description."""
    import imageio_ffmpeg

    described = subprocess.run([imageio_ffmpeg.get_ffmpeg_exe(), "-hide_banner", "-i", str(path)],
                               capture_output=True, text=True, errors="replace").stderr
    found = _AUDIO_LINE.search(described)
    if found is None:
        return None
    layout = found.group(3)
    channels = {"mono": 1, "stereo": 2}.get(layout) or int(layout.split()[0])
    return AudioStream(found.group(1), int(found.group(2)), channels)


def read_sound(path: str | Path) -> Soundtrack | None:
    """The file's first audio stream decoded (None: it has none), at its own rate and channels."""
    import imageio_ffmpeg

    stream = probe_audio(path)
    if stream is None:
        return None
    decoded = subprocess.run([imageio_ffmpeg.get_ffmpeg_exe(), "-v", "error", "-i", str(path), "-map", "0:a:0",
                              "-f", "f32le", "-acodec", "pcm_f32le", "-"], capture_output=True, check=True).stdout
    samples = np.frombuffer(decoded, dtype="<f4").reshape(-1, stream.channels).T.copy()
    return Soundtrack(torch.from_numpy(samples), stream.sample_rate)
