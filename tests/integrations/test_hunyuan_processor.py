"""The sequence-parallel attention processor on one process equals diffusers' own processor:
the same projections, norms, rotary embedding and masked SDPA, so the outputs are identical."""

import pytest
import torch

from pipedit.attention.registry import get_attention_strategy
from pipedit.distributed.context import ParallelContext
from pipedit.integrations.hunyuan_video.parallel import SequenceParallelAttnProcessor, enable_sequence_parallel


def _inputs(transformer):
    gen = torch.Generator().manual_seed(0)
    config = transformer.config
    mask = torch.zeros(1, 12)
    mask[:, :7] = 1  # padded text: the mask path matters
    return dict(
        hidden_states=torch.randn(1, config.in_channels, 2, 8, 10, generator=gen),
        timestep=torch.tensor([500.0]),
        encoder_hidden_states=torch.randn(1, 12, config.text_embed_dim, generator=gen),
        encoder_attention_mask=mask,
        pooled_projections=torch.randn(1, config.pooled_projection_dim, generator=gen),
        guidance=torch.tensor([6000.0]),
        return_dict=False,
    )


@pytest.mark.parametrize("name", ["local", "ulysses"])
def test_processor_equals_diffusers_on_one_process(demo_checkpoint, name):
    from diffusers import HunyuanVideoTransformer3DModel

    transformer = HunyuanVideoTransformer3DModel.from_pretrained(demo_checkpoint / "transformer")
    inputs = _inputs(transformer)
    with torch.no_grad():
        expected = transformer(**inputs)[0]
        ctx = ParallelContext.single()
        routed = enable_sequence_parallel(transformer, ctx, get_attention_strategy(name, ctx))
        processors = [p for p in transformer.attn_processors.values() if isinstance(p, SequenceParallelAttnProcessor)]
        assert routed == len(processors) == 4  # 2 dual-stream + 2 single-stream blocks, not the refiner
        assert all(p.overlapped == (name == "ulysses") for p in processors)
        got = transformer(**inputs)[0]
    assert torch.equal(got, expected)
