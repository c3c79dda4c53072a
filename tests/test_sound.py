"""Sound in the mp4: a model that makes sound (capabilities.has_sound, its adapter's decode_sound)
gets an AAC track at its sample rate in the file `generate` writes; a model without sound writes
no audio stream, the same bytes as before. The track is read back with PyAV where it is installed,
and with ffmpeg's own description and decode (pipedit.sound) always."""

import math
import pickle
from dataclasses import replace

import pytest
import torch

from pipedit.cli import main
from pipedit.integrations.hunyuan_video.adapter import HunyuanVideoAdapter
from pipedit.request import VideoResult
from pipedit.sound import Soundtrack, probe_audio, read_sound
from pipedit.video import read_mp4, write_mp4

RATE = 16000
AAC_FRAME = 1024  # samples per AAC frame: what the encoder may pad to


def tone(seconds: float, channels: int = 2, rate: int = RATE, amplitude: float = 0.5) -> Soundtrack:
    t = torch.arange(int(seconds * rate)) / rate
    return Soundtrack(torch.stack([amplitude * torch.sin(2 * math.pi * 440 * (c + 1) * t) for c in range(channels)]),
                      rate)


def latents_sound(latents: torch.Tensor) -> Soundtrack:
    """A test model's sound: half a second whose loudness follows the latents (so equal latents
    give an equal track)."""
    return tone(0.5, amplitude=float(latents.float().abs().mean().clamp(max=1.0)))


def pyav_audio(path):
    """(sample rate, channels, seconds, codec) of the first audio stream by PyAV; skips without PyAV."""
    av = pytest.importorskip("av")
    with av.open(str(path)) as container:
        stream = container.streams.audio[0]
        return stream.rate, stream.channels, float(stream.duration * stream.time_base), stream.codec_context.name


def test_the_mp4_carries_the_sound_as_an_aac_track(tmp_path):
    sound, frames = tone(1.0), torch.rand(9, 32, 48, 3, generator=torch.Generator().manual_seed(0))
    path = write_mp4(frames, tmp_path / "with.mp4", fps=8, sound=sound)
    back = read_sound(path)
    assert (back.sample_rate, back.channels) == (RATE, 2)
    assert abs(back.samples.shape[1] - sound.samples.shape[1]) < AAC_FRAME
    n = min(back.samples.shape[1], sound.samples.shape[1])
    # AAC is lossy: the tone comes back as itself (correlation), not bit for bit.
    correlation = torch.nn.functional.cosine_similarity(back.samples[:, :n], sound.samples[:, :n], dim=1)
    assert correlation.min().item() > 0.9
    assert read_mp4(path).shape == (9, 32, 48, 3)  # the frames as ever
    assert sorted(p.name for p in tmp_path.iterdir()) == ["with.mp4"]  # no WAV or partial file left
    rate, channels, seconds, codec = pyav_audio(path)
    assert (rate, channels, codec) == (RATE, 2, "aac") and seconds == pytest.approx(1.0, abs=AAC_FRAME / RATE)


def test_without_sound_the_mp4_has_no_audio_stream_and_the_same_bytes(tmp_path):
    frames = torch.rand(5, 16, 16, 3, generator=torch.Generator().manual_seed(1))
    silent = write_mp4(frames, tmp_path / "silent.mp4", fps=8)
    assert probe_audio(silent) is None and read_sound(silent) is None
    assert write_mp4(frames, tmp_path / "again.mp4", fps=8, sound=None).read_bytes() == silent.read_bytes()
    assert probe_audio(write_mp4(frames, tmp_path / "loud.mp4", fps=8, sound=tone(0.3, channels=1))).channels == 1


@pytest.mark.parametrize("samples, rate, message", [
    (torch.zeros(3, 10), RATE, r"channels in \(1, 2\), got \(3, 10\)"),
    (torch.zeros(10), RATE, r"\[channels, n\].*got \(10,\)"),
    (torch.zeros(2, 0), RATE, "at least one sample"),
    (torch.zeros(1, 10), 12345, "sample_rate must be one an AAC track takes .*got 12345"),
])
def test_a_sound_track_says_what_is_wrong(samples, rate, message):
    with pytest.raises(ValueError, match=message):
        Soundtrack(samples, rate)


def test_the_sound_travels_with_the_result_between_processes():
    result = VideoResult("r", torch.rand(2, 4, 4, 3), torch.zeros(1), sound=tone(0.1))
    back = pickle.loads(pickle.dumps(result))
    assert back.sound.sample_rate == RATE and torch.equal(back.sound.samples, result.sound.samples)
    assert pickle.loads(pickle.dumps(replace(result, sound=None))).sound is None


@pytest.fixture
def sounding(monkeypatch):
    """The demo model made to make sound (what a family with sound declares)."""
    monkeypatch.setattr(HunyuanVideoAdapter, "capabilities",
                        replace(HunyuanVideoAdapter.capabilities, has_sound=True))
    monkeypatch.setattr(HunyuanVideoAdapter, "decode_sound", lambda self, latents, shape: latents_sound(latents))
    # A model with sound gets the video's shape with its prompt (the sound's length follows it).
    encode = HunyuanVideoAdapter.encode_prompt
    monkeypatch.setattr(HunyuanVideoAdapter, "encode_prompt", lambda self, prompt, shape: encode(self, prompt))


def _generate(checkpoint, output):
    return main(["generate", "--prompt", "a fox", "--model-path", str(checkpoint), "--output", str(output),
                 "--height", "32", "--width", "32", "--num-frames", "5", "--steps", "1"])


def test_generate_writes_the_models_sound_into_the_mp4(demo_checkpoint, tmp_path, sounding):
    assert _generate(demo_checkpoint, tmp_path / "fox.mp4") == 0
    stream = probe_audio(tmp_path / "fox.mp4")
    assert (stream.codec, stream.sample_rate, stream.channels) == ("aac", RATE, 2)
    assert read_sound(tmp_path / "fox.mp4").duration_s == pytest.approx(0.5, abs=AAC_FRAME / RATE)


def test_generate_of_a_model_without_sound_writes_no_audio(demo_checkpoint, tmp_path):
    assert _generate(demo_checkpoint, tmp_path / "fox.mp4") == 0
    assert probe_audio(tmp_path / "fox.mp4") is None
    assert read_mp4(tmp_path / "fox.mp4").shape == (5, 32, 32, 3)
