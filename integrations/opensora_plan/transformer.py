"""OpenSoraPlan v1.3 transformer (OpenSoraT2V_v1_3), own code with the official parameter names.

Math: PixArt adaLN-single timestep conditioning, 3D RoPE self-attention (Skiparse on layers
2..29), cross-attention to the projected mT5 text without norm or gate, GELU(tanh) FFN, and the
final shift/scale modulation before unpatchify. Patch embedding (`pos_embed`), RoPE tables
(`rope`) and the final projection (`proj_out`) are separate submodules, so a sequence shard
plan can split and gather around them with forward hooks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from pipedit.errors import ModelPathError

from .attention import OpenSoraAttention
from .checkpoint import load_transformer_state, read_json
from .rope import rope_tables, token_positions
from .skiparse import layer_layout

MASK_BIAS = -10000.0  # the official additive bias of masked text tokens / video patches
TIMESTEP_DIM = 256


@dataclass(frozen=True)
class TransformerConfig:
    """The config.json fields the math uses; unknown keys (EMA fields, _class_name, ...) are
    ignored and list-valued sample sizes accepted (they are only pipeline defaults)."""

    num_attention_heads: int = 16
    attention_head_dim: int = 88
    in_channels: int = 8
    out_channels: int | None = None
    num_layers: int = 1
    cross_attention_dim: int | None = None
    attention_bias: bool = True
    patch_size: int = 2
    patch_size_t: int = 1
    activation_fn: str = "geglu"
    norm_elementwise_affine: bool = False
    norm_eps: float = 1e-6
    caption_channels: int = 4096
    interpolation_scale_h: float = 1.0
    interpolation_scale_w: float = 1.0
    interpolation_scale_t: float = 1.0
    sparse1d: bool = False
    sparse_n: int = 2
    sample_size_h: int | list | None = None
    sample_size_w: int | list | None = None
    sample_size_t: int | None = None

    @classmethod
    def from_dict(cls, data: dict) -> "TransformerConfig":
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    def __post_init__(self):
        if self.activation_fn != "gelu-approximate":
            raise ValueError(f"OpenSoraPlan v1.3 uses activation_fn 'gelu-approximate', config has {self.activation_fn!r}")
        if self.norm_elementwise_affine:
            raise ValueError("OpenSoraPlan v1.3 uses non-affine LayerNorms (norm_elementwise_affine false)")
        if self.patch_size_t != 1:
            raise ValueError(f"only patch_size_t 1 is supported (the v1.3 release), got {self.patch_size_t}")

    @property
    def hidden_size(self) -> int:
        return self.num_attention_heads * self.attention_head_dim

    @property
    def output_channels(self) -> int:
        return self.out_channels or self.in_channels


def timestep_sinusoid(timesteps: torch.Tensor, dim: int = TIMESTEP_DIM) -> torch.Tensor:
    """[cos | sin] sinusoid (flip_sin_to_cos, shift 0, max period 10000) in float32."""
    half = dim // 2
    exponent = -math.log(10000.0) * torch.arange(half, dtype=torch.float32, device=timesteps.device) / half
    angles = timesteps.float()[:, None] * exponent.exp()[None]
    return torch.cat((angles.cos(), angles.sin()), dim=-1)


class PatchEmbed(nn.Module):
    """Conv2d patchify of every frame -> tokens [B, T*h*w, D] in (t, h, w) order."""

    def __init__(self, patch: int, channels: int, dim: int):
        super().__init__()
        self.proj = nn.Conv2d(channels, dim, kernel_size=patch, stride=patch)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, channels, frames, height, width = x.shape
        frames_2d = x.transpose(1, 2).reshape(batch * frames, channels, height, width)
        tokens = self.proj(frames_2d).flatten(2).transpose(1, 2)  # [B*T, h*w, D]
        return tokens.reshape(batch, -1, tokens.shape[-1])


class RotaryTables(nn.Module):
    """(cos, sin) [S, head_dim] of the full token grid. A module, so that a shard plan can see it."""

    def __init__(self, head_dim: int, scales: tuple[float, float, float]):
        super().__init__()
        self.head_dim = head_dim
        self.scales = scales

    def forward(self, grid: tuple[int, int, int], dtype: torch.dtype, device) -> tuple[torch.Tensor, torch.Tensor]:
        return rope_tables(token_positions(grid, device=device), self.head_dim, self.scales, dtype)


class _Mlp(nn.Module):
    def __init__(self, dim_in: int, dim_out: int):
        super().__init__()
        self.linear_1 = nn.Linear(dim_in, dim_out)
        self.linear_2 = nn.Linear(dim_out, dim_out)


class CaptionProjection(_Mlp):
    def forward(self, x):
        return self.linear_2(F.gelu(self.linear_1(x), approximate="tanh"))


class TimestepEmbedder(_Mlp):
    def forward(self, x):
        return self.linear_2(F.silu(self.linear_1(x)))


class _TimestepEmbeddings(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.timestep_embedder = TimestepEmbedder(TIMESTEP_DIM, dim)


class AdaLayerNormSingle(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.emb = _TimestepEmbeddings(dim)
        self.linear = nn.Linear(dim, 6 * dim)

    def forward(self, timestep: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        embedded = self.emb.timestep_embedder(timestep_sinusoid(timestep).to(dtype))
        return self.linear(F.silu(embedded)), embedded


class _GeluProj(nn.Module):
    def __init__(self, dim_in: int, dim_out: int):
        super().__init__()
        self.proj = nn.Linear(dim_in, dim_out)

    def forward(self, x):
        return F.gelu(self.proj(x), approximate="tanh")


class FeedForward(nn.Module):
    def __init__(self, dim: int, inner: int):
        super().__init__()
        self.net = nn.ModuleList([_GeluProj(dim, inner), nn.Dropout(0.0), nn.Linear(inner, dim)])

    def forward(self, x):
        for layer in self.net:
            x = layer(x)
        return x


class TransformerBlock(nn.Module):
    def __init__(self, config: TransformerConfig, index: int):
        super().__init__()
        dim = config.hidden_size
        heads, head_dim = config.num_attention_heads, config.attention_head_dim
        self.layout = layer_layout(index, config.sparse1d, config.sparse_n)
        self.norm_eps = config.norm_eps
        self.attn1 = OpenSoraAttention(dim, heads, head_dim, bias=config.attention_bias)
        self.attn2 = OpenSoraAttention(dim, heads, head_dim, cross_dim=config.cross_attention_dim or dim,
                                       bias=config.attention_bias)
        self.ff = FeedForward(dim, 4 * dim)
        self.scale_shift_table = nn.Parameter(torch.zeros(6, dim))

    def _norm(self, x):
        return F.layer_norm(x, x.shape[-1:], eps=self.norm_eps)

    def forward(self, x, t6, text, video_bias, text_bias, rotary):
        """x [B, S, D]; t6 [B, 6, D]; text [B, L, D]; biases [B, S] / [B, L] or None."""
        shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = (self.scale_shift_table[None] + t6).unbind(1)
        h = self._norm(x) * (1 + scale_msa[:, None]) + shift_msa[:, None]
        x = x + gate_msa[:, None] * self.attn1(h, attention_mask=video_bias, rotary=rotary, layout=self.layout)
        x = x + self.attn2(x, encoder_hidden_states=text, attention_mask=text_bias, layout=self.layout)
        h = self._norm(x) * (1 + scale_mlp[:, None]) + shift_mlp[:, None]
        return x + gate_mlp[:, None] * self.ff(h)


class OpenSoraPlanTransformer(nn.Module):
    # The block class that repeats (diffusers' convention): what regional compile compiles.
    _repeated_blocks = ("TransformerBlock",)

    def __init__(self, config: TransformerConfig):
        super().__init__()
        self.config = config
        dim = config.hidden_size
        scales = (config.interpolation_scale_t, config.interpolation_scale_h, config.interpolation_scale_w)
        self.pos_embed = PatchEmbed(config.patch_size, config.in_channels, dim)
        self.rope = RotaryTables(config.attention_head_dim, scales)
        self.caption_projection = CaptionProjection(config.caption_channels, dim)
        self.adaln_single = AdaLayerNormSingle(dim)
        self.transformer_blocks = nn.ModuleList(TransformerBlock(config, i) for i in range(config.num_layers))
        self.scale_shift_table = nn.Parameter(torch.zeros(2, dim))
        self.proj_out = nn.Linear(dim, config.patch_size_t * config.patch_size ** 2 * config.output_channels)

    @property
    def dtype(self) -> torch.dtype:
        return self.proj_out.weight.dtype

    def forward(self, hidden_states: torch.Tensor, timestep: torch.Tensor, encoder_hidden_states: torch.Tensor,
                encoder_attention_mask: torch.Tensor | None = None,
                attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """hidden_states [B, C, T, H, W]; timestep [B]; encoder_hidden_states [B, L, Dt] (or
        [B, 1, L, Dt]); encoder_attention_mask [B, L] (or [B, 1, L]) of 0/1, None: all valid;
        attention_mask the video mask [B, T, H, W] of 0/1, None: all valid. -> [B, C, T, H, W]."""
        dtype = self.dtype
        batch, _, frames, height, width = hidden_states.shape
        patch = self.config.patch_size
        grid = (frames, height // patch, width // patch)
        video_bias = self._video_bias(attention_mask, dtype)
        text_bias = None
        if encoder_attention_mask is not None:
            text_bias = (1 - encoder_attention_mask.reshape(batch, -1).to(dtype)) * MASK_BIAS
        x = self.pos_embed(hidden_states.to(dtype))
        t6, embedded = self.adaln_single(timestep.reshape(-1).expand(batch), dtype)
        t6 = t6.unflatten(1, (6, -1))
        text = self.caption_projection(encoder_hidden_states.reshape(batch, -1, encoder_hidden_states.shape[-1]).to(dtype))
        rotary = self.rope(grid, dtype, x.device)
        for block in self.transformer_blocks:
            x = block(x, t6, text, video_bias, text_bias, rotary)
        shift, scale = (self.scale_shift_table[None] + embedded[:, None]).unbind(1)
        x = F.layer_norm(x, x.shape[-1:], eps=1e-6) * (1 + scale[:, None]) + shift[:, None]
        return self._unpatchify(self.proj_out(x), grid)

    def _video_bias(self, mask: torch.Tensor | None, dtype) -> torch.Tensor | None:
        if mask is None:
            return None
        patch = self.config.patch_size
        pooled = F.max_pool3d(mask[:, None].to(dtype), kernel_size=(1, patch, patch), stride=(1, patch, patch))
        return (1 - pooled.flatten(1).bool().to(dtype)) * MASK_BIAS

    def _unpatchify(self, y: torch.Tensor, grid: tuple[int, int, int]) -> torch.Tensor:
        """y [B, S, p*p*C] with features (ph, pw, c), c fastest -> [B, C, T, h*p, w*p]."""
        frames, rows, cols = grid
        patch, channels = self.config.patch_size, self.config.output_channels
        y = y.reshape(y.shape[0], frames, rows, cols, patch, patch, channels)
        y = y.permute(0, 6, 1, 2, 4, 3, 5)
        return y.reshape(y.shape[0], channels, frames, rows * patch, cols * patch)


def load_transformer(folder, dtype: torch.dtype | None = None, device="cpu") -> OpenSoraPlanTransformer:
    """The official transformer folder (config.json + safetensors, sharded or not), key names
    unchanged. dtype None keeps the stored dtype (the release is fp32)."""
    folder = Path(folder)
    try:
        config = TransformerConfig.from_dict(read_json(folder / "config.json"))
    except (TypeError, ValueError) as error:
        raise ModelPathError(f"{folder / 'config.json'}: {error}") from error
    target = torch.device(device)
    state = load_transformer_state(folder, target if target.type == "cuda" else "cpu")
    with torch.device("meta"):
        model = OpenSoraPlanTransformer(config)
    # assign=True: the meta-built parameters become the loaded tensors (no second copy in memory).
    result = model.load_state_dict(state, strict=False, assign=True)
    if result.missing_keys or result.unexpected_keys:
        raise ModelPathError(f"{folder} does not match its config.json: missing {result.missing_keys[:5]}, "
                             f"unexpected {result.unexpected_keys[:5]}")
    stored = next(iter(state.values())).dtype
    model = model.to(device=target, dtype=dtype or stored)
    model.requires_grad_(False)
    return model.eval()

