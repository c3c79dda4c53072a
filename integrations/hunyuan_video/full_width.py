"""A HunyuanVideo checkpoint with the release's widths and few blocks, built offline.

The transformer has the released per-block shapes (3072 hidden = 24 heads x 128, RoPE axes
(16, 56, 56), patch 2 x 2 x 1, MLP ratio 4, RMS q/k norm, 2 token-refiner layers) but only 2
dual-stream and 2 single-stream blocks (the release has 20 + 40); the VAE is the released one.
Attention, all-to-all and VAE decode therefore see real shapes and real memory per block on a
GPU, without the 40 GB download. The text encoders are the demo's small ones, so the
transformer's text input widths follow theirs instead of the release's 4096 / 768.

Weights are random under fixed seeds. As in the release, the transformer is stored in bfloat16
and the VAE in float32.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

from .demo_checkpoint import _seeded, demo_text_components

# The release's transformer widths (diffusers' HunyuanVideoTransformer3DModel defaults).
RELEASE_WIDTHS: dict[str, Any] = {
    "in_channels": 16,
    "out_channels": 16,
    "num_attention_heads": 24,
    "attention_head_dim": 128,
    "mlp_ratio": 4.0,
    "patch_size": 2,
    "patch_size_t": 1,
    "qk_norm": "rms_norm",
    "guidance_embeds": True,
    "rope_theta": 256.0,
    "rope_axes_dim": (16, 56, 56),
}
DUAL_STREAM_BLOCKS = 2
SINGLE_STREAM_BLOCKS = 2
# As released: the second refiner layer adds ~132M parameters (~10% of this transformer), a
# price worth paying for a token refiner whose structure and weight names match the release.
REFINER_LAYERS = 2
TRANSFORMER_DTYPE = torch.bfloat16


def transformer_config(text_embed_dim: int, pooled_projection_dim: int) -> dict[str, Any]:
    """Keyword arguments of HunyuanVideoTransformer3DModel for this preset."""
    return {
        **RELEASE_WIDTHS,
        "num_layers": DUAL_STREAM_BLOCKS,
        "num_single_layers": SINGLE_STREAM_BLOCKS,
        "num_refiner_layers": REFINER_LAYERS,
        "text_embed_dim": text_embed_dim,
        "pooled_projection_dim": pooled_projection_dim,
    }


@contextlib.contextmanager
def _default_dtype(dtype: torch.dtype) -> Iterator[None]:
    # Hazard: the default dtype is process-wide; restore it even if building fails.
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


def build_transformer(text_embed_dim: int, pooled_projection_dim: int):
    """Parameters are created and initialised in bfloat16 directly: ~1.3B of them would need
    5 GB in float32 and a second, cast copy."""
    from diffusers import HunyuanVideoTransformer3DModel

    with _default_dtype(TRANSFORMER_DTYPE):
        return HunyuanVideoTransformer3DModel(**transformer_config(text_embed_dim, pooled_projection_dim))


def build_vae():
    """AutoencoderKLHunyuanVideo's defaults are the released VAE's config."""
    from diffusers import AutoencoderKLHunyuanVideo

    return AutoencoderKLHunyuanVideo()


def build_full_width_pipeline():
    """Returns an in-memory HunyuanVideoPipeline (~1.5B parameters, ~3.6 GB of weights)."""
    from diffusers import FlowMatchEulerDiscreteScheduler, HunyuanVideoPipeline

    text = demo_text_components()
    text_dim = text["text_encoder"].config.hidden_size
    pooled_dim = text["text_encoder_2"].config.hidden_size
    return HunyuanVideoPipeline(
        transformer=_seeded(0, lambda: build_transformer(text_dim, pooled_dim)),
        vae=_seeded(1, build_vae),
        scheduler=FlowMatchEulerDiscreteScheduler(shift=7.0),
        **text,
    )
