"""Decode ranks decide VAE tiling on one budget: the tightest decode rank's free memory, fixed on
every decode rank when the group starts (pipedit.runtime.decode_budget). HunyuanVideo's adapters
on the demo checkpoint; the free memory each rank would see is injected, and auto tiling is made
to take its CUDA path (on CPU it never tiles)."""

import pytest

from pipedit.adapter import load_adapter
from pipedit.request import VideoShape
from pipedit.runtime.decode_budget import fix_decode_budget, tightest

SHAPE = VideoShape(height=64, width=96, num_frames=17)


class FakeDecodeRank:
    """A decode rank's two budget calls (DecodeWorker's), over a real adapter that sees `free` bytes."""

    def __init__(self, adapter, free, seen):
        self.adapter, self.free, self.seen = adapter, free, seen

    def decode_free_bytes(self):
        self.seen["free"] = self.free
        return self.adapter.free_decode_bytes()

    def fix_decode_budget(self, free_bytes):
        self.adapter.fix_decode_budget(free_bytes)

    def decode_mode(self):
        self.seen["free"] = self.free
        return self.adapter.decode_mode(self.adapter.latent_shape(SHAPE))


@pytest.fixture
def ranks(demo_checkpoint, monkeypatch):
    from pipedit.integrations.hunyuan_video import adapter as module
    from pipedit.integrations.hunyuan_video.vae_memory import SAFETY_FRACTION, predict_decode_peak_bytes, should_tile

    seen = {}
    monkeypatch.setattr(module, "free_device_bytes", lambda device: seen["free"])
    monkeypatch.setattr(module, "should_tile", lambda mode, device, predicted, free:
                        should_tile(mode, "cuda", predicted, free))
    text_rank, vae_rank = (load_adapter(demo_checkpoint, parts={"vae"}) for _ in range(2))
    predicted = predict_decode_peak_bytes(text_rank.vae_config, text_rank.latent_shape(SHAPE), text_rank.vae.dtype)
    fits = predicted / SAFETY_FRACTION
    # Rank 6 of hunyuan-8gpu.yaml at 720p: the text encoder leaves too little for an untiled decode.
    return {6: FakeDecodeRank(text_rank, int(0.8 * fits), seen), 7: FakeDecodeRank(vae_rank, int(1.5 * fits), seen)}


def test_each_rank_alone_would_decide_differently(ranks):
    assert [ranks[r].decode_mode() for r in (6, 7)] == [1, 0]


def test_the_tightest_budget_is_fixed_on_every_decode_rank_and_both_decide_alike(ranks):
    budget = fix_decode_budget((6, 7), lambda rank, method, *args: getattr(ranks[rank], method)(*args))
    assert budget == ranks[6].free
    assert [ranks[r].decode_mode() for r in (6, 7)] == [1, 1]
    ranks[7].free = 0  # memory seen later no longer matters: the layout's decision holds
    assert ranks[7].decode_mode() == 1 and ranks[6].decode_mode() == 1


def test_nothing_to_fix_with_one_decode_rank_or_on_models_that_do_not_ask():
    calls = []
    assert fix_decode_budget((3,), lambda *call: calls.append(call)) is None and calls == []
    assert tightest([None, None]) is None and tightest([5, None, 3]) == 3
