"""`pipedit generate --model ltx-2` with the default flags on the demo (128x128, 17 frames at 24 fps,
10 steps, guidance 6: sizes a multiple of 32 and 4k+1 frames, as LTX-2 takes them): the mp4 has an
AAC track as long as the video (within one AAC frame), and `--save-latents` writes the two streams
as a dict (the video's latents and the sound's), not the joint tensor the engine steps."""

import torch

from pipedit.cli import main
from pipedit.sound import probe_audio, read_sound

FRAMES, FPS = 17, 24  # the request defaults
AAC_FRAME = 1024  # samples


def test_generate_with_defaults_writes_the_sound_and_both_latents(tmp_path, monkeypatch):
    monkeypatch.setenv("PIPEDIT_CACHE", str(tmp_path / "cache"))  # the demo is written here
    video, latents = tmp_path / "bell.mp4", tmp_path / "bell.pt"
    assert main(["generate", "--model", "ltx-2", "--prompt", "a bell in the snow", "--output", str(video),
                 "--save-latents", str(latents)]) == 0
    stream = probe_audio(video)
    assert stream is not None and stream.codec == "aac"
    assert abs(read_sound(video).duration_s - FRAMES / FPS) <= AAC_FRAME / stream.sample_rate
    saved = torch.load(latents)
    # The demo: 8 latent channels, 8x spatial and 4x temporal compression; its sound 2 channels of
    # 16 / 4 mel bins, 25 latent frames a second (16 kHz, hop 160, 4x): round(17 / 24 * 25) = 18.
    assert set(saved) == {"latents", "audio_latents"}
    assert saved["latents"].shape == (1, 8, 5, 16, 16)
    assert saved["audio_latents"].shape == (1, 2, 18, 4)
    assert saved["audio_latents"].abs().max() > 0.1
