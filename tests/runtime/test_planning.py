import pytest

from pipedit.config import ParallelConfig
from pipedit.errors import UserInputError
from pipedit.planner import balance_decode_ranks, split_denoise_ranks
from pipedit.runtime.layout import WorldLayout


def test_balance_rule():
    # N_decode ~= T_decode / (T_decode + T_denoise) * N, at least one rank per group.
    assert balance_decode_ranks(t_denoise=3.0, t_decode=1.0, ranks=8) == 2
    assert balance_decode_ranks(t_denoise=1.0, t_decode=1.0, ranks=8) == 4
    assert balance_decode_ranks(t_denoise=100.0, t_decode=1.0, ranks=8) == 1
    assert balance_decode_ranks(t_denoise=1.0, t_decode=100.0, ranks=8) == 7


def test_denoise_ranks_prefer_ulysses_within_the_head_count():
    assert split_denoise_ranks(6, heads=24) == (6, 1)
    assert split_denoise_ranks(7, heads=24) == (7, 1)  # uneven heads are fine
    assert split_denoise_ranks(8, heads=4) == (4, 2)


def test_layout_parts_keep_dit_and_vae_apart():
    layout = WorldLayout(ulysses=2, decode=2, text_on="vae", aco=True)
    assert [layout.parts(r) for r in range(4)] == [{"dit"}, {"dit"}, {"vae", "text"}, {"vae"}]
    alone = WorldLayout()
    assert alone.parts(0) == {"dit", "vae", "text"}


def test_layout_from_config():
    layout = WorldLayout.from_config(ParallelConfig(ulysses=2, decode_ranks=1), preferred_text_on="vae")
    assert (layout.world_size, layout.text_on, layout.aco, layout.text_rank) == (3, "vae", True, 2)
    no_decode = WorldLayout.from_config(ParallelConfig(ulysses=2), preferred_text_on="vae")
    assert (no_decode.text_on, no_decode.aco) == ("dit", False)
    with_ring = WorldLayout.from_config(ParallelConfig(ulysses=1, ring=2, decode_ranks=1), "vae")
    assert not with_ring.aco  # Aco shares Ulysses heads: not with ring attention


@pytest.mark.parametrize(
    "settings,message",
    [
        (dict(decode_ranks="auto"), "needs the total rank count"),
        (dict(decode_ranks=-1), "decode_ranks must be"),
        (dict(ulysses=2, decode_ranks=1, ranks=4), "ranks 4 != ulysses"),
        (dict(aco="on"), "aco on needs decode ranks"),
        (dict(ring=2, decode_ranks=1, aco="on"), "aco on needs decode ranks"),
        (dict(handoff="nccl"), "handoff must be one of"),
        (dict(text_encoder="cpu"), "text_encoder must be one of"),
    ],
)
def test_bad_pipeline_settings(settings, message):
    with pytest.raises(UserInputError, match=message):
        ParallelConfig(**settings)
