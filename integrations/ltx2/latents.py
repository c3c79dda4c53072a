"""One request's LTX-2 latents as the one tensor pipedit's engine steps, sends and decodes.

LTX-2 denoises two latents together: the video's [1, C, F, h, w] and the sound's [1, Ca, L, M]
(L latent audio frames of M latent mel bins). The engine knows one latent tensor per request, so
the adapter joins them: the video's channels first, then `extra` channels of the same [F, h, w]
grid that hold the sound's values flattened, zero-padded to fill the last one. The scheduler
steps every element alike (flow-matching Euler is elementwise), the padding's velocity is zero
so it stays zero, and the video decode reads the first C channels without knowing the sound.

Tokens: the transformer takes each stream packed ([1, S, C*pt*p*p] video patches in (f, h, w)
order, [1, L, Ca*M] audio frames), as LTX2Pipeline packs them; `tokens` and `from_tokens` convert.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class JointGrid:
    channels: int  # video latent channels (the transformer's in_channels)
    frames: int  # latent frames F
    height: int  # latent height h
    width: int  # latent width w
    audio_channels: int  # Ca
    audio_frames: int  # L: follows the video's duration (frames / fps)
    mel_bins: int  # M: latent mel bins
    patch: int = 1  # the transformer's spatial patch size
    patch_t: int = 1  # and temporal

    @property
    def cells(self) -> int:
        return self.frames * self.height * self.width

    @property
    def audio_size(self) -> int:
        return self.audio_channels * self.audio_frames * self.mel_bins

    @property
    def extra(self) -> int:
        """Channels holding the sound (at least one, so every grid has the same layout)."""
        return max(1, math.ceil(self.audio_size / self.cells))

    @property
    def shape(self) -> tuple[int, int, int, int, int]:
        return (1, self.channels + self.extra, self.frames, self.height, self.width)

    @property
    def video_tokens(self) -> int:
        return (self.frames // self.patch_t) * (self.height // self.patch) * (self.width // self.patch)

    # -- joint <-> streams -------------------------------------------------------------------
    def join(self, video: torch.Tensor, audio: torch.Tensor) -> torch.Tensor:
        """video [B, C, F, h, w], audio [B, Ca, L, M] -> joint [B, C + extra, F, h, w]."""
        batch = video.shape[0]
        sound = audio.reshape(batch, -1)
        padding = sound.new_zeros(batch, self.extra * self.cells - sound.shape[1])
        sound = torch.cat([sound, padding], dim=1).view(batch, self.extra, self.frames, self.height, self.width)
        return torch.cat([video, sound.to(video.dtype)], dim=1)

    def video(self, joint: torch.Tensor) -> torch.Tensor:
        return joint[:, : self.channels]

    def audio(self, joint: torch.Tensor) -> torch.Tensor:
        batch = joint.shape[0]
        sound = joint[:, self.channels:].reshape(batch, -1)[:, : self.audio_size]
        return sound.reshape(batch, self.audio_channels, self.audio_frames, self.mel_bins)

    # -- streams <-> tokens ------------------------------------------------------------------
    def video_tokens_of(self, video: torch.Tensor) -> torch.Tensor:
        """[B, C, F, h, w] -> patches [B, S, C*pt*p*p] (LTX2Pipeline's packing)."""
        b, c, f, h, w = video.shape
        p, pt = self.patch, self.patch_t
        x = video.reshape(b, c, f // pt, pt, h // p, p, w // p, p)
        return x.permute(0, 2, 4, 6, 1, 3, 5, 7).flatten(4, 7).flatten(1, 3)

    def video_from_tokens(self, tokens: torch.Tensor) -> torch.Tensor:
        b = tokens.shape[0]
        p, pt = self.patch, self.patch_t
        f, h, w = self.frames // pt, self.height // p, self.width // p
        x = tokens.reshape(b, f, h, w, -1, pt, p, p)
        return x.permute(0, 4, 1, 5, 2, 6, 3, 7).flatten(6, 7).flatten(4, 5).flatten(2, 3)

    @staticmethod
    def audio_tokens_of(audio: torch.Tensor) -> torch.Tensor:
        """[B, Ca, L, M] -> [B, L, Ca*M] (every mel bin of a latent frame is one token)."""
        return audio.transpose(1, 2).flatten(2, 3)

    def audio_from_tokens(self, tokens: torch.Tensor) -> torch.Tensor:
        return tokens.unflatten(2, (-1, self.mel_bins)).transpose(1, 2)

    def tokens(self, joint: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.video_tokens_of(self.video(joint)), self.audio_tokens_of(self.audio(joint))

    def from_tokens(self, video_tokens: torch.Tensor, audio_tokens: torch.Tensor) -> torch.Tensor:
        return self.join(self.video_from_tokens(video_tokens), self.audio_from_tokens(audio_tokens))
