"""Per-rank worker for the LTX-2 transformer's sequence-parallel parity (one forward, no Ray).

Every rank builds the same seeded tiny LTX2VideoTransformer3DModel (the test dims, not the demo's:
4 heads, 3 blocks) and inputs, computes diffusers' single-device forward, then installs pipedit's
processors on its own copy and compares video and audio outputs. Variants: LTX-2.3 (gated
attention, prompt modulation, the perturbed-attention processor), image-to-video's per-token
video timesteps, the STG pass (block 1 perturbed) and the modality-isolated pass."""

from __future__ import annotations

import copy

import torch

from pipedit.attention.aco import AcoShape, plan_aco, serve_aco_calls
from pipedit.attention.kernels import AttentionKernel
from pipedit.attention.registry import get_attention_strategy
from pipedit.distributed.context import ParallelContext
from pipedit.integrations.ltx2.demo_checkpoint import TEST_DIMS, _transformer
from pipedit.integrations.ltx2.parallel import enable_sequence_parallel

HEADS, HEAD_DIM, LAYERS = TEST_DIMS.heads, TEST_DIMS.head_dim, TEST_DIMS.layers
GRID = (3, 3, 5)  # latent frames, height, width: 45 video tokens, uneven shards on 2 and 4 ranks
AUDIO_FRAMES, TEXT_LEN = 7, 16


def tiny_model(version: str) -> torch.nn.Module:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = _transformer(TEST_DIMS, version)
        for parameter in model.parameters():  # diffusers zero-initialises some layers: make every one count
            parameter.data.normal_(0, 0.2)
    return model.eval().requires_grad_(False)


def inputs(model, per_token: bool, batch: int = 2) -> dict:
    gen = torch.Generator().manual_seed(1)
    config = model.config
    tokens = GRID[0] * GRID[1] * GRID[2]
    mask = torch.ones(batch, TEXT_LEN, dtype=torch.int64)
    mask[0, :5] = 0  # a padded prompt
    timestep = torch.tensor([700.0, 310.0][:batch])
    call = {"hidden_states": torch.randn(batch, tokens, config.in_channels, generator=gen),
            "audio_hidden_states": torch.randn(batch, AUDIO_FRAMES, config.audio_in_channels, generator=gen),
            "encoder_hidden_states": torch.randn(batch, TEXT_LEN, config.caption_channels if config.use_prompt_embeddings
                                                 else config.num_attention_heads * config.attention_head_dim,
                                                 generator=gen),
            "audio_encoder_hidden_states": torch.randn(batch, TEXT_LEN, config.caption_channels
                                                       if config.use_prompt_embeddings
                                                       else config.audio_num_attention_heads
                                                       * config.audio_attention_head_dim, generator=gen),
            "encoder_attention_mask": mask, "audio_encoder_attention_mask": mask,
            "timestep": timestep, "sigma": timestep / 1000, "audio_timestep": timestep,
            "num_frames": GRID[0], "height": GRID[1], "width": GRID[2], "fps": 24.0,
            "audio_num_frames": AUDIO_FRAMES, "use_cross_timestep": True}
    if per_token:  # image-to-video: the first latent frame's tokens at t=0, the rest at t
        first = tokens // GRID[0]
        call["timestep"] = torch.cat([torch.zeros(batch, first), timestep[:, None].expand(batch, tokens - first)], 1)
    return call


def forward_worker(rank, world_size, ulysses, ring, options, aco, version, per_token, guidance_pass):
    """ulysses x ring denoise ranks (plus world_size - ulysses * ring Aco helpers when aco).
    guidance_pass: None, "stg" (block 1's self-attention perturbed) or "isolated"."""
    sp = ulysses * ring
    denoise_ranks = list(range(sp))
    ctx = ParallelContext.create(ulysses, ring, ranks=denoise_ranks)
    if ctx is None:  # an Aco helper: serves the video self-attentions only
        plan = plan_aco(HEADS, denoise_ranks, list(range(sp, world_size)))
        serve_aco_calls(plan.served_by(rank), AcoShape(0, 0, HEAD_DIM, torch.float32), LAYERS,
                        AttentionKernel(), torch.device("cpu"))
        return {}
    model = tiny_model(version)
    call = inputs(model, per_token, batch=1 if guidance_pass else 2)
    if guidance_pass == "stg":
        call["spatio_temporal_guidance_blocks"] = [1]
    if guidance_pass == "isolated":
        call["isolate_modalities"] = True
    video_ref, audio_ref = model(**call, return_dict=False)
    parallel = copy.deepcopy(model)
    name = "aco" if aco else "usp" if ulysses > 1 and ring > 1 else "ring" if ring > 1 else "ulysses"
    if aco:
        options = {**options, "plan": plan_aco(HEADS, denoise_ranks, list(range(sp, world_size)))}
    strategy = get_attention_strategy(name, ctx, num_heads=HEADS, **options)
    routed = enable_sequence_parallel(parallel, ctx, strategy)
    strategy.active = aco
    video, audio = parallel(**call, return_dict=False)
    return {"routed": routed, "video_err": (video - video_ref).abs().max().item(),
            "video_scale": video_ref.abs().max().item(), "audio_err": (audio - audio_ref).abs().max().item(),
            "audio_scale": audio_ref.abs().max().item()}
