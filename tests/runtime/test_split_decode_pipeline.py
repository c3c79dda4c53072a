"""The request pipeline's per-video choice between one decode rank and the whole decode group, on a fake
executor (no ranks): split when every decode rank is idle and the video has >= 2 units; one rank
per video while another decode is in flight; never with split_decode off. Plus the config, flag
and layout that carry the switch."""

import pytest

from pipedit.cli import build_parser
from pipedit.cli.flags import engine_config
from pipedit.config import ParallelConfig
from pipedit.errors import UserInputError
from pipedit.request import VideoRequest, VideoResult
from pipedit.runtime.layout import WorldLayout
from pipedit.runtime.request_pipeline import RequestPipeline

SPLITTABLE = VideoRequest("splits", height=64, width=64, num_frames=17).shape  # the fake says 2 units
ONE_UNIT = VideoRequest("one unit", height=32, width=32, num_frames=5).shape


class _Ref:
    def __init__(self, value, born):
        self.value, self.born = value, born


class FakeExecutor:
    """Decode calls finish `hold` denoise steps after they were submitted (or when waited on)."""

    def __init__(self, hold: int = 0):
        self.hold, self.steps = hold, 0
        self.submitted: list[tuple[int, str]] = []
        self.asked_units = 0

    def call_rank(self, rank, method, *args, timeout=None):
        if method == "split_units":
            self.asked_units += 1
            return 2 if args[0].shape == SPLITTABLE else 1
        return {}  # encode_prompt, reports

    def call(self, method, *args, timeout=None):
        if method == "step":
            self.steps += 1
            return [self.steps]
        return [2] if method == "begin" else [None]

    def call_all(self, method, *args, timeout=None):
        return []

    def submit(self, method, *args):
        return [_Ref(None, self.steps)]

    def submit_rank(self, rank, method, *args):
        self.submitted.append((rank, method))
        request = args[0]
        lead = method == "decode" or rank == 1
        return _Ref(VideoResult(request.request_id, None, None) if lead else None, self.steps)

    def ready(self, refs, timeout=0.0):
        return [ref for ref in refs if self.steps - ref.born >= self.hold]

    def wait_one(self, refs, timeout=None):
        return refs[0]

    def get(self, refs, timeout=None):
        return [ref.value for ref in refs] if isinstance(refs, list) else refs.value


def _run(executor, split: bool, *shapes):
    layout = WorldLayout(decode=2, split_decode=split)  # denoise rank 0, decode ranks 1 and 2
    requests = [VideoRequest(f"video {i}", height=s.height, width=s.width, num_frames=s.num_frames, steps=2)
                for i, s in enumerate(shapes)]
    outcomes = {o.request_id: o for o in RequestPipeline(executor, layout).run(requests)}
    return [outcomes[r.request_id].timings["decode_ranks"] for r in requests]


def test_idle_group_splits_every_video_that_has_units_to_share():
    executor = FakeExecutor()
    assert _run(executor, True, SPLITTABLE, SPLITTABLE, ONE_UNIT) == [2, 2, 1]
    assert executor.submitted[:2] == [(1, "decode_split"), (2, "decode_split")]
    assert executor.submitted[-1][1] == "decode"
    assert executor.asked_units == 2  # once per video shape


def test_a_decode_in_flight_keeps_one_video_per_rank():
    executor = FakeExecutor(hold=3)  # decodes outlast the next request's 2 steps
    assert _run(executor, True, ONE_UNIT, SPLITTABLE) == [1, 1]
    assert [method for _, method in executor.submitted] == ["decode", "decode"]
    assert sorted(rank for rank, _ in executor.submitted) == [1, 2]


def test_split_decode_off_never_splits():
    executor = FakeExecutor()
    assert _run(executor, False, SPLITTABLE, SPLITTABLE) == [1, 1]
    assert executor.asked_units == 0


def test_config_flag_and_layout():
    assert ParallelConfig().split_decode == "auto"
    with pytest.raises(UserInputError, match="split_decode must be one of auto, off, got 'on'"):
        ParallelConfig(split_decode="on")
    assert WorldLayout.from_config(ParallelConfig(decode_ranks=2), "dit").split_decode
    assert not WorldLayout.from_config(ParallelConfig(decode_ranks=1), "dit").split_decode  # nothing to share
    assert not WorldLayout.from_config(ParallelConfig(decode_ranks=2, split_decode="off"), "dit").split_decode
    args = build_parser().parse_args(["generate", "--prompt", "x", "--output", "x.mp4", "--decode-ranks", "2",
                                      "--split-decode", "off"])
    assert engine_config(args).parallel.split_decode == "off"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["generate", "--prompt", "x", "--output", "x.mp4", "--split-decode", "on"])


def test_a_failed_split_decode_rebuilds_the_group():
    """Its peers may be inside the broadcast or the gather: never 'intact', unlike a lone decode."""
    from pipedit.runtime.rank_failure import leaves_group_intact

    assert leaves_group_intact("decode", MemoryError("out of memory"))
    assert not leaves_group_intact("decode_split", MemoryError("out of memory"))
