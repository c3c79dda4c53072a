"""Per-rank worker for the Wan transformer's sequence-parallel parity (one forward, no Ray).

Every rank builds the same seeded tiny WanTransformer3DModel and inputs, computes diffusers'
single-device forward, then installs pipedit's processors on its own copy and compares. Variants:
Wan2.1 image-to-video (CLIP image tokens before the text, added K/V projections) and Wan2.2
TI2V's per-token timesteps ([B, S], expand_timesteps)."""

from __future__ import annotations

import copy

import torch

from pipedit.attention.aco import AcoShape, plan_aco, serve_aco_calls
from pipedit.attention.kernels import AttentionKernel
from pipedit.attention.registry import get_attention_strategy
from pipedit.distributed.context import ParallelContext
from pipedit.integrations.wan.parallel import enable_sequence_parallel

HEADS, HEAD_DIM, LAYERS, TEXT_DIM, IMAGE_DIM = 5, 8, 2, 24, 20
LATENTS = (2, 4, 3, 6, 10)  # grid 3 x 3 x 5 = 45 tokens: uneven shards on 2, 4 and 7 ranks
TEXT_LEN, IMAGE_TOKENS = 512, 9  # WanAttnProcessor takes every token before the last 512 as image context


def tiny_model(image: bool) -> torch.nn.Module:
    from diffusers import WanTransformer3DModel

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = WanTransformer3DModel(
            patch_size=(1, 2, 2), num_attention_heads=HEADS, attention_head_dim=HEAD_DIM, in_channels=LATENTS[1],
            out_channels=LATENTS[1], text_dim=TEXT_DIM, freq_dim=16, ffn_dim=32, num_layers=LAYERS,
            image_dim=IMAGE_DIM if image else None, added_kv_proj_dim=HEADS * HEAD_DIM if image else None)
        for parameter in model.parameters():  # diffusers zero-initialises some layers: make every one count
            parameter.data.normal_(0, 0.2)
    return model.eval().requires_grad_(False)


def inputs(image: bool, per_token: bool) -> dict:
    gen = torch.Generator().manual_seed(1)
    batch, tokens = LATENTS[0], LATENTS[2] * (LATENTS[3] // 2) * (LATENTS[4] // 2)
    call = {"hidden_states": torch.randn(LATENTS, generator=gen),
            "encoder_hidden_states": torch.randn(batch, TEXT_LEN, TEXT_DIM, generator=gen),
            "timestep": torch.tensor([700.0, 310.0])}
    if image:
        call["encoder_hidden_states_image"] = torch.randn(batch, IMAGE_TOKENS, IMAGE_DIM, generator=gen)
    if per_token:  # TI2V: the first latent frame's tokens at t=0 (the conditioning image), the rest at t
        first_frame = tokens // LATENTS[2]
        call["timestep"] = torch.cat([torch.zeros(batch, first_frame), torch.full((batch, tokens - first_frame),
                                                                                   640.0)], dim=1)
    return call


def forward_worker(rank, world_size, ulysses, ring, options, aco, image, per_token):
    """ulysses x ring denoise ranks (plus world_size - ulysses * ring Aco helpers when aco)."""
    sp = ulysses * ring
    denoise_ranks = list(range(sp))
    ctx = ParallelContext.create(ulysses, ring, ranks=denoise_ranks)
    if ctx is None:  # an Aco helper: serves the self-attentions only
        plan = plan_aco(HEADS, denoise_ranks, list(range(sp, world_size)))
        serve_aco_calls(plan.served_by(rank), AcoShape(0, 0, HEAD_DIM, torch.float32), LAYERS,
                        AttentionKernel(), torch.device("cpu"))
        return {}
    model = tiny_model(image)
    call = inputs(image, per_token)
    reference = model(**call, return_dict=False)[0]
    parallel = copy.deepcopy(model)
    name = "aco" if aco else "usp" if ulysses > 1 and ring > 1 else "ring" if ring > 1 else "ulysses"
    if aco:
        options = {**options, "plan": plan_aco(HEADS, denoise_ranks, list(range(sp, world_size)))}
    strategy = get_attention_strategy(name, ctx, num_heads=HEADS, **options)
    routed = enable_sequence_parallel(parallel, ctx, strategy)
    strategy.active = aco
    out = parallel(**call, return_dict=False)[0]
    return {"routed": routed, "err": (out - reference).abs().max().item(), "scale": reference.abs().max().item()}
