"""A VideoResult crossing a process boundary (pickled, as Ray moves a rank's result) carries its
frames as 8-bit levels: a quarter of the bytes, the same mp4, within half a level."""

import pickle

import torch

from pipedit.request import VideoResult
from pipedit.video import to_uint8


def test_frames_travel_as_levels():
    frames = torch.rand(9, 64, 96, 3, generator=torch.Generator().manual_seed(0))
    frames[0, 0, 0] = torch.tensor([-0.2, 1.3, 0.5])  # out of range: clamped, as the mp4 writer does
    result = VideoResult("r1", frames, torch.randn(1, 16, 3, 8, 12), {"decode_s": 1.0})
    payload = pickle.dumps(result)
    received = pickle.loads(payload)
    assert len(payload) < frames.numel() * 1.1 + result.latents.numel() * 4 + 4096  # ~1 byte per value
    assert received.frames.dtype == torch.float32 and received.frames.shape == frames.shape
    assert (received.frames - frames.clamp(0, 1)).abs().max().item() <= 0.5 / 255 + 1e-6
    assert (to_uint8(received.frames) == to_uint8(frames)).all()  # the same video
    assert torch.equal(received.latents, result.latents)  # latents stay float32, exact
    assert (received.request_id, received.timings) == ("r1", {"decode_s": 1.0})
