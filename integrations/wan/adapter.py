"""Wan behind pipedit's model-adapter seam: Wan2.1 T2V and I2V, Wan2.2 A14B T2V and I2V (see
checkpoint.py for what is and is not supported).

Loads a diffusers-layout checkpoint (model_index.json `WanPipeline` or `WanImageToVideoPipeline`)
one component at a time and reproduces those pipelines' numerics (diffusers 0.42.1): prompt
cleaning, UMT5 over 512 tokens with zero-filled padding, the empty negative prompt, guidance when
guidance_scale > 1, the checkpoint's scheduler (fresh per request), randn latents, the VAE's
latents_mean/latents_std, the image condition (image_condition.py) and the expert of each timestep
with its guidance scale (experts.py). The denoising loop itself is pipedit's engine. Guidance
follows the CFG seam shared with OpenSoraPlan (cfg_branches, predict_branches; pipedit.guidance).

Every parallel path applies: sequence-parallel attention from outside the model (parallel.py),
CFG parallel through the CFG seam, decode ranks and Aco through the engine.
"""

from __future__ import annotations

import copy
from dataclasses import replace

import torch

from pipedit.adapter import ALL_PARTS, ComponentAccess, VideoShape, check_video_shape, frames_from_vae, read_model_index
from pipedit.attention.autotune import AttentionShape
from pipedit.capabilities import Capabilities
from pipedit.components import load_component, read_component_config
from pipedit.errors import InvalidRequestError, UserInputError
from pipedit.guidance import GuidedPrediction
from pipedit.model_hooks import AdapterHooks
from pipedit.sampling import shift_parameter
from pipedit.video_adapter import DiffusersVideoAdapter

from .checkpoint import IMAGE_PARTS, TEXT_PARTS, WanLayout
from .experts import IDLE_EXPERT_MODES, Experts, offload_homes, swap_after_compile_problem
from .image_condition import clip_image_embeds, condition_channels, first_frame_latents
from .sampler import make_scheduler
from .text_encoding import DEFAULT_NEGATIVE_PROMPT, encode_text

_COMPONENTS = (*TEXT_PARTS, *IMAGE_PARTS, "transformer", "transformer_2", "vae")
_T2V = WanLayout(image_to_video=False, image_embeds=False, boundary_ratio=None)
_IMAGE_KEYS = ("condition", "image_embeds", "first_frame")  # what every CFG branch carries of the image


class WanAdapter(ComponentAccess, DiffusersVideoAdapter, GuidedPrediction, AdapterHooks):
    family = "wan"
    component_names = _COMPONENTS
    # UMT5-XXL (~6B parameters) is too large to share memory with the 14B DiT, as HunyuanVideo's Llama.
    preferred_text_encoder = "vae"
    # Each checkpoint sets these at load: image-to-video and two-expert ones widen them (image,
    # needs_image, guidance_scale_2); flow_shift is whether its scheduler has a shift to set.
    capabilities = Capabilities(negative_prompt=True, cfg_parallel=True, flow_shift=True)
    new_scheduler = staticmethod(make_scheduler)

    def __init__(self, components: dict, configs: dict, device, dtype: torch.dtype | None,
                 layout: WanLayout = _T2V, idle_expert: str = "resident", expert_homes: list | None = None):
        """`expert_homes`: offload's host copies of the experts (Experts' `homes`)."""
        self.components = components
        self.dit_config, self.vae_config = configs["transformer"], configs["vae"]
        self.device = torch.device(device)
        self.dtype = dtype
        self.temporal_ratio = int(self.vae_config.get("scale_factor_temporal", 4))
        self.spatial_ratio = int(self.vae_config.get("scale_factor_spatial", 8))
        self.layout = layout
        self.idle_expert = idle_expert
        self.capabilities = replace(type(self).capabilities, image=layout.takes_image, needs_image=layout.needs_image,
                                    guidance_scale_2=layout.two_experts,
                                    flow_shift=shift_parameter(components["scheduler"].config) is not None)
        self.expert_set = None  # the denoise ranks' experts (dit loaded)
        # Hazard: AutoencoderKLWan keeps its causal feature caches on the module itself, and every
        # encode and decode resets both (clear_cache). The text rank encodes the next request's
        # image in a second thread while this VAE decodes (DeDiVAE), so the image encode runs on
        # its own shallow copy: the same submodules and weights (no memory), its own caches. A
        # lock instead would hold the encode, and so the next request's denoising, for a whole
        # decode. The two may run at once: the rank's memory holds both activations.
        self.encoding_vae = copy.copy(components["vae"]) if "vae" in components else None
        if "transformer" in components:
            self.expert_set = Experts(self.experts, self._boundary_timestep(), self.device, idle_expert,
                                      expert_homes)

    # -- loading ---------------------------------------------------------------------------
    @classmethod
    def from_pretrained(cls, path, *, parts=ALL_PARTS, device="cpu", dtype=None, vae_tiling="auto",
                        idle_expert="resident"):
        """dtype None loads each component as diffusers' pipeline does by default. Wan decodes
        untiled, as WanPipeline does by default (vae_tiling auto or off). idle_expert (two-expert
        checkpoints, denoise ranks): resident or offload (experts.py)."""
        if vae_tiling not in ("auto", "off"):
            raise UserInputError(f"vae_tiling {vae_tiling!r} is not available for wan (it decodes untiled): "
                                 f"use auto or off")
        if idle_expert not in IDLE_EXPERT_MODES:
            raise UserInputError(f"idle_expert must be one of {', '.join(IDLE_EXPERT_MODES)}, got {idle_expert!r}")
        index = read_model_index(path)
        configs = {name: read_component_config(path, name) for name in ("transformer", "vae")}
        layout = WanLayout.read(path, index, configs["transformer"])
        # Offload (on a GPU): the idle expert never occupies the device, even while loading.
        offload = idle_expert == "offload" and layout.two_experts and torch.device(device).type != "cpu"
        components = {name: load_component(path, index, name, dtype=dtype, device=device)
                      for name in layout.components_for(parts) if not (offload and name == "transformer_2")}
        expert_homes = None
        if offload and "transformer" in components:
            expert_homes = offload_homes(path, index, components, dtype)
        return cls(components, configs, device, dtype, layout, idle_expert, expert_homes)

    def check_loras(self) -> None:
        """LoRA adapters go into the experts they name (pipedit.lora.inject); offload refuses them:
        the idle expert's host copy is its checkpoint files, which hold no adapter."""
        if self.idle_expert == "offload" and self.layout.two_experts:
            raise UserInputError("LoRA adapters cannot be combined with idle_expert offload (the idle expert's host "
                                 "copy is its checkpoint files); use idle_expert resident")

    @property
    def compute_dtype(self) -> torch.dtype:
        """The experts' compute dtype as loaded: after a swap under offload the idle expert's
        parameters are views of its files, whose dtype (float32 in the demo) `.dtype` reports."""
        return self.expert_set.compute_dtype if self.expert_set is not None else self.transformer.dtype

    def first_swap_bytes(self) -> int:
        """Offload: the idle expert's file bytes, which its first swap brings in (Experts)."""
        experts = self.expert_set
        return experts.file_bytes[1] if experts is not None and experts.offload else 0

    def check_compile(self) -> None:
        """--compile with the idle expert offloaded swaps compiled experts' parameters
        (experts.py `_rebind`), which some torch versions refuse: refused at start, with why."""
        if self.expert_set is not None and self.expert_set.offload and (problem := swap_after_compile_problem()):
            raise UserInputError(f"--compile cannot be combined with idle_expert offload here: {problem}; the "
                                 f"expert swap at every request's boundary would fail. Use idle_expert resident, run "
                                 f"without --compile, or a torch whose swap_tensors accepts compiled parameters")

    def _boundary_timestep(self) -> float | None:
        """boundary_ratio * num_train_timesteps, as diffusers computes it (None: one expert)."""
        if not self.layout.two_experts:
            return None
        return self.layout.boundary_ratio * self.components["scheduler"].config.num_train_timesteps

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
    def encode_prompt(self, prompt: str, negative_prompt: str | None = None, image=None,
                      shape: VideoShape | None = None, guided: bool = True) -> dict[str, torch.Tensor]:
        """negative_prompt None: the empty one, as WanPipeline without a negative prompt; not
        encoded at all without guidance (`guided` False: guidance_scale <= 1), as WanPipeline.
        Image-to-video: `image` (RGB PIL) and the request's `shape` give the image condition too."""
        if not prompt or not prompt.strip():
            raise InvalidRequestError("prompt must be a non-empty string")
        cond = {"prompt_embeds": encode_text(self.tokenizer, self.text_encoder, prompt, self.device)}
        if guided:
            negative = DEFAULT_NEGATIVE_PROMPT if negative_prompt is None else negative_prompt
            cond["negative_prompt_embeds"] = encode_text(self.tokenizer, self.text_encoder, negative, self.device)
        if image is not None or self.capabilities.needs_image:
            cond.update(self.encode_image(image, shape))
        return cond

    def encode_image(self, image, shape: VideoShape | None) -> dict[str, torch.Tensor]:
        """The condition channels, and the CLIP image embedding for Wan2.1 I2V; TI2V: the first
        frame's latents (image_condition.py). Never waits for a decode: it encodes on `encoding_vae`."""
        if not self.capabilities.image:
            raise InvalidRequestError("this wan checkpoint is text-to-video: it takes no image")
        if image is None or shape is None:
            raise InvalidRequestError("this wan checkpoint is image-to-video: the request needs an image")
        self.validate(shape, 1)
        if self.layout.expand_timesteps:
            return {"first_frame": first_frame_latents(self.encoding_vae, image, shape, self.spatial_ratio)}
        cond = {"condition": condition_channels(self.encoding_vae, image, shape, self.temporal_ratio,
                                                self.spatial_ratio)}
        if self.layout.image_embeds:
            cond["image_embeds"] = clip_image_embeds(self.image_processor, self.image_encoder, image)
        return cond

    def prepare_condition(self, cond: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Unchanged: Wan's DiT attends to all 512 text tokens, the padding ones as zero vectors
        (trimming them would change the cross-attention softmax)."""
        return cond

    def text_length(self, cond: dict[str, torch.Tensor]) -> int:
        """The cross-attention context: text tokens, after the image tokens (Wan2.1 I2V)."""
        image = cond["image_embeds"].shape[1] if "image_embeds" in cond else 0
        return cond["prompt_embeds"].shape[1] + image

    # -- guidance ----------------------------------------------------------------------------
    def cfg_branches(self, cond: dict[str, torch.Tensor]) -> list[dict[str, torch.Tensor]]:
        """[negative, positive] conditions (combine_guidance's order), [positive] for a request
        encoded without guidance; each branch carries the image condition too (the same tensors),
        since CFG parallel hands a group its branch only."""
        shared = {key: cond[key] for key in _IMAGE_KEYS if key in cond}
        keys = ("negative_prompt_embeds", "prompt_embeds") if "negative_prompt_embeds" in cond else ("prompt_embeds",)
        return [{"prompt_embeds": cond[key], **shared} for key in keys]

    def guidance_scale_at(self, request, timestep) -> float:
        """The step's guidance scale (an AdapterHooks hook, asked by runtime/denoise.py):
        Wan2.2's low-noise expert uses guidance_scale_2 (None: guidance_scale), as diffusers."""
        experts = self.expert_set
        if experts is None:
            return request.guidance_scale
        return experts.guidance_scale(timestep, request.guidance_scale, request.guidance_scale_2)

    @torch.no_grad()
    def predict_branches(self, latents: torch.Tensor, timestep: torch.Tensor,
                         branches: list[dict[str, torch.Tensor]]) -> list[torch.Tensor]:
        """One batched forward of this timestep's expert over the branches (the diffusers pipelines
        run them one by one: equal up to float rounding); I2V latents get the condition channels
        and the image embedding; outputs stay in the transformer's dtype, as the reference's."""
        model = self.expert_set.for_timestep(timestep)
        dtype = model.dtype
        count = len(branches)
        first = branches[0]
        if "condition" in first:
            latents = torch.cat([latents, first["condition"]], dim=1)
        if self.layout.expand_timesteps:  # per-token timesteps [count, tokens]
            mask = self._first_frame_mask(latents, "first_frame" in first)
            if "first_frame" in first:
                latents = (1 - mask) * first["first_frame"] + mask * latents
            patch_t, patch_h, patch_w = self.dit_config["patch_size"]
            timesteps = (mask[0, 0][::patch_t, ::patch_h, ::patch_w] * timestep).flatten()[None].expand(count, -1)
        else:
            timesteps = timestep.reshape(1).expand(count)
        x = torch.cat([latents] * count).to(dtype)
        embeds = torch.cat([b["prompt_embeds"] for b in branches]).to(dtype)
        image = torch.cat([b["image_embeds"] for b in branches]).to(dtype) if "image_embeds" in first else None
        out = model(hidden_states=x, timestep=timesteps, encoder_hidden_states=embeds,
                    encoder_hidden_states_image=image, return_dict=False)[0]
        return list(out.chunk(count))

    @staticmethod
    def _first_frame_mask(latents: torch.Tensor, image: bool) -> torch.Tensor:
        """TI2V's first_frame_mask [1, 1, T, h, w] float32: 0 on the first latent frame when an
        image gives it (its tokens get timestep 0 and the image's latents), else 1."""
        mask = torch.ones(1, 1, *latents.shape[2:], dtype=torch.float32, device=latents.device)
        if image:
            mask[:, :, 0] = 0
        return mask

    def finish_latents(self, latents: torch.Tensor, cond: dict[str, torch.Tensor]) -> torch.Tensor:
        """After the last step (runtime/denoise.py): TI2V with an image puts the image's latents
        in the first frame, as WanImageToVideoPipeline does after its loop; else unchanged."""
        if "first_frame" not in cond:
            return latents
        mask = self._first_frame_mask(latents, True)
        return (1 - mask) * cond["first_frame"] + mask * latents

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
        return [self.components[name] for name in ("transformer", "transformer_2") if name in self.components]

    def enable_sequence_parallel(self, ctx, strategy) -> int:
        """Every expert's attention through `strategy`, its video sequence sharded over ctx (see
        parallel.py); the calls per forward of one expert (only one runs per step)."""
        from .parallel import enable_sequence_parallel

        return [enable_sequence_parallel(expert, ctx, strategy) for expert in self.experts][0]

    def cache_blocks(self):
        """The transformer's blocks as the step cache sees them (pipedit.cache). Two experts are
        refused: a residual cached on one expert says nothing about the other's."""
        from .cache_blocks import cache_blocks

        if self.layout.two_experts:
            raise InvalidRequestError("step caching is not available for two-expert Wan2.2 checkpoints; use cache none")
        return cache_blocks(self.transformer)

    # -- denoising (latents and scheduler: DiffusersVideoAdapter) ---------------------------
    @property
    def latent_channels(self) -> int:
        return int(self.vae_config.get("z_dim", 16))  # as the reference (I2V's DiT takes more: the condition)

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
        video = self.vae.decode(latents / inverse_std + mean, return_dict=False)[0]  # see encoding_vae
        return self.frames(video)

    frames = staticmethod(frames_from_vae)  # the VAE's video -> frames [B, F, H, W, 3] in [0, 1]
