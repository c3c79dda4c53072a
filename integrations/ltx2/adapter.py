"""LTX-2 behind pipedit's model-adapter seam: the video and its sound, denoised together.

Loads a diffusers-layout checkpoint (checkpoint.py) one component at a time and reproduces
LTX2Pipeline's and LTX2ImageToVideoPipeline's numerics (diffusers 0.42.1): the Gemma 3 prompt
embedding through the connectors (text_encoding.py), the audio length that follows the frames and
fps, the video noise then the audio noise from the request's generator, the dynamic-shift Euler
schedule (sampler.py), the guidance passes and their combination (guidance.py), the first-frame
condition of image-to-video (image_condition.py), and both decodes. The two latents travel through
the engine as one tensor (latents.py); the denoising loop is pipedit's.

Parallel paths: sequence parallelism over the video tokens with the sound whole on every rank
(parallel.py), the guidance passes over CFG-parallel groups, decode ranks and Aco through the engine.
"""

from __future__ import annotations

import math
from dataclasses import replace

import torch
from diffusers.models.autoencoders.autoencoder_kl_ltx2_audio import LATENT_DOWNSAMPLE_FACTOR

from pipedit.adapter import ALL_PARTS, ComponentAccess, VideoShape, check_video_shape, frames_from_vae, read_model_index
from pipedit.attention.autotune import AttentionShape
from pipedit.capabilities import Capabilities
from pipedit.components import load_component, read_component_config
from pipedit.errors import InvalidRequestError, UserInputError
from pipedit.guidance import GuidedPrediction
from pipedit.model_hooks import AdapterHooks
from pipedit.sound import Soundtrack

from .checkpoint import SOUND_PARTS, TEXT_PARTS, LTX2Layout
from .guidance import Guidance, combine_stream
from .image_condition import first_frame_latents
from .latents import JointGrid
from .sampler import make_scheduler, shift_settable
from .text_encoding import encode_text

_COMPONENTS = (*TEXT_PARTS, *SOUND_PARTS, "transformer", "vae")
_TEXT_KEYS = ("prompt_embeds", "audio_prompt_embeds", "prompt_mask")
_SHARED_KEYS = ("grid", "image_latents")  # what every branch carries besides its text


def _spatial_ratio(config: dict) -> int:
    # As AutoencoderKLLTX2Video: patch_size x 2 per downscaling stage, unless the config names it.
    given = config.get("spatial_compression_ratio")
    return int(given) if given else int(config.get("patch_size", 4)) * 2 ** sum(config["spatio_temporal_scaling"])


def _temporal_ratio(config: dict) -> int:
    given = config.get("temporal_compression_ratio")
    return int(given) if given else int(config.get("patch_size_t", 1)) * 2 ** sum(config["spatio_temporal_scaling"])


class LTX2Adapter(ComponentAccess, GuidedPrediction, AdapterHooks):
    family = "ltx-2"
    component_names = ("scheduler", *_COMPONENTS)
    # Gemma 3 12B is too large to share memory with the 19B DiT, as Wan's UMT5.
    preferred_text_encoder = "vae"
    # Every checkpoint takes an image (LTX2Pipeline's weights serve image-to-video too); flow_shift
    # is set per checkpoint (its scheduler's shift).
    capabilities = Capabilities(negative_prompt=True, image=True, cfg_parallel=True, flow_shift=True, has_sound=True)

    def __init__(self, components: dict, configs: dict, device, dtype: torch.dtype | None, layout: LTX2Layout):
        self.components = components
        self.configs = configs
        self.dit_config, self.vae_config, self.audio_config = configs["transformer"], configs["vae"], configs["audio_vae"]
        self.device = torch.device(device)
        self.dtype = dtype
        self.layout = layout
        self.spatial_ratio, self.temporal_ratio = _spatial_ratio(self.vae_config), _temporal_ratio(self.vae_config)
        self.capabilities = replace(type(self).capabilities, needs_image=layout.needs_image,
                                    flow_shift=shift_settable(components["scheduler"].config))

    # -- loading ---------------------------------------------------------------------------
    @classmethod
    def from_pretrained(cls, path, *, parts=ALL_PARTS, device="cpu", dtype=None, vae_tiling="auto"):
        """dtype None loads each component as diffusers' pipeline does by default. LTX-2 decodes
        untiled, as LTX2Pipeline does by default (vae_tiling auto or off)."""
        if vae_tiling not in ("auto", "off"):
            raise UserInputError(f"vae_tiling {vae_tiling!r} is not available for ltx-2 (it decodes untiled): "
                                 f"use auto or off")
        index = read_model_index(path)
        layout = LTX2Layout.read(path, index)
        configs = {name: read_component_config(path, name) for name in ("transformer", "vae", "audio_vae")}
        components = {name: load_component(path, index, name, dtype=dtype, device=device)
                      for name in layout.components_for(parts)}
        return cls(components, configs, device, dtype, layout)

    # -- shapes ----------------------------------------------------------------------------
    @property
    def size_multiple(self) -> int:
        # LTX2Pipeline takes sizes divisible by 32 (the released VAE's stride) whatever the VAE.
        return math.lcm(32, self.spatial_ratio * int(self.dit_config.get("patch_size", 1)))

    def validate(self, shape: VideoShape, steps: int) -> None:
        # LTX2Pipeline rounds sizes down silently; pipedit refuses them instead.
        check_video_shape(shape, steps, size_multiple=self.size_multiple, frame_stride=self.temporal_ratio,
                          model="LTX-2")

    def audio_frames(self, shape: VideoShape) -> int:
        """Latent audio frames for the video's duration, as the pipeline rounds them."""
        config = self.audio_config
        per_second = config.get("sample_rate", 16000) / config.get("mel_hop_length", 160) / float(LATENT_DOWNSAMPLE_FACTOR)
        return round(shape.num_frames / shape.fps * per_second)

    def grid(self, shape: VideoShape) -> JointGrid:
        audio = self.audio_config
        return JointGrid(channels=int(self.dit_config["in_channels"]),
                         frames=(shape.num_frames - 1) // self.temporal_ratio + 1,
                         height=shape.height // self.spatial_ratio, width=shape.width // self.spatial_ratio,
                         audio_channels=int(audio.get("latent_channels", 8)), audio_frames=self.audio_frames(shape),
                         mel_bins=int(audio.get("mel_bins", 64)) // LATENT_DOWNSAMPLE_FACTOR,
                         patch=int(self.dit_config.get("patch_size", 1)),
                         patch_t=int(self.dit_config.get("patch_size_t", 1)))

    def latent_shape(self, shape: VideoShape) -> tuple[int, ...]:
        return self.grid(shape).shape

    def prepare_latents(self, shape: VideoShape, generator: torch.Generator) -> torch.Tensor:
        """The video's noise, then the sound's, from the request's generator (the pipeline's order)."""
        grid = self.grid(shape)
        video = torch.randn((1, grid.channels, grid.frames, grid.height, grid.width), generator=generator)
        audio = torch.randn((1, grid.audio_channels, grid.audio_frames, grid.mel_bins), generator=generator)
        return grid.join(video, audio).to(self.device)

    def make_scheduler(self, sampling):
        shape = VideoShape(sampling.height, sampling.width, sampling.num_frames)
        return make_scheduler(self.components["scheduler"], sampling, self.device, self.grid(shape).video_tokens)

    @staticmethod
    def grid_tensor(grid: JointGrid, fps: int) -> torch.Tensor:
        # The condition is tensors only (it moves to each rank's device; the dry run's are fake), so
        # the request's grid travels as the *shape* of an empty tensor: known wherever the tensor is,
        # values or not, and no memory.
        return torch.empty((0, grid.frames, grid.height, grid.width, grid.audio_frames, fps))

    def grid_of(self, cond: dict) -> tuple[JointGrid, int]:
        _, frames, height, width, audio_frames, fps = cond["grid"].shape
        shape = VideoShape(height * self.spatial_ratio, width * self.spatial_ratio,
                           (frames - 1) * self.temporal_ratio + 1, fps)
        grid = self.grid(shape)
        if grid.audio_frames != audio_frames:
            raise RuntimeError("the condition's audio length disagrees with its video's frames and fps")
        return grid, fps

    # -- prompt ----------------------------------------------------------------------------
    @torch.no_grad()
    def encode_prompt(self, prompt: str, negative_prompt: str | None = None, image=None,
                      shape: VideoShape | None = None, guided: bool = True) -> dict[str, torch.Tensor]:
        """On the text rank. The condition carries the video's latent grid and fps (the sound's
        length and the positions depend on them: `shape` is passed for every request of a model
        with sound), and with an image its first-frame latents. negative_prompt None: "", as the
        pipeline; not encoded without guidance (`guided` False)."""
        if not prompt or not prompt.strip():
            raise InvalidRequestError("prompt must be a non-empty string")
        if shape is None:
            raise InvalidRequestError("ltx-2 needs the video's shape with the prompt (its sound's length follows it)")
        cond = dict(zip(_TEXT_KEYS, self._encode(prompt)))
        if guided:
            negative = self._encode("" if negative_prompt is None else negative_prompt)
            cond.update({f"negative_{key}": value for key, value in zip(_TEXT_KEYS, negative)})
        cond["grid"] = self.grid_tensor(self.grid(shape), shape.fps)
        if image is None and self.capabilities.needs_image:
            raise InvalidRequestError("this ltx-2 checkpoint is image-to-video: the request needs an image")
        if image is not None:
            self.validate(shape, 1)
            cond["image_latents"] = first_frame_latents(self.vae, self.text_encoder.config, image, shape.height,
                                                        shape.width, self.spatial_ratio)
        return cond

    def _encode(self, text: str):
        return encode_text(self.tokenizer, self.text_encoder, self.connectors, text, self.device)

    def prepare_condition(self, cond: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Unchanged: the DiT attends to every text token the connectors give (registers included)."""
        return cond

    def text_length(self, cond: dict[str, torch.Tensor]) -> int:
        return cond["prompt_embeds"].shape[1]

    # -- guidance ----------------------------------------------------------------------------
    def guidance(self, guidance_scale: float) -> Guidance:
        return Guidance.for_scale(guidance_scale, int(self.dit_config["num_layers"]))

    def cfg_branches(self, cond: dict) -> list[dict]:
        """[negative, positive] (positive alone when encoded without guidance); each carries the grid
        and the image latents, since a CFG-parallel group gets its branches only."""
        shared = {key: cond[key] for key in _SHARED_KEYS if key in cond}
        positive = {**{key: cond[key] for key in _TEXT_KEYS}, **shared, "kind": "positive"}
        if "negative_prompt_embeds" not in cond:
            return [positive]
        negative = {**{key: cond[f"negative_{key}"] for key in _TEXT_KEYS}, **shared, "kind": "negative"}
        return [negative, positive]

    def branches_for(self, cond: dict, guidance_scale: float) -> list[dict]:
        """The passes a step runs (guidance.py): CFG's two, then STG's and modality isolation's,
        both on the positive prompt."""
        kinds = self.guidance(guidance_scale).branches()
        branches = self.cfg_branches(cond)
        if "negative" in kinds and len(branches) != 2:
            raise RuntimeError(f"guidance_scale {guidance_scale} needs the negative branch, but the condition was "
                               f"encoded without it (a request whose guidance_scale is at most 1)")
        positive = branches[-1]
        by_kind = {"negative": branches[0], "positive": positive,
                   "stg": {**positive, "kind": "stg"}, "isolated": {**positive, "kind": "isolated"}}
        return [by_kind[kind] for kind in kinds]

    @torch.no_grad()
    def predict_branches(self, latents: torch.Tensor, timestep: torch.Tensor, branches: list[dict]) -> list[torch.Tensor]:
        """One velocity per branch, in the joint layout (float32). The negative and positive
        passes run as one batch of two (as the pipeline runs them), the others one by one."""
        from .forward import run_branches

        return run_branches(self, latents, timestep, branches)

    def combine_predictions(self, preds: list[torch.Tensor], latents: torch.Tensor, timestep: torch.Tensor,
                            branches: list[dict], guidance_scale: float) -> torch.Tensor:
        """The guided velocity (guidance.py), per stream in the pipeline's token layout; the first
        frame of image-to-video keeps its latents (velocity 0 there)."""
        grid, _ = self.grid_of(branches[0])
        guidance = self.guidance(guidance_scale)
        kinds = guidance.branches()
        sample = self.model_latents(latents, branches[0])
        sigma = timestep.float() / self.components["scheduler"].config.num_train_timesteps
        video_sample, audio_sample = grid.tokens(sample)
        streams = [grid.tokens(pred) for pred in preds]
        video = combine_stream({k: s[0] for k, s in zip(kinds, streams)}, video_sample, sigma, guidance.video)
        audio = combine_stream({k: s[1] for k, s in zip(kinds, streams)}, audio_sample, sigma, guidance.audio)
        velocity = grid.from_tokens(video, audio)
        if "image_latents" in branches[0]:
            velocity[:, : grid.channels, :1] = 0  # the pipeline steps the video's frames 1: only
        return velocity

    def model_latents(self, latents: torch.Tensor, cond: dict) -> torch.Tensor:
        """The latents the pipeline holds: image-to-video's first latent frame is the image's."""
        if "image_latents" not in cond:
            return latents
        grid, _ = self.grid_of(cond)
        video = grid.video(latents).clone()
        video[:, :, :1] = cond["image_latents"].to(video.dtype)
        return torch.cat([video, latents[:, grid.channels:]], dim=1)

    def finish_latents(self, latents: torch.Tensor, cond: dict) -> torch.Tensor:
        return self.model_latents(latents, cond)

    # -- parallelism -------------------------------------------------------------------------
    @property
    def num_heads(self) -> int:
        return int(self.dit_config["num_attention_heads"])

    def attention_shape(self, shape: VideoShape) -> AttentionShape:
        """The video self-attention (text, and the sound, are attended in separate cross-attention)."""
        return AttentionShape(seq_len=self.grid(shape).video_tokens, text_len=0, heads=self.num_heads,
                              head_dim=int(self.dit_config["attention_head_dim"]))

    def enable_sequence_parallel(self, ctx, strategy) -> int:
        from .parallel import enable_sequence_parallel

        return enable_sequence_parallel(self.transformer, ctx, strategy)

    # -- decoding --------------------------------------------------------------------------
    @torch.no_grad()
    def decode(self, latents: torch.Tensor) -> torch.Tensor:
        """The video half -> frames [B, F, H, W, 3] in [0, 1], as LTX2Pipeline decodes it (decode
        timestep 0 and no decode noise: the pipeline's defaults, which leave the latents as they are)."""
        config = self.vae.config
        video = latents[:, : int(self.dit_config["in_channels"])].to(self.device, torch.float32)
        view = (1, -1, 1, 1, 1)
        mean = self.vae.latents_mean.view(view).to(video.device, video.dtype)
        std = self.vae.latents_std.view(view).to(video.device, video.dtype)
        video = (video * std / config.scaling_factor + mean).to(self.vae.dtype)
        timestep = torch.zeros(video.shape[0], device=video.device, dtype=video.dtype) if config.timestep_conditioning else None
        return frames_from_vae(self.vae.decode(video, timestep, return_dict=False)[0])

    @torch.no_grad()
    def decode_sound(self, latents: torch.Tensor, shape: VideoShape):
        """The sound half -> its waveform [channels, samples] at the vocoder's sample rate."""
        audio = self.denormalized_audio(latents, self.grid(shape))
        mel = self.audio_vae.decode(audio.to(self.audio_vae.dtype), return_dict=False)[0]
        wave = self.vocoder(mel)[0].float().clamp(-1, 1).cpu()  # the track holds [-1, 1]
        return Soundtrack(wave, int(self.vocoder.config.output_sampling_rate))

    def denormalized_audio(self, latents: torch.Tensor, grid: JointGrid) -> torch.Tensor:
        """[1, Ca, L, M] in the audio VAE's units, as the pipeline unnormalises its tokens."""
        tokens = grid.audio_tokens_of(grid.audio(latents).to(self.device, torch.float32))
        mean = self.audio_vae.latents_mean.to(tokens.device, tokens.dtype)
        std = self.audio_vae.latents_std.to(tokens.device, tokens.dtype)
        return grid.audio_from_tokens(tokens * std + mean)

    def saved_latents(self, latents: torch.Tensor, shape: VideoShape) -> dict[str, torch.Tensor]:
        """--save-latents: the video [1, C, F, h, w] and the sound [1, Ca, L, M], as denoised."""
        grid = self.grid(shape)
        return {"latents": grid.video(latents).contiguous(), "audio_latents": grid.audio(latents).contiguous()}
