"""Peak memory per GPU of a configuration: weights + activations + the VAE decode's peak.

The VAE decode's peak is its family's (the pipedit.families entry's planner.vae_peak). Two-expert
models (Wan2.2 A14B) hold both transformers with `idle_expert` "resident"; with "offload" the idle
one waits in host memory and only one is on the GPU at a time.

Host memory (per node, every rank together: pipedit.planner.search.host_bytes): each rank
process's own anonymous memory, plus with an offloaded idle expert that expert's checkpoint
files, memory-mapped by every rank and so held once per node in the page cache
(pipedit.mapped_weights); loading builds the idle expert straight onto that mapping
(the family's expert loader), with no copy of its own per rank.
"""

from __future__ import annotations

import math

from .. import families
from ..config import IDLE_EXPERT_MODES
from .cost import ACT_BYTES, Shape
from .models import ModelSpec

ALLOCATOR_OVERHEAD = 1.1  # caching allocator fragmentation and CUDA context on top
CONTEXT_BYTES = 0.6e9  # CUDA context, cuBLAS/NCCL workspaces
# A GPU rank process's anonymous host memory (Python, torch, the CUDA context's host side): 0.5 GiB
# throughout a full-size Wan expert swap on one H100 (docs/gpu-nodes.md). Its shared libraries are
# file pages, shared by the node's ranks, and not counted.
RANK_HOST_BYTES = 0.5 * 1024 ** 3


def dit_activation_bytes(model: ModelSpec, shape: Shape, ulysses: int, ring: int) -> float:
    """Live tensors of one block at its widest moment (inference: nothing kept across blocks)."""
    s = model.video_tokens(shape.height, shape.width, shape.frames)
    tokens_local = (s + (0 if model.cross_attention else model.text_tokens)) / (ulysses * ring)
    width_local = math.ceil(model.heads / ulysses) * model.head_dim
    seq_gathered = tokens_local * ulysses
    block = tokens_local * model.hidden * (3 + model.mlp_ratio)  # residual, normed input, MLP hidden
    attention = seq_gathered * width_local * 5  # q, k, v gathered, output, all-to-all buffer
    side = model.side_stream  # whole on every rank: its residual, normed input and MLP hidden
    block += side.tokens(shape.frames) * side.hidden * (3 + side.mlp_ratio) if side else 0
    return model.cfg_batch * (block + attention) * ACT_BYTES


def vae_decode_peak_bytes(model: ModelSpec, shape: Shape, tiled: bool) -> float:
    return families.load(families.family(model.family).planner.vae_peak)(model, shape, tiled)


IDLE_EXPERT = IDLE_EXPERT_MODES  # model.idle_expert


def dit_weight_bytes(model: ModelSpec, idle_expert: str = "resident") -> float:
    """The transformers a denoise rank holds on the GPU (every rank holds whole ones)."""
    if idle_expert not in IDLE_EXPERT:
        raise ValueError(f"idle_expert must be one of {', '.join(IDLE_EXPERT)}, got {idle_expert!r}")
    on_gpu = model.experts if idle_expert == "resident" else 1
    return on_gpu * model.dit_params * model.dit_bytes_per_param


def fp8_bytes_per_param(model: ModelSpec) -> float:
    """Bytes per DiT parameter under model.quantize fp8: the blocks' attention and MLP linears
    (pipedit.runtime.fp8's rule) in float8, 1 byte plus a 4-byte scale per output row (counted as
    4 / hidden per parameter); the rest (norms, embeddings, modulation, the final projection) in
    the serving dtype (2 bytes)."""
    square = model.hidden * model.hidden
    per_stream = (4 + 2 * model.mlp_ratio) * square  # q, k, v, out + the MLP's two linears
    streams = 2 * model.dual_layers + model.single_layers  # dual-stream blocks: text has its own
    cross = model.single_layers * 4 * square if model.cross_attention else 0.0
    quantized = min(model.dit_params, streams * per_stream + cross)
    total = quantized * (1 + 4 / model.hidden) + (model.dit_params - quantized) * 2
    return total / model.dit_params if model.dit_params else 2.0


def with_quantize(model: ModelSpec, quantize: str) -> ModelSpec:
    """The model as served with model.quantize `quantize` ("none" or "fp8")."""
    from dataclasses import replace

    return replace(model, dit_bytes_per_param=fp8_bytes_per_param(model)) if quantize == "fp8" else model


def expert_file_bytes(model: ModelSpec) -> float:
    """One expert's checkpoint files, in their dtype: what an offloaded expert's mapping holds and
    a swap copies (the spec's expert_file_bytes where read from a checkpoint, else the files are
    taken to be in the dtype the model serves in)."""
    return model.expert_file_bytes or model.dit_params * model.dit_bytes_per_param


def idle_expert_host_bytes(model: ModelSpec, idle_expert: str) -> float:
    """The node's one page-cache copy of an offloaded idle expert's checkpoint files, in the
    files' bytes (a float32 checkpoint of a bf16 model maps twice the expert); 0 when resident."""
    if model.experts < 2 or idle_expert == "resident":
        return 0.0
    return expert_file_bytes(model)


def adapter_bytes(model: ModelSpec, rank: int) -> float:
    """One LoRA adapter of rank `rank` over every attention projection (q, k, v, out) of the DiT, as
    the step-distill and style adapters of these models have them: a (hidden x rank, rank x hidden)
    pair per projection, in the serving dtype. A block has two attentions where text has its own
    projections (HunyuanVideo's dual-stream blocks) or enters by cross-attention (Wan, OpenSoraPlan);
    adapters that also target the FFN are larger. Two experts: one adapter each (experts: both)."""
    attentions = 2 * model.dual_layers + model.single_layers * (2 if model.cross_attention else 1)
    return model.experts * attentions * 4 * 2 * model.hidden * rank * model.dit_bytes_per_param


def denoise_rank_bytes(model: ModelSpec, shape: Shape, ulysses: int, ring: int, with_text: bool,
                       with_vae: bool, tiled: bool, idle_expert: str = "resident") -> float:
    weights = dit_weight_bytes(model, idle_expert) + model.lora_bytes
    if with_text:
        weights += model.text_params * 2
    peak = dit_activation_bytes(model, shape, ulysses, ring)
    if with_vae:
        weights += model.vae_params * 2
        peak = max(peak, vae_decode_peak_bytes(model, shape, tiled))
    return ALLOCATOR_OVERHEAD * (weights + peak) + CONTEXT_BYTES


def encode_peak_bytes(model: ModelSpec) -> float:
    """Live activations of one prompt encode: the widest text encoder's hidden states of every
    layer (HunyuanVideo's Llama hands a middle layer on: all are kept) and a block's working set,
    for the guided batch. Width and depth from the parameter count, as a transformer's
    12 x layers x width^2 with one layer per 128 of width (Llama-3-8B: 4096 wide, 32 layers). An
    image's VAE encode (image-to-video) is not modelled here; the dry run measures it."""
    peaks = [0.0]
    for encoder in model.text_encoders:
        width = (encoder.params * 128 / 12) ** (1 / 3)
        peaks.append(model.cfg_batch * encoder.tokens * width * (width / 128 + 8) * ACT_BYTES)
    return max(peaks)


def decode_rank_bytes(model: ModelSpec, shape: Shape, with_text: bool, tiled: bool, aco: bool,
                      split_ranks: int = 1) -> float:
    """split_ranks > 1: the rank may also lead a decode split over that many ranks (it holds the
    whole decoded video then); the larger of the two peaks. with_text: the next request's encode
    runs beside a decode (DeDiVAE), so the two peaks add up."""
    weights = model.vae_params * 2 + (model.text_params * 2 if with_text else 0)
    peak = vae_decode_peak_bytes(model, shape, tiled) + (encode_peak_bytes(model) if with_text else 0.0)
    if split_ranks > 1:
        from .split_decode import split_rank_bytes

        peak = max(peak, split_rank_bytes(peak, model, shape, tiled, split_ranks, lead=True))
    if aco:  # a share of the heads' q, k, v and output over the whole sequence
        s = model.video_tokens(shape.height, shape.width, shape.frames) + model.text_tokens
        peak = max(peak, model.cfg_batch * s * model.hidden * 4 * ACT_BYTES / 2)
    return ALLOCATOR_OVERHEAD * (weights + peak) + CONTEXT_BYTES
