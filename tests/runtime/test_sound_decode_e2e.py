"""A model that makes sound (tests/sound_family) on Ray rank actors: with two decode ranks the
second decodes the sound while the first decodes the frames, and the result equals the one decode
rank's (which decodes the frames, then the sound). Both decode the same latents with the same
VAE; differences come only from thread-count-dependent float reordering in CPU kernels (1e-4),
plus half an 8-bit level for the frames, which travel from a rank actor as levels
(pipedit.request.VideoResult). The sound follows the latents' mean magnitude: within 1e-4 too."""

import pytest

from pipedit import families
from pipedit.config import EngineConfig, ModelConfig, ParallelConfig
from pipedit.request import VideoRequest
from pipedit.runtime.engine import Engine

pytestmark = pytest.mark.slow  # rank groups on Ray, end to end
TOLERANCE = 1e-4
FRAME_TOLERANCE = 0.5 / 255 + TOLERANCE


@pytest.fixture
def sound_model(tmp_path, monkeypatch):
    from tests.sound_family.family import FAMILY
    from tests.sound_family.model import write_demo_checkpoint

    monkeypatch.setenv(families.ENVIRONMENT, "tests.sound_family.family")  # for the rank actors
    families.register(FAMILY)
    try:
        yield write_demo_checkpoint(tmp_path / "sound-demo")
    finally:
        families.unregister(FAMILY.name)


def _decode(path, decode_ranks: int):
    """The result of one request, and the ranks that decoded its sound."""
    for note in path.glob("sound-decoded-by-rank-*"):
        note.unlink()
    config = EngineConfig(model=ModelConfig(path=str(path)), parallel=ParallelConfig(decode_ranks=decode_ranks, aco="off"))
    with Engine(config) as engine:
        result = engine.generate(VideoRequest("a bell in the snow", height=32, width=32, num_frames=5, steps=1))
    return result, sorted(int(note.name.rsplit("-", 1)[1]) for note in path.glob("sound-decoded-by-rank-*"))


def test_a_second_decode_rank_decodes_the_sound_beside_the_frames(ray_session, sound_model):
    alone, alone_ranks = _decode(sound_model, 1)
    beside, beside_ranks = _decode(sound_model, 2)
    assert alone_ranks == [1] and beside_ranks == [2]  # ranks: denoise 0, decode 1 (and 2)
    assert beside.timings["decode_ranks"] == 1  # one video on one rank: not a split decode
    assert (beside.latents - alone.latents).abs().max().item() <= TOLERANCE
    assert (beside.frames - alone.frames).abs().max().item() <= FRAME_TOLERANCE
    assert beside.sound.sample_rate == alone.sound.sample_rate == 16000
    assert (beside.sound.samples - alone.sound.samples).abs().max().item() <= TOLERANCE
