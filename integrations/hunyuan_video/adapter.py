"""HunyuanVideo behind pipedit's model-adapter seam.

Loads any diffusers-layout HunyuanVideo checkpoint (the community release's layout) one component
at a time and reproduces HunyuanVideoPipeline's numerics: the same prompt template and crop, the
same text-encoder layer, latent shapes, sigma schedule, embedded guidance and VAE scaling. The
denoising loop itself lives in pipedit's engine.
"""

from __future__ import annotations

from dataclasses import replace

import torch
from diffusers.pipelines.hunyuan_video.pipeline_hunyuan_video import DEFAULT_PROMPT_TEMPLATE

from pipedit.adapter import ALL_PARTS, ComponentAccess, VideoShape, check_video_shape, frames_from_vae, read_model_index
from pipedit.attention.autotune import AttentionShape
from pipedit.capabilities import Capabilities
from pipedit.components import load_component, read_component_config
from pipedit.errors import InvalidRequestError
from pipedit.model_hooks import AdapterHooks
from pipedit.sampling import shift_parameter
from pipedit.video_adapter import DiffusersVideoAdapter, FreeMemoryTiling

from .parallel import TextKeys, install_processors
from .sampler import make_scheduler
# free_device_bytes, predict_decode_peak_bytes, should_tile: the tiling rules FreeMemoryTiling reads here.
from .vae_memory import check_mode, free_device_bytes, predict_decode_peak_bytes, should_tile  # noqa: F401

LLAMA_MAX_TOKENS = 256
CLIP_MAX_TOKENS = 77
# The pipeline feeds the transformer the Llama hidden state 3rd from the end (skips 2 layers).
LLAMA_LAYERS_SKIPPED = 2


class HunyuanVideoAdapter(ComponentAccess, FreeMemoryTiling, DiffusersVideoAdapter, AdapterHooks):
    family = "hunyuan-video"
    component_names = ("tokenizer", "text_encoder", "tokenizer_2", "text_encoder_2", "transformer", "vae")
    # The paper places HunyuanVideo's text encoder (Llama, ~8B) with the VAE: too large to share
    # memory with the 13B DiT.
    preferred_text_encoder = "vae"
    # Embedded guidance: no negative branch. flow_shift: whether the checkpoint's scheduler has a
    # shift to set (set at load; HunyuanVideo releases name the flow-match Euler scheduler).
    capabilities = Capabilities(flow_shift=True)
    new_scheduler = staticmethod(make_scheduler)
    tiling_module = __name__  # decode tiling by the vae_memory rules imported above (FreeMemoryTiling)

    def __init__(self, components: dict, configs: dict, device: torch.device, dtype: torch.dtype | None,
                 vae_tiling: str = "auto"):
        self.vae_tiling = check_mode(vae_tiling)  # auto, on or off: see _set_tiling
        self.components = components
        # Shapes come from the configs, so that every role knows them without the weights.
        self.dit_config, self.vae_config = configs["transformer"], configs["vae"]
        self.device = torch.device(device)
        self.dtype = dtype
        self.template = DEFAULT_PROMPT_TEMPLATE
        self.spatial_ratio = self.vae_config["spatial_compression_ratio"]
        self.temporal_ratio = self.vae_config["temporal_compression_ratio"]
        self.text_keys = TextKeys()  # shared with the attention processors (see prepare_condition)
        self.capabilities = replace(type(self).capabilities,
                                    flow_shift=shift_parameter(components["scheduler"].config) is not None)
        if "transformer" in components:
            self._route_attention()

    def _route_attention(self) -> None:
        """pipedit's processors on one rank too, so that unpadded text runs the unmasked kernels."""
        from pipedit.attention.local import LocalAttention
        from pipedit.distributed.context import ParallelContext

        local = LocalAttention(ParallelContext.single(self.device))
        install_processors(self.components["transformer"], local, None, self.text_keys)

    # -- loading ---------------------------------------------------------------------------
    @classmethod
    def from_pretrained(cls, path, *, parts=ALL_PARTS, device="cpu", dtype=None, vae_tiling="auto"):
        """dtype None loads each component as diffusers' pipeline does by default; vae_tiling:
        auto, on or off (see _set_tiling)."""
        index = read_model_index(path)
        wanted = ["scheduler"]
        if "text" in parts:
            wanted += ["tokenizer", "text_encoder", "tokenizer_2", "text_encoder_2"]
        if "dit" in parts:
            wanted.append("transformer")
        if "vae" in parts:
            wanted.append("vae")
        components = {
            name: load_component(path, index, name, dtype=dtype, device=device) for name in wanted
        }
        configs = {name: read_component_config(path, name) for name in ("transformer", "vae")}
        return cls(components, configs, device, dtype, vae_tiling)

    @property
    def scheduler_config(self):
        return self.components["scheduler"].config

    # -- validation ------------------------------------------------------------------------
    @property
    def size_multiple(self) -> int:
        return self.spatial_ratio * self.dit_config["patch_size"]

    def validate(self, shape: VideoShape, steps: int) -> None:
        check_video_shape(shape, steps, size_multiple=self.size_multiple, frame_stride=self.temporal_ratio,
                          model="this model")

    # -- prompt ----------------------------------------------------------------------------
    @torch.no_grad()
    def encode_prompt(self, prompt: str) -> dict[str, torch.Tensor]:
        if not prompt or not prompt.strip():
            raise InvalidRequestError("prompt must be a non-empty string")
        embeds, mask = self._llama_embeds(prompt)
        pooled = self._clip_pooled(prompt)
        return {"prompt_embeds": embeds, "prompt_attention_mask": mask, "pooled_prompt_embeds": pooled}

    def prepare_condition(self, cond: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """On the denoise ranks, before a request's first step (host tensors): drops the padded
        text tokens of a single prompt. Masked keys contribute nothing and padded queries reach
        no video token, so outputs equal the padded run up to float rounding, and the attention
        runs without a key mask (the flash / xformers kernels need none). Falls back to the
        masked path when the valid tokens are not a prefix (left padding) or several prompts
        share the batch."""
        mask = cond["prompt_attention_mask"]
        valid = int(mask.sum())
        if mask.shape[0] != 1 or not bool(mask[:, :valid].all()):
            self.text_keys.padded = True
            return cond
        self.text_keys.padded = False
        return {**cond, "prompt_embeds": cond["prompt_embeds"][:, :valid], "prompt_attention_mask": mask[:, :valid]}

    def text_length(self, cond: dict[str, torch.Tensor]) -> int:
        """Text tokens the transformer attends to for this condition."""
        return cond["prompt_embeds"].shape[1]

    def _llama_embeds(self, prompt: str) -> tuple[torch.Tensor, torch.Tensor]:
        crop = self.template["crop_start"]
        tokens = self.tokenizer(
            [self.template["template"].format(prompt)], max_length=LLAMA_MAX_TOKENS + crop,
            padding="max_length", truncation=True, return_tensors="pt", return_attention_mask=True,
        )
        ids = tokens.input_ids.to(self.device)
        mask = tokens.attention_mask.to(self.device)
        hidden = self.text_encoder(input_ids=ids, attention_mask=mask, output_hidden_states=True)
        embeds = hidden.hidden_states[-(LLAMA_LAYERS_SKIPPED + 1)].to(self.text_encoder.dtype)
        return embeds[:, crop:], mask[:, crop:]

    def _clip_pooled(self, prompt: str) -> torch.Tensor:
        tokens = self.tokenizer_2(
            [prompt], padding="max_length", max_length=CLIP_MAX_TOKENS, truncation=True, return_tensors="pt"
        )
        return self.text_encoder_2(tokens.input_ids.to(self.device), output_hidden_states=False).pooler_output

    # -- sequence parallelism --------------------------------------------------------------
    @property
    def num_heads(self) -> int:
        return self.dit_config["num_attention_heads"]

    def attention_shape(self, shape: VideoShape) -> AttentionShape:
        config = self.dit_config
        _, _, frames, height, width = self.latent_shape(shape)
        patch, patch_t = config["patch_size"], config["patch_size_t"]
        tokens = (frames // patch_t) * (height // patch) * (width // patch)
        return AttentionShape(seq_len=tokens, text_len=LLAMA_MAX_TOKENS, heads=self.num_heads,
                              head_dim=config["attention_head_dim"])

    def enable_sequence_parallel(self, ctx, strategy) -> int:
        from .parallel import enable_sequence_parallel

        return enable_sequence_parallel(self.transformer, ctx, strategy, self.text_keys)

    def cache_blocks(self):
        """The transformer's blocks as the step cache sees them (pipedit.cache)."""
        from .cache_blocks import cache_blocks

        return cache_blocks(self.transformer)

    # -- denoising (latents and scheduler: DiffusersVideoAdapter) ---------------------------
    @property
    def latent_channels(self) -> int:
        return self.dit_config["in_channels"]

    @torch.no_grad()
    def predict_noise(self, latents, timestep, cond, guidance_scale: float) -> torch.Tensor:
        dtype = self.transformer.dtype
        batch = latents.shape[0]
        guidance = torch.full((batch,), guidance_scale, dtype=dtype, device=self.device) * 1000.0
        return self.transformer(
            hidden_states=latents.to(dtype),
            timestep=timestep.expand(batch).to(latents.dtype),
            encoder_hidden_states=cond["prompt_embeds"].to(dtype),
            encoder_attention_mask=cond["prompt_attention_mask"].to(dtype),
            pooled_projections=cond["pooled_prompt_embeds"].to(dtype),
            guidance=guidance,
            return_dict=False,
        )[0]

    # -- decoding --------------------------------------------------------------------------
    @torch.no_grad()
    def decode(self, latents: torch.Tensor) -> torch.Tensor:
        latents = self._scaled(latents)
        self._set_tiling(latents.shape)
        return self.frames(self.vae.decode(latents, return_dict=False)[0])

    def _scaled(self, latents: torch.Tensor) -> torch.Tensor:
        return latents.to(self.device, self.vae.dtype) / self.vae.config.scaling_factor

    frames = staticmethod(frames_from_vae)  # the VAE's video -> frames [B, F, H, W, 3] in [0, 1]

    def _set_tiling(self, latent_shape) -> None:
        """Decided per decode, for this latent shape and the memory free now. Untiled keeps
        diffusers' default decode (framewise passes in time), which the parity tests rely on.
        Tiled splits each pass into overlapping spatial tiles, blended: not bit-identical.
        enable_tiling() without arguments keeps the VAE's tile sizes, set there by whoever wants
        others (diffusers tiles only frames larger than one tile)."""
        if self.decode_mode(latent_shape):
            self.vae.enable_tiling()
        else:
            self.vae.disable_tiling()

    # -- one video's decode over several ranks (pipedit.runtime.split_decode) --------------
    def split_plan(self, latents: torch.Tensor, mode: int, parts: int):
        """The units of diffusers' decode in `mode` (they do not depend on `parts`)."""
        from .split_decode import TilePlan

        return TilePlan(self.vae, self._scaled(latents), bool(mode))

    def split_units(self, latent_shape, parts: int) -> int:
        """How many units a split decode of this shape has now (1: splitting gains nothing)."""
        from .split_decode import TilePlan

        meta = torch.empty(latent_shape, device="meta", dtype=self.vae.dtype)
        return len(TilePlan(self.vae, meta, bool(self.decode_mode(latent_shape))).units)
