"""Where the request pipeline decodes a model's sound, on a fake executor (no ranks): on a second
free decode rank beside the frames (rank 0 hands the latents to both), on the frames' rank where
no second one is free, on the last rank of a split decode; a model without sound sends the calls
it always did. The sound joins the frames' result."""

import torch

from pipedit.request import VideoRequest, VideoResult
from pipedit.runtime.layout import WorldLayout
from pipedit.runtime.request_pipeline import RequestPipeline
from pipedit.sound import Soundtrack
from test_split_decode_pipeline import SPLITTABLE, FakeExecutor, _Ref

ONE_UNIT = VideoRequest("one unit", height=32, width=32, num_frames=5).shape


class SoundExecutor(FakeExecutor):
    """Records every decode-rank call with its arguments; decode_sound (and a split's last rank)
    return a sound track naming the rank that decoded it."""

    def __init__(self, hold: int = 0):
        super().__init__(hold)
        self.calls: list[tuple] = []

    def submit(self, method, *args):
        self.calls.append(("denoise", method, *args))
        return super().submit(method, *args)

    def submit_rank(self, rank, method, *args):
        self.calls.append((rank, method, *args[2:]))
        ref = super().submit_rank(rank, method, *args)
        if method == "decode_sound" or (method == "decode_split" and rank == 2):
            ref.value = Soundtrack(torch.full((1, 8), rank / 10), 16000)
        return ref


def _run(executor, sound: bool, decode: int, *shapes, split: bool = False):
    layout = WorldLayout(decode=decode, split_decode=split)
    requests = [VideoRequest(f"video {i}", height=s.height, width=s.width, num_frames=s.num_frames, steps=2)
                for i, s in enumerate(shapes)]
    outcomes = {o.request_id: o for o in RequestPipeline(executor, layout, sound=sound).run(requests)}
    return [outcomes[r.request_id] for r in requests]


def _sound_rank(result: VideoResult) -> float:
    return round(result.sound.samples[0, 0].item() * 10)


def test_a_second_free_decode_rank_decodes_the_sound_beside_the_frames():
    executor = SoundExecutor()
    (result,) = _run(executor, True, 2, ONE_UNIT)
    assert ("denoise", "finish", 1, 2) in executor.calls  # the latents go to both decode ranks
    assert (1, "decode", False) in executor.calls and (2, "decode_sound") in executor.calls
    assert _sound_rank(result) == 2


def test_with_no_second_free_rank_the_frames_rank_decodes_the_sound():
    executor = SoundExecutor()
    _run(executor, True, 1, ONE_UNIT)
    assert [c for c in executor.calls if c[0] != "denoise"] == [(1, "decode")]  # frames, then sound, on rank 1
    assert ("denoise", "finish", 1) in executor.calls


def test_a_split_decode_has_its_last_rank_decode_the_sound():
    executor = SoundExecutor()
    (result,) = _run(executor, True, 2, SPLITTABLE, split=True)
    assert [c[:2] for c in executor.calls if c[0] != "denoise"] == [(1, "decode_split"), (2, "decode_split")]
    assert _sound_rank(result) == 2


def test_a_model_without_sound_sends_the_calls_it_always_did():
    executor = SoundExecutor(hold=3)  # the first decode outlasts the second request's steps
    results = _run(executor, False, 2, ONE_UNIT, ONE_UNIT)
    decodes = [c for c in executor.calls if c[0] != "denoise"]
    assert sorted(decodes) == [(1, "decode"), (2, "decode")]
    assert [c for c in executor.calls if c[1] == "finish"] == [("denoise", "finish", 1), ("denoise", "finish", 2)]
    assert all(r.sound is None for r in results)
