"""Wan2.1 text-to-video behind pipedit's model-adapter seam.

Loads a diffusers-layout checkpoint (model_index.json `WanPipeline`) one component at a time and
reproduces WanPipeline's numerics (diffusers 0.42.1): prompt cleaning, UMT5 over 512 tokens with
zero-filled padding, the empty negative prompt, guidance when guidance_scale > 1, the checkpoint's
scheduler (fresh per request), randn latents, and the VAE's latents_mean/latents_std. The denoising
loop itself is pipedit's engine. Guidance follows OpenSoraPlan's CFG seam (cfg_branches,
predict_branches, combine_guidance).

For now Wan runs on one rank: parallel attention, CFG parallel and decode ranks are refused (see
SINGLE_RANK_REASON); Wan2.2's second expert and image-to-video are not supported.
"""

from __future__ import annotations

import torch
from diffusers.utils.torch_utils import randn_tensor

from pipedit.adapter import ALL_PARTS, VideoShape, check_video_shape, frames_from_vae, read_model_index
from pipedit.attention.autotune import AttentionShape
from pipedit.components import load_component, read_component_config
from pipedit.errors import InvalidRequestError, ModelPathError, UserInputError
from pipedit.guidance import combine_guidance, guided_branches

from .sampler import make_scheduler
from .text_encoding import DEFAULT_NEGATIVE_PROMPT, encode_text

SINGLE_RANK_REASON = (
    "wan runs on one rank for now (sequence parallelism, CFG parallel, decode ranks and Aco are not "
    "implemented for it yet): drop --ulysses, --ring, --cfg-parallel, --decode-ranks, --ranks and --aco on"
)
_TEXT_PARTS = ("tokenizer", "text_encoder")


class WanAdapter:
    family = "wan"
    # UMT5-XXL (~6B parameters) is too large to share memory with the 14B DiT, as HunyuanVideo's Llama.
    preferred_text_encoder = "vae"
    takes_negative_prompt = True
    takes_image = needs_image = False  # image-to-video checkpoints set these at load
    single_rank_reason = SINGLE_RANK_REASON  # the engine refuses multi-rank layouts with this

    def __init__(self, components: dict, configs: dict, device, dtype: torch.dtype | None):
        self.components = components
        self.dit_config, self.vae_config = configs["transformer"], configs["vae"]
        self.device = torch.device(device)
        self.dtype = dtype
        self.temporal_ratio = int(self.vae_config.get("scale_factor_temporal", 4))
        self.spatial_ratio = int(self.vae_config.get("scale_factor_spatial", 8))

    # -- loading ---------------------------------------------------------------------------
    @classmethod
    def from_pretrained(cls, path, *, parts=ALL_PARTS, device="cpu", dtype=None, vae_tiling="auto"):
        """dtype None loads each component as diffusers' pipeline does by default. Wan decodes
        untiled, as WanPipeline does by default (vae_tiling auto or off)."""
        if vae_tiling not in ("auto", "off"):
            raise UserInputError(f"vae_tiling {vae_tiling!r} is not available for wan (it decodes untiled): "
                                 f"use auto or off")
        index = read_model_index(path)
        cls._check_supported(path, index)
        wanted = ["scheduler"]
        if "text" in parts:
            wanted += list(_TEXT_PARTS)
        if "dit" in parts:
            wanted.append("transformer")
        if "vae" in parts:
            wanted.append("vae")
        components = {name: load_component(path, index, name, dtype=dtype, device=device) for name in wanted}
        configs = {name: read_component_config(path, name) for name in ("transformer", "vae")}
        return cls(components, configs, device, dtype)

    @staticmethod
    def _check_supported(path, index: dict) -> None:
        if index.get("_class_name") != "WanPipeline":
            raise ModelPathError(f"{path} holds a {index.get('_class_name')}; the wan adapter loads WanPipeline "
                                 f"(Wan2.1 text-to-video) checkpoints only for now")
        if isinstance(index.get("transformer_2"), list) and index["transformer_2"][0] is not None:
            raise ModelPathError(f"{path} is a two-expert Wan2.2 checkpoint (transformer_2); pipedit runs Wan2.1 "
                                 f"text-to-video (one transformer) only for now")
        if index.get("expand_timesteps"):
            raise ModelPathError(f"{path} uses expand_timesteps (Wan2.2 TI2V); not supported yet")

    def __getattr__(self, name):
        components = self.__dict__.get("components", {})
        if name in (*_TEXT_PARTS, "transformer", "vae"):
            if name not in components:
                raise RuntimeError(f"this worker did not load the {name} (its role does not need it)")
            return components[name]
        raise AttributeError(name)

    # -- validation ------------------------------------------------------------------------
    @property
    def size_multiple(self) -> int:
        return self.spatial_ratio * int(self.dit_config["patch_size"][1])

    def validate(self, shape: VideoShape, steps: int) -> None:
        # WanPipeline silently rounds sizes and frame counts down; pipedit refuses them instead.
        check_video_shape(shape, steps, size_multiple=self.size_multiple, frame_stride=self.temporal_ratio,
                          model="Wan")

    # -- prompt ----------------------------------------------------------------------------
    @torch.no_grad()
    def encode_prompt(self, prompt: str, negative_prompt: str | None = None) -> dict[str, torch.Tensor]:
        """negative_prompt None: the empty one, as WanPipeline without a negative prompt."""
        if not prompt or not prompt.strip():
            raise InvalidRequestError("prompt must be a non-empty string")
        negative = DEFAULT_NEGATIVE_PROMPT if negative_prompt is None else negative_prompt
        return {
            "prompt_embeds": encode_text(self.tokenizer, self.text_encoder, prompt, self.device),
            "negative_prompt_embeds": encode_text(self.tokenizer, self.text_encoder, negative, self.device),
        }

    def prepare_condition(self, cond: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Unchanged: Wan's DiT attends to all 512 text tokens, the padding ones as zero vectors
        (trimming them would change the cross-attention softmax)."""
        return cond

    def text_length(self, cond: dict[str, torch.Tensor]) -> int:
        return cond["prompt_embeds"].shape[1]

    # -- guidance ----------------------------------------------------------------------------
    def cfg_branches(self, cond: dict[str, torch.Tensor]) -> list[dict[str, torch.Tensor]]:
        """[negative, positive] conditions (combine_guidance's order)."""
        return [{"prompt_embeds": cond["negative_prompt_embeds"]}, {"prompt_embeds": cond["prompt_embeds"]}]

    def branches_for(self, cond: dict[str, torch.Tensor], guidance_scale: float) -> list[dict[str, torch.Tensor]]:
        """Both branches when guidance applies (guidance_scale > 1, as WanPipeline), else the positive one."""
        return guided_branches(self.cfg_branches(cond), guidance_scale)

    @torch.no_grad()
    def predict_branches(self, latents: torch.Tensor, timestep: torch.Tensor,
                         branches: list[dict[str, torch.Tensor]]) -> list[torch.Tensor]:
        """One batched forward over the branches (WanPipeline runs them one by one: equal up to
        float rounding); outputs stay in the transformer's dtype, as WanPipeline's guidance runs."""
        dtype = self.transformer.dtype
        count = len(branches)
        x = torch.cat([latents] * count).to(dtype)
        embeds = torch.cat([b["prompt_embeds"] for b in branches]).to(dtype)
        out = self.transformer(hidden_states=x, timestep=timestep.reshape(1).expand(count),
                               encoder_hidden_states=embeds, return_dict=False)[0]
        return list(out.chunk(count))

    def predict_noise(self, latents, timestep, cond, guidance_scale: float) -> torch.Tensor:
        preds = self.predict_branches(latents, timestep, self.branches_for(cond, guidance_scale))
        return combine_guidance(preds, guidance_scale)

    combine_guidance = staticmethod(combine_guidance)

    # -- parallelism -------------------------------------------------------------------------
    @property
    def num_heads(self) -> int:
        return int(self.dit_config["num_attention_heads"])

    def attention_shape(self, shape: VideoShape) -> AttentionShape:
        """The self-attention call (text is attended in separate cross-attention: text_len 0)."""
        _, _, frames, height, width = self.latent_shape(shape)
        patch_t, patch_h, patch_w = self.dit_config["patch_size"]
        return AttentionShape(seq_len=(frames // patch_t) * (height // patch_h) * (width // patch_w), text_len=0,
                              heads=self.num_heads, head_dim=int(self.dit_config["attention_head_dim"]))

    @property
    def experts(self) -> list:
        """The loaded transformers (Wan2.2 A14B: transformer for high noise, transformer_2 for low);
        parallel attention is installed on each."""
        return [self.transformer]

    def enable_sequence_parallel(self, ctx, strategy) -> int:
        raise UserInputError(SINGLE_RANK_REASON)

    # -- denoising -------------------------------------------------------------------------
    def latent_shape(self, shape: VideoShape) -> tuple[int, ...]:
        frames = (shape.num_frames - 1) // self.temporal_ratio + 1
        channels = int(self.dit_config["in_channels"])
        return (1, channels, frames, shape.height // self.spatial_ratio, shape.width // self.spatial_ratio)

    def prepare_latents(self, shape: VideoShape, generator: torch.Generator) -> torch.Tensor:
        return randn_tensor(self.latent_shape(shape), generator=generator, device=self.device, dtype=torch.float32)

    def make_scheduler(self, steps: int):
        return make_scheduler(self.components["scheduler"], steps, self.device)

    # -- decoding --------------------------------------------------------------------------
    @torch.no_grad()
    def decode(self, latents: torch.Tensor) -> torch.Tensor:
        """Latents -> frames [B, F, H, W, 3] in [0, 1], unscaled as WanPipeline does
        (x / (1 / std) + mean, in that form, for the same rounding)."""
        config = self.vae.config
        latents = latents.to(self.device, self.vae.dtype)
        view = (1, config.z_dim, 1, 1, 1)
        mean = torch.tensor(config.latents_mean).view(view).to(latents.device, latents.dtype)
        inverse_std = 1.0 / torch.tensor(config.latents_std).view(view).to(latents.device, latents.dtype)
        video = self.vae.decode(latents / inverse_std + mean, return_dict=False)[0]
        return self.frames(video)

    frames = staticmethod(frames_from_vae)  # the VAE's video -> frames [B, F, H, W, 3] in [0, 1]
