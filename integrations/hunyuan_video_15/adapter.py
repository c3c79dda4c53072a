"""HunyuanVideo 1.5 behind pipedit's model-adapter seam: text-to-video and image-to-video.

Loads a diffusers-layout checkpoint (model_index.json `HunyuanVideo15Pipeline` or
`HunyuanVideo15ImageToVideoPipeline`) one component at a time and reproduces those pipelines'
numerics (diffusers 0.42.1): Qwen2.5-VL and ByT5 text states (text_encoding.py), the guider's
classifier-free guidance (guider.py) with the empty negative prompt, the checkpoint's flow-match
scheduler at linear sigmas, randn latents with the condition channels (zeros for text-to-video;
the image's latents and mask for image-to-video, image_condition.py), SigLIP image tokens, and
the VAE's scaling factor. The denoising loop itself is pipedit's engine; guidance follows the
CFG seam shared with Wan and OpenSoraPlan (cfg_branches, predict_branches).

Text tokens: the text rank sends only the valid ones of each stream (Qwen, ByT5, image); the
denoise ranks pad a request's two branches to a common length per stream, with a key mask only
where one branch is shorter (prepare_condition). Every forward of a request then has the same
text length (Aco's messages, CFG parallel's groups), and a prompt whose branches match runs the
unmasked attention kernels.

The DiT's attention runs through pipedit's processors on one rank too. HunyuanVideo's processor
and shard plan serve this model unchanged (integrations/hunyuan_video/parallel.py): the same
x_embedder tokens [B, S, C], rope (cos, sin) [S, D] and per-token proj_out, and dual-stream blocks
joining video and text in one attention; video tokens are sharded, the text (Qwen, ByT5 and
image tokens) replicated. The token refiner's text-only attention keeps diffusers' processor.
Hazard: that processor's attribute names and call contract; re-check on every diffusers upgrade.
"""

from __future__ import annotations

import copy
from dataclasses import replace

import torch

from pipedit.adapter import ALL_PARTS, ComponentAccess, VideoShape, check_video_shape, frames_from_vae, read_model_index
from pipedit.attention.autotune import AttentionShape
from pipedit.capabilities import Capabilities
from pipedit.components import load_component, read_component_config
from pipedit.errors import InvalidRequestError, ModelPathError
from pipedit.guidance import GuidedPrediction
from pipedit.model_hooks import AdapterHooks
from pipedit.sampling import shift_parameter
from pipedit.video_adapter import DiffusersVideoAdapter, FreeMemoryTiling
from pipedit.integrations.hunyuan_video.parallel import TextKeys, install_processors
from pipedit.integrations.hunyuan_video.sampler import make_scheduler
# free_device_bytes, should_tile and predict_decode_peak_bytes: the tiling rules FreeMemoryTiling reads here.
from pipedit.integrations.hunyuan_video.vae_memory import check_mode, free_device_bytes, should_tile  # noqa: F401

from .guider import Guider
from .image_condition import SIGLIP_TOKENS, condition_latents, siglip_states
from .text_encoding import GLYPH_TOKENS, MAX_TOKENS, encode_glyphs, encode_mllm
from .vae_memory import predict_decode_peak_bytes  # noqa: F401

IMAGE_TO_VIDEO = "HunyuanVideo15ImageToVideoPipeline"
TEXT_PARTS = ("tokenizer", "text_encoder", "tokenizer_2", "text_encoder_2")
IMAGE_PARTS = ("image_encoder", "feature_extractor")
DEFAULT_NEGATIVE_PROMPT = ""  # the pipelines' (no negative prompt: the empty one)
# A condition's streams in the DiT's order of attention keys: image, ByT5, Qwen. Each is
# [1, n, width] of valid tokens; negatives carry the same names with this prefix.
STREAMS = ("image_embeds", "prompt_embeds_2", "prompt_embeds")
NEGATIVE = "negative_"


class HunyuanVideo15Adapter(ComponentAccess, FreeMemoryTiling, DiffusersVideoAdapter, GuidedPrediction, AdapterHooks):
    family = "hunyuan-video-1.5"
    component_names = (*TEXT_PARTS, *IMAGE_PARTS, "transformer", "vae")
    # Qwen2.5-VL-7B is too large to share memory with the 8.3B DiT: with the VAE, as HunyuanVideo's Llama.
    preferred_text_encoder = "vae"
    # Each checkpoint sets these at load (image-to-video; a guider that is off drops the negative branch).
    capabilities = Capabilities(negative_prompt=True, cfg_parallel=True, flow_shift=True)
    new_scheduler = staticmethod(make_scheduler)
    # Decode tiling on free memory (FreeMemoryTiling) by the rules imported above: the VAE's spatial
    # tiling (256-pixel tiles overlapping by a quarter, all frames; a video within one tile decodes
    # untiled), HunyuanVideo's rule (should_tile: never on CPU) on this VAE's own peak prediction.
    tiling_module = __name__

    def __init__(self, components: dict, configs: dict, device, dtype: torch.dtype | None,
                 image_to_video: bool = False, guider: Guider = Guider(), vae_tiling: str = "auto"):
        self.components = components
        self.dit_config, self.vae_config = configs["transformer"], configs["vae"]
        self.device = torch.device(device)
        self.dtype = dtype
        self.guider = guider
        self.vae_tiling = check_mode(vae_tiling)  # auto, on or off: see decode_mode
        self.spatial_ratio = int(self.vae_config.get("spatial_compression_ratio", 16))
        self.temporal_ratio = int(self.vae_config.get("temporal_compression_ratio", 4))
        self.image_to_video = image_to_video
        self.capabilities = replace(type(self).capabilities, image=image_to_video, needs_image=image_to_video,
                                    negative_prompt=guider.enabled, cfg_parallel=guider.enabled,
                                    flow_shift=shift_parameter(components["scheduler"].config) is not None)
        self.text_keys = TextKeys(padded=False)  # set per request by prepare_condition
        # The image's encode runs on the text rank, maybe while this VAE decodes in another thread
        # (DeDiVAE); a shallow copy keeps its own tiling flags, so a decode never tiles an encode.
        self.encoding_vae = copy.copy(components["vae"]) if "vae" in components else None
        if "transformer" in components:
            self._route_attention()

    def _route_attention(self) -> None:
        from pipedit.attention.local import LocalAttention
        from pipedit.distributed.context import ParallelContext

        install_processors(self.transformer, LocalAttention(ParallelContext.single(self.device)), None, self.text_keys)

    # -- loading ---------------------------------------------------------------------------
    @classmethod
    def from_pretrained(cls, path, *, parts=ALL_PARTS, device="cpu", dtype=None, vae_tiling="auto"):
        """dtype None loads each component as diffusers' pipeline does by default. vae_tiling: see
        decode_mode."""
        index = read_model_index(path)
        image_to_video = index["_class_name"] == IMAGE_TO_VIDEO
        configs = {name: read_component_config(path, name) for name in ("transformer", "vae")}
        if configs["transformer"].get("use_meanflow"):
            raise ModelPathError(f"{path}: MeanFlow transformers (use_meanflow, the super-resolution releases) are "
                                 f"not supported; serve the 480p or 720p text- or image-to-video release")
        wanted = ["scheduler"]
        if "text" in parts:
            wanted += [*TEXT_PARTS, *(IMAGE_PARTS + ("vae",) if image_to_video else ())]
        if "dit" in parts:
            wanted.append("transformer")
        if "vae" in parts and "vae" not in wanted:
            wanted.append("vae")
        components = {name: load_component(path, index, name, dtype=dtype, device=device) for name in wanted}
        return cls(components, configs, device, dtype, image_to_video, Guider.read(path, index), vae_tiling)

    # -- validation ------------------------------------------------------------------------
    @property
    def size_multiple(self) -> int:
        return self.spatial_ratio * int(self.dit_config.get("patch_size", 1))

    def validate(self, shape: VideoShape, steps: int) -> None:
        check_video_shape(shape, steps, size_multiple=self.size_multiple, frame_stride=self.temporal_ratio,
                          model="HunyuanVideo 1.5")

    # -- prompt and image --------------------------------------------------------------------
    @torch.no_grad()
    def encode_prompt(self, prompt: str, negative_prompt: str | None = None, image=None,
                      shape: VideoShape | None = None, guided: bool = True) -> dict[str, torch.Tensor]:
        """The valid text tokens of the prompt, and of the negative prompt when the request is
        guided (`guided`: guidance_scale > 1) and the checkpoint's guider is on; image-to-video:
        the image's condition latents and SigLIP tokens for the request's `shape`."""
        if not prompt or not prompt.strip():
            raise InvalidRequestError("prompt must be a non-empty string")
        cond = self._text(prompt, "")
        if guided and self.guider.enabled:
            cond.update(self._text(DEFAULT_NEGATIVE_PROMPT if negative_prompt is None else negative_prompt, NEGATIVE))
        if image is not None or self.image_to_video:
            cond.update(self.encode_image(image, shape))
        return cond

    def _text(self, prompt: str, prefix: str) -> dict[str, torch.Tensor]:
        return {f"{prefix}prompt_embeds": encode_mllm(self.tokenizer, self.text_encoder, prompt),
                f"{prefix}prompt_embeds_2": encode_glyphs(self.tokenizer_2, self.text_encoder_2, prompt)}

    def encode_image(self, image, shape: VideoShape | None) -> dict[str, torch.Tensor]:
        if not self.image_to_video:
            raise InvalidRequestError("this hunyuan-video-1.5 checkpoint is text-to-video: it takes no image")
        if image is None or shape is None:
            raise InvalidRequestError("this hunyuan-video-1.5 checkpoint is image-to-video: the request needs an image")
        self.validate(shape, 1)
        frames = self.latent_shape(shape)[2]
        return {"condition": condition_latents(self.encoding_vae, image, shape, frames, self.spatial_ratio),
                "image_embeds": siglip_states(self.feature_extractor, self.image_encoder, image, shape,
                                              self.spatial_ratio)}

    def prepare_condition(self, cond: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Each text stream of the branches padded with zeros to the longer branch's length, with
        a mask (`<stream>_mask`, bool) where a branch is shorter. The processors use the mask only
        when some branch has padding (text_keys)."""
        out = {key: value for key, value in cond.items() if not key.startswith(STREAMS[1:]) and
               not key.startswith(NEGATIVE)}
        padded = False
        for stream in STREAMS[1:]:
            names = [name for name in (NEGATIVE + stream, stream) if name in cond]
            length = max(cond[name].shape[1] for name in names)
            for name in names:
                states = cond[name]
                valid = states.shape[1]
                padded |= valid < length
                out[name] = torch.cat([states, states.new_zeros(1, length - valid, states.shape[2])], dim=1)
                out[name + "_mask"] = torch.arange(length)[None] < valid
        self.text_keys.padded = padded
        return out

    def text_length(self, cond: dict[str, torch.Tensor]) -> int:
        """Text and image tokens the DiT attends to besides the video (the same for every branch)."""
        image = cond["image_embeds"].shape[1] if "image_embeds" in cond else 0
        return image + cond["prompt_embeds_2"].shape[1] + cond["prompt_embeds"].shape[1]

    # -- guidance ----------------------------------------------------------------------------
    def cfg_branches(self, cond: dict[str, torch.Tensor]) -> list[dict[str, torch.Tensor]]:
        """[negative, positive] (combine_guidance's order), [positive] without a negative; each
        carries the image condition too, since CFG parallel hands a group its branch only."""
        shared = {key: cond[key] for key in ("condition", "image_embeds") if key in cond}
        prefixes = (NEGATIVE, "") if NEGATIVE + "prompt_embeds" in cond else ("",)
        keys = ("prompt_embeds", "prompt_embeds_mask", "prompt_embeds_2", "prompt_embeds_2_mask")
        return [{**{key: cond[prefix + key] for key in keys}, **shared} for prefix in prefixes]

    def branches_for(self, cond: dict, guidance_scale: float) -> list:
        """The guider off: the conditional pass alone whatever the scale; else the shared rule."""
        if not self.guider.enabled:
            return self.cfg_branches(cond)[-1:]
        return super().branches_for(cond, guidance_scale)

    @torch.no_grad()
    def predict_branches(self, latents: torch.Tensor, timestep: torch.Tensor,
                         branches: list[dict[str, torch.Tensor]]) -> list[torch.Tensor]:
        """One batched forward over the branches (the pipelines run them one by one: equal up to
        float rounding); outputs stay in the transformer's dtype, as the reference's."""
        dtype = self.transformer.dtype
        count = len(branches)
        first = branches[0]
        condition = first.get("condition")
        if condition is None:  # text-to-video: zero condition latents and mask
            condition = latents.new_zeros(latents.shape[0], latents.shape[1] + 1, *latents.shape[2:])
        x = torch.cat([latents, condition.to(latents.dtype)], dim=1).to(dtype)
        x = torch.cat([x] * count)
        image = first.get("image_embeds")
        if image is None:  # no image tokens: the DiT masks an all-zero image out
            image = x.new_zeros(1, 0, int(self.dit_config["image_embed_dim"]))
        out = self.transformer(
            hidden_states=x, timestep=timestep.reshape(1).expand(count).to(dtype),
            encoder_hidden_states=torch.cat([b["prompt_embeds"] for b in branches]).to(dtype),
            encoder_attention_mask=torch.cat([b["prompt_embeds_mask"] for b in branches]),
            encoder_hidden_states_2=torch.cat([b["prompt_embeds_2"] for b in branches]).to(dtype),
            encoder_attention_mask_2=torch.cat([b["prompt_embeds_2_mask"] for b in branches]),
            image_embeds=torch.cat([image] * count).to(dtype), return_dict=False,
        )[0]
        return list(out.chunk(count))

    # -- parallelism -------------------------------------------------------------------------
    @property
    def num_heads(self) -> int:
        return int(self.dit_config["num_attention_heads"])

    def attention_shape(self, shape: VideoShape) -> AttentionShape:
        """The joint attention call: video tokens with up to 729 image, 256 ByT5 and 1000 Qwen tokens."""
        _, _, frames, height, width = self.latent_shape(shape)
        patch, patch_t = int(self.dit_config.get("patch_size", 1)), int(self.dit_config.get("patch_size_t", 1))
        tokens = (frames // patch_t) * (height // patch) * (width // patch)
        image = SIGLIP_TOKENS if self.image_to_video else 0
        return AttentionShape(seq_len=tokens, text_len=image + GLYPH_TOKENS + MAX_TOKENS, heads=self.num_heads,
                              head_dim=int(self.dit_config["attention_head_dim"]))

    def enable_sequence_parallel(self, ctx, strategy) -> int:
        from pipedit.integrations.hunyuan_video.parallel import enable_sequence_parallel

        return enable_sequence_parallel(self.transformer, ctx, strategy, self.text_keys)

    def cache_blocks(self):
        """The transformer's blocks as the step cache sees them (pipedit.cache): HunyuanVideo's
        dual-stream block form."""
        from pipedit.integrations.hunyuan_video.cache_blocks import cache_blocks

        return cache_blocks(self.transformer)

    # -- denoising (latents and scheduler: DiffusersVideoAdapter) ---------------------------
    @property
    def latent_channels(self) -> int:
        return int(self.vae_config.get("latent_channels", 32))

    # -- decoding -------------------------------------------------------------------------
    @torch.no_grad()
    def decode(self, latents: torch.Tensor) -> torch.Tensor:
        if self.decode_mode(latents.shape):
            self.vae.enable_tiling()
        else:
            self.vae.disable_tiling()
        latents = latents.to(self.device, self.vae.dtype) / self.vae.config.scaling_factor
        return self.frames(self.vae.decode(latents, return_dict=False)[0])

    frames = staticmethod(frames_from_vae)  # the VAE's video -> frames [B, F, H, W, 3] in [0, 1]
