"""Per-rank worker for the OpenSoraPlan transformer's sequence-parallel parity (one forward).

Every rank builds the same seeded tiny transformer (sparse layers 2..5 with single and group
skip) and inputs (text padding, uneven token shards), computes the single-device forward, then
installs the parallel processors on its own copy and compares."""

from __future__ import annotations

import copy

import torch

from pipedit.attention.aco import AcoShape, plan_aco, serve_aco_calls
from pipedit.attention.kernels import AttentionKernel
from pipedit.attention.registry import get_attention_strategy
from pipedit.distributed.context import ParallelContext
from pipedit.integrations.opensora_plan.demo_checkpoint import demo_transformer_config, random_state
from pipedit.integrations.opensora_plan.parallel import enable_sequence_parallel
from pipedit.integrations.opensora_plan.transformer import OpenSoraPlanTransformer, TransformerConfig

HEADS, HEAD_DIM, LAYERS, TEXT_DIM, TEXT_LEN = 3, 12, 6, 32, 7
LATENTS = (2, 8, 3, 10, 6)  # grid 3 x 5 x 3 = 45 tokens: uneven shards, Skiparse padding to 48


def tiny_model() -> OpenSoraPlanTransformer:
    config = demo_transformer_config(num_layers=LAYERS, heads=HEADS, head_dim=HEAD_DIM, text_dim=TEXT_DIM)
    model = OpenSoraPlanTransformer(TransformerConfig.from_dict(config))
    model.load_state_dict(random_state(model, seed=0, std=0.1))
    return model.eval().requires_grad_(False)


def inputs():
    gen = torch.Generator().manual_seed(1)
    latents = torch.randn(LATENTS, generator=gen)
    text = torch.randn(LATENTS[0], TEXT_LEN, TEXT_DIM, generator=gen)
    mask = torch.ones(LATENTS[0], TEXT_LEN)
    mask[0, 4:] = 0  # a padded prompt
    return latents, torch.tensor([700.0, 700.0]), text, mask


def forward_worker(rank, world_size, ulysses, options, aco):
    """ulysses denoise ranks (plus world_size - ulysses Aco helpers when aco)."""
    denoise_ranks = list(range(ulysses))
    ctx = ParallelContext.create(ulysses, 1, ranks=denoise_ranks)
    calls = LAYERS  # self-attentions only: cross-attention runs locally on every rank
    if ctx is None:  # an Aco helper
        plan = plan_aco(HEADS, denoise_ranks, list(range(ulysses, world_size)))
        serve_aco_calls(plan.served_by(rank), AcoShape(0, 0, HEAD_DIM, torch.float32), calls,
                        AttentionKernel(), torch.device("cpu"))
        return {}
    model = tiny_model()
    latents, timestep, text, mask = inputs()
    reference = model(latents, timestep, text, encoder_attention_mask=mask)
    parallel = copy.deepcopy(model)
    if aco:
        options = {**options, "plan": plan_aco(HEADS, denoise_ranks, list(range(ulysses, world_size)))}
    strategy = get_attention_strategy("aco" if aco else "ulysses", ctx, num_heads=HEADS, **options)
    routed = enable_sequence_parallel(parallel, ctx, strategy)
    strategy.active = aco
    out = parallel(latents, timestep, text, encoder_attention_mask=mask)
    return {"routed": routed, "err": (out - reference).abs().max().item(), "scale": reference.abs().max().item()}
