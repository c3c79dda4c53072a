"""The planner's model of a split decode: the schedule simulation splits a video only when every
decode rank is idle (as the scheduler does), the busiest rank's share follows the units, and a
decode rank that may lead a split is planned with the larger of the two peaks."""

from pipedit.planner.cost import Shape
from pipedit.planner.memory import decode_rank_bytes
from pipedit.planner.models import full_size
from pipedit.planner.simulate import Timings, simulate
from pipedit.planner.split_decode import slowest_share, units


def _timings(step_s, split_s):
    return Timings(steps=1, step_s=step_s, decode_s=10.0, decode_ranks=2, split_decode_s=split_s)


def test_idle_decode_group_splits_and_a_busy_one_does_not():
    # Steps slower than a split decode: each video finds the group idle and is split.
    assert simulate(_timings(8.0, 6.0), 3).done_s == (14.0, 22.0, 30.0)
    # Steps faster: the second latent waits for the split to end, then the group is idle again.
    assert simulate(_timings(1.0, 6.0), 2).done_s == (7.0, 13.0)
    # No split: one video per rank.
    assert simulate(_timings(1.0, None), 2).done_s == (11.0, 12.0)


def test_busiest_rank_share_follows_the_units():
    hunyuan, wfvae = full_size("hunyuan-video"), full_size("opensora-plan")
    shape = Shape(720, 1280, 129)
    assert units(hunyuan, shape, tiled=False) == 11  # diffusers' temporal passes for 33 latent frames
    assert units(hunyuan, shape, tiled=True) == 11 * 4 * 7  # and 256-pixel tiles at stride 192
    assert slowest_share(hunyuan, shape, False, 4) == 3 / 11
    assert slowest_share(wfvae, shape, False, 2) == (45 + 20) / 90  # a band of 45 rows plus the halos


def test_a_decode_rank_that_may_lead_a_split_holds_the_whole_video():
    wfvae, shape = full_size("opensora-plan"), Shape(720, 1280, 129)
    alone = decode_rank_bytes(wfvae, shape, False, False, False)
    assert decode_rank_bytes(wfvae, shape, False, False, False, split_ranks=2) >= alone
