"""FLOPs and bytes per op of one denoising step, a VAE decode and a text encoding, from a
ModelSpec; and their times on a Node.

Conventions: a multiply-add is 2 FLOPs; activations are bf16 (2 bytes); S is the number of video
tokens of the whole sequence, B the batch of one forward (2 with classifier-free guidance).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .hardware import Node
from .models import ModelSpec
from .vae_cost import vae_decode_flops

ACT_BYTES = 2
# Assumed, not measured: hidden-width tensors each block reads or writes per token outside GEMMs
# and attention: 2 norms and 2 modulations (read + write: 8), 2 gated residuals (6), q/k norms and
# RoPE on q and k (8), the MLP activation over 4x width (8), attention layout copies (~10).
ELEMENTWISE_PASSES = 40


@dataclass(frozen=True)
class Shape:
    height: int
    width: int
    frames: int


@dataclass(frozen=True)
class StepWork:
    """One denoising step of the whole model over all ranks (not yet divided)."""

    linear_flops: float
    attention_flops: float  # self + cross attention, dense equivalent after Skiparse
    elementwise_bytes: float
    a2a_bytes_per_layer: float  # Q, K, V (pre) + O (post) of the video tokens, whole sequence
    attn_layers: int  # attention calls per step that need an all-to-all
    kernels_per_layer: int = 30  # assumed kernel launches per block (eager PyTorch, fused attention)
    replicated_flops: float = 0.0  # every rank runs it whole (a side stream's own tokens: SideStream)


@dataclass(frozen=True)
class BlockWork:
    """One dense transformer block's forward over one batch element (no CFG), at S video tokens."""

    linear_flops: float  # every GEMM: Q, K, V, O, the MLP, cross-attention's projections
    self_attention_flops: float  # 4 N^2 d: Q K^T and P V over the N tokens attending (S, or S + text)
    cross_attention_flops: float  # 4 S T d: video queries over text keys (0 with joint attention)
    elementwise_bytes: float

    @property
    def flops(self) -> float:
        return self.linear_flops + self.self_attention_flops + self.cross_attention_flops


def block_work(model: ModelSpec, s: int) -> BlockWork:
    """The cost model's count for one block at `s` video tokens (step_work multiplies it out): the
    one place of the FLOP formulas, which the benches use too."""
    t, h = model.text_tokens, model.hidden
    per_token_block = (4 + 2 * model.mlp_ratio) * h * h  # Q, K, V, O and the two MLP GEMMs (MACs)
    if model.cross_attention:
        # Cross-attention: Q and O on video tokens, K and V on the text tokens.
        cross = 2 * h * h * s + 2 * h * h * t
        return BlockWork(2 * (per_token_block * s + cross), 4 * s * s * h, 4 * s * t * h,
                         ELEMENTWISE_PASSES * (s + t) * h * ACT_BYTES)
    return BlockWork(2 * per_token_block * (s + t), 4 * (s + t) ** 2 * h, 0.0,
                     ELEMENTWISE_PASSES * (s + t) * h * ACT_BYTES)


def side_stream_work(model: ModelSpec, s: int, frames: int) -> tuple[float, float, float]:
    """One block's FLOPs of the model's side stream (SideStream) at `s` video tokens, one batch
    element: (linear FLOPs on the video tokens, attention FLOPs between the streams: both divided with
    the video tokens; the side stream's own FLOPs: replicated). MACs: the video side's query and output
    projections of its attention to the side tokens and key and value projections of the side's
    attention to it, 4 s h w; the side tokens' own q, k, v, o, text cross-attention q, o, MLP and
    exchange projections, n a (6 + 2 r) a + 4 n a w, and their text keys and values, 2 t a^2."""
    side = model.side_stream
    if side is None:
        return 0.0, 0.0, 0.0
    n, a, w, t, h = side.tokens(frames), side.hidden, side.exchange_width, model.text_tokens, model.hidden
    video_linear = 2 * 4 * s * h * w
    exchange_attention = 2 * 4 * s * n * w  # video queries over side keys, side queries over video keys
    own_linear = 2 * (n * a * a * (6 + 2 * side.mlp_ratio) + 4 * n * a * w + 2 * t * a * a)
    own_attention = 4 * n * n * a + 4 * n * t * a
    return video_linear, exchange_attention, own_linear + own_attention


def step_work(model: ModelSpec, shape: Shape) -> StepWork:
    s = model.video_tokens(shape.height, shape.width, shape.frames)
    b, block = model.cfg_batch, block_work(model, s)
    side_linear, side_attention, replicated = side_stream_work(model, s, shape.frames)
    self_attention = block.self_attention_flops * self_attention_layers(model)
    attention = b * (self_attention + (block.cross_attention_flops + side_attention) * model.layers)
    # self: q, k, v, o of the video tokens (cross-attention runs locally: text replicated)
    a2a_per_layer = b * s * model.hidden * ACT_BYTES * 4
    return StepWork(b * model.layers * (block.linear_flops + side_linear), attention,
                    b * model.layers * block.elementwise_bytes, a2a_per_layer, model.layers,
                    replicated_flops=b * model.layers * replicated)


def self_attention_layers(model: ModelSpec) -> float:
    """Dense-equivalent self-attention layers: Skiparse layers attend within sparse_n
    sub-sequences, 1/sparse_n of a dense layer's self-attention."""
    return model.layers - model.sparse_layers + model.sparse_layers / model.sparse_n


def step_from_block(model: ModelSpec, block_s: float, self_attention_s: float) -> float:
    """Seconds of one step of the whole model from one dense block's measured time and its
    self-attention call's (batch 1), counted as step_work counts: every layer, the self-attention
    of Skiparse layers at its share, and cfg_batch forwards (classifier-free guidance)."""
    return model.cfg_batch * (model.layers * (block_s - self_attention_s)
                              + self_attention_s * self_attention_layers(model))


@dataclass(frozen=True)
class Layout:
    ulysses: int = 1
    ring: int = 1
    chunk: int | None = None  # PipeSP heads per chunk; None: synchronous Ulysses
    helpers: int = 0  # Aco: idle decode ranks taking attention heads this step

    @property
    def ranks(self) -> int:
        return self.ulysses * self.ring


def _local_heads(heads: int, ulysses: int) -> int:
    return math.ceil(heads / ulysses)


def step_seconds(model: ModelSpec, shape: Shape, node: Node, layout: Layout) -> float:
    """Wall time of one denoising step on `layout` (the slowest rank)."""
    w = step_work(model, shape)
    g = node.gpu
    d = layout.ranks
    # Divided work runs below its ideal share on each of d ranks (hardware.SP_OVERHEAD).
    spread = 1 + g.sp_overhead * (d - 1)
    linear = spread * w.linear_flops / d / (g.peak_flops * g.eff_matmul)
    elementwise = spread * w.elementwise_bytes / d / (g.mem_bandwidth * g.eff_memory)
    # Uneven heads: the rank with ceil(heads/u) heads sets the pace (padding in effect).
    head_share = _local_heads(model.heads, layout.ulysses) / model.heads
    attention = spread * w.attention_flops * head_share / layout.ring / (g.peak_flops * g.eff_attention)
    launches = w.attn_layers * w.kernels_per_layer * g.launch_s
    replicated = w.replicated_flops / (g.peak_flops * g.eff_matmul)
    comm = 0.0
    if layout.helpers:
        attention, comm = _aco(model, shape, node, layout, w, attention)
    comm += _ring_exposed(model, shape, node, layout, w, attention)
    comm += _ulysses_seconds(node, layout, w, attention, model)
    return linear + elementwise + attention + launches + replicated + comm


def _ulysses_seconds(node: Node, layout: Layout, w: StepWork, attention: float, model: ModelSpec) -> float:
    """All-to-all time per step; with PipeSP the output all-to-all hides behind attention."""
    u = layout.ulysses
    if u == 1:
        return 0.0
    group = u  # Ulysses groups are the inner (adjacent) ranks
    per_rank = w.a2a_bytes_per_layer / layout.ranks * (u - 1) / u
    pre, post = per_rank * 3 / 4, per_rank / 4
    pre_s = node.transfer_s(pre, group) + 2 * node.latency(group)
    post_s = node.transfer_s(post, group)
    attn_layer = attention / w.attn_layers
    if layout.chunk is None:
        return w.attn_layers * (pre_s + post_s)
    chunks = max(1, _local_heads(model.heads, u) // layout.chunk)
    # Two-stage pipeline of `chunks` equal pieces: max(A, C) + min(A, C) / chunks, where the
    # attention A is already counted; per chunk each side pays a launch (kernel + NCCL call).
    overlapped = max(attn_layer, post_s) + min(attn_layer, post_s) / chunks - attn_layer
    per_chunk = 2 * node.gpu.launch_s + node.latency(group)
    return w.attn_layers * (pre_s + overlapped + chunks * per_chunk)


def _ring_exposed(model, shape, node, layout, w, attention) -> float:
    """Ring attention passes K and V around the ring, overlapped with the local blocks."""
    r = layout.ring
    if r == 1:
        return 0.0
    kv = 2 * w.a2a_bytes_per_layer / 4 / layout.ranks  # K and V of the local tokens, local heads
    per_hop = node.transfer_s(kv, layout.ranks)
    if layout.ranks > node.gpus_per_node:  # the ring crosses nodes; every rank of a node sends at once
        per_hop = max(per_hop, node.cross_transfer_s(kv, node.gpus_per_node))
    attn_hop = attention / w.attn_layers / r
    return w.attn_layers * (r - 1) * max(0.0, per_hop - attn_hop)


def _aco(model, shape, node, layout, w, attention) -> tuple[float, float]:
    """Attention shared by denoise and helper ranks by rank count; Q, K, V of the helpers'
    heads go out point-to-point and their outputs come back, not overlapped."""
    total = layout.ranks + layout.helpers
    attention = attention * layout.ranks / total
    moved = w.a2a_bytes_per_layer * layout.helpers / total  # q, k, v out + o back, whole sequence
    per_rank = moved / layout.ranks
    if node.nodes > 1:  # the helpers (decode ranks) sit on the last node
        return attention, w.attn_layers * node.cross_transfer_s(per_rank, node.gpus_per_node)
    return attention, w.attn_layers * node.transfer_s(per_rank, node.gpus)


def decode_seconds(model: ModelSpec, shape: Shape, node: Node, tiled: bool) -> float:
    """One video's VAE decode on one GPU."""
    flops = vae_decode_flops(model, shape.height, shape.width, shape.frames, tiled)
    return flops / (node.gpu.peak_flops * node.gpu.eff_conv)


def text_seconds(model: ModelSpec, node: Node) -> float:
    """Prompt encoding (both prompts with classifier-free guidance) on one GPU."""
    flops = sum(2 * e.params * e.tokens for e in model.text_encoders) * model.cfg_batch
    tokenize_s = 0.02  # tokenizers and the prompt template, on the host
    return flops / (node.gpu.peak_flops * node.gpu.eff_matmul) + tokenize_s


def handoff_seconds(model: ModelSpec, shape: Shape, node: Node) -> float:
    """Latent handoff denoise -> decode rank (float32 latents, point to point)."""
    lt, lh, lw = model.latent_shape(shape.height, shape.width, shape.frames)
    nbytes = model.latent_channels * lt * lh * lw * 4
    if node.nodes > 1:  # denoise rank 0 on the first node, the decode ranks on the last
        return node.cross_transfer_s(nbytes, 1)
    return node.transfer_s(nbytes, node.gpus)


def physical_limit_seconds(model: ModelSpec, shape: Shape, node: Node, steps: int) -> float:
    """DiT FLOPs of one request at every GPU's dense peak: no schedule beats it per request."""
    w = step_work(model, shape)
    return steps * (w.linear_flops + w.attention_flops + w.replicated_flops) / (node.gpus * node.gpu.peak_flops)
