"""Open-Sora-Plan v1.3 behind pipedit's model-adapter seam.

Loads the official release layout (any93x640x640/ + vae/, mT5 from --text-encoder-path) and
follows the official sampler under pipedit's reproducibility convention: one CPU generator per
request draws the initial noise (x init_noise_sigma) and then, in every step after the model
call, the ancestral noise (DenoiseJob passes it to scheduler.step). Classifier-free guidance
runs [negative, positive] branches when guidance_scale > 1, as the official pipeline does.
"""

from __future__ import annotations

from pathlib import Path

import torch

from pipedit.adapter import ALL_PARTS, ComponentAccess, VideoShape, check_video_shape
from pipedit.attention.autotune import AttentionShape
from pipedit.capabilities import Capabilities
from pipedit.errors import InvalidRequestError, ModelPathError, UserInputError
from pipedit.guidance import GuidedPrediction
from pipedit.model_hooks import AdapterHooks
from pipedit.sampling import SamplingParams

from .checkpoint import TEXT_ENCODER_FOLDER, VAE_FOLDER, find_transformer_folder, read_json
from .sampler import initial_noise, make_scheduler
from .text_encoding import NEGATIVE_PROMPT, POSITIVE_TEMPLATE, encode_text, load_text_encoder

VAE_TEMPORAL, VAE_SPATIAL = 4, 8  # WFVAEModel_D8_4x8x8
VAE_TILING_MODES = ("auto", "on", "off")


class OpenSoraPlanAdapter(ComponentAccess, GuidedPrediction, AdapterHooks):
    family = "opensora-plan"
    component_names = ("tokenizer", "text_encoder", "transformer", "vae")
    # The paper places OpenSoraPlan's text encoder with the DiT.
    preferred_text_encoder = "dit"
    # Skiparse layers need a head's whole sequence on one rank: Ulysses only, no ring.
    capabilities = Capabilities(negative_prompt=True, ring=False, cfg_parallel=True)
    temporal_ratio = VAE_TEMPORAL  # frames per latent frame (the server lists 4k+1 frame counts)

    def __init__(self, components: dict, dit_config: dict, device, dtype: torch.dtype | None, vae_tiling: str = "auto"):
        if vae_tiling not in VAE_TILING_MODES:
            raise UserInputError(f"vae_tiling must be one of {', '.join(VAE_TILING_MODES)}, got {vae_tiling!r}")
        self.components = components
        self.dit_config = dit_config
        self.device = torch.device(device)
        self.dtype = dtype
        self.vae_tiling = vae_tiling

    # -- loading ---------------------------------------------------------------------------
    @classmethod
    def from_pretrained(cls, path, *, parts=ALL_PARTS, device="cpu", dtype=None, vae_tiling="auto",
                        text_encoder_path=None):
        root = Path(path)
        transformer_folder = find_transformer_folder(root)
        dit_config = read_json(transformer_folder / "config.json")
        components: dict = {}
        if "text" in parts:
            folder = cls.text_encoder_folder(root, text_encoder_path)
            components["tokenizer"], components["text_encoder"] = load_text_encoder(folder, dtype, device)
        if "dit" in parts:
            from .transformer import load_transformer

            components["transformer"] = load_transformer(transformer_folder, dtype, device)
        if "vae" in parts:
            from .wfvae import load_wfvae

            components["vae"] = load_wfvae(root / VAE_FOLDER, dtype, device, with_encoder=False)
        return cls(components, dit_config, device, dtype, vae_tiling)

    @staticmethod
    def text_encoder_folder(root: Path, text_encoder_path) -> Path:
        if text_encoder_path:
            return Path(text_encoder_path)
        if (root / TEXT_ENCODER_FOLDER / "config.json").is_file():
            return root / TEXT_ENCODER_FOLDER
        raise ModelPathError(f"no text encoder for {root}: pass --text-encoder-path DIR (an mT5 encoder and its "
                             f"tokenizer, laid out as google/mt5-xxl is published) or put it in "
                             f"{root / TEXT_ENCODER_FOLDER}")

    @classmethod
    def config_heads(cls, path) -> int:
        """Attention heads from the transformer config, without loading weights."""
        config = read_json(find_transformer_folder(Path(path)) / "config.json")
        try:
            return int(config["num_attention_heads"])
        except (KeyError, TypeError, ValueError) as error:
            raise ModelPathError(f"the transformer config under {path} has no num_attention_heads ({error})") from error

    # -- validation ------------------------------------------------------------------------
    @property
    def size_multiple(self) -> int:
        return VAE_SPATIAL * int(self.dit_config.get("patch_size", 2))

    def validate(self, shape: VideoShape, steps: int) -> None:
        # Multiples of 16 = VAE x8 times patch 2; the release was trained on multiples of 32.
        check_video_shape(shape, steps, size_multiple=self.size_multiple, frame_stride=VAE_TEMPORAL,
                          model="OpenSoraPlan")

    # -- prompt ----------------------------------------------------------------------------
    @torch.no_grad()
    def encode_prompt(self, prompt: str, negative_prompt: str | None = None,
                      guided: bool = True) -> dict[str, torch.Tensor]:
        """negative_prompt None: the official sample script's negative prompt (NEGATIVE_PROMPT); not
        encoded at all without guidance (`guided` False: guidance_scale <= 1), as the official
        pipeline."""
        if not prompt or not prompt.strip():
            raise InvalidRequestError("prompt must be a non-empty string")
        embeds, mask = encode_text(self.tokenizer, self.text_encoder, POSITIVE_TEMPLATE.format(prompt), self.device)
        cond = {"prompt_embeds": embeds, "prompt_attention_mask": mask}
        if guided:
            negative_text = NEGATIVE_PROMPT if negative_prompt is None else negative_prompt
            negative, negative_mask = encode_text(self.tokenizer, self.text_encoder, negative_text, self.device)
            cond.update(negative_prompt_embeds=negative, negative_prompt_attention_mask=negative_mask)
        return cond

    def prepare_condition(self, cond: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The DiT sees all 512 text tokens with their key mask, as the official model does."""
        return cond

    def text_length(self, cond: dict[str, torch.Tensor]) -> int:
        return cond["prompt_embeds"].shape[1]

    # -- guidance ----------------------------------------------------------------------------
    def cfg_branches(self, cond: dict[str, torch.Tensor]) -> list[dict[str, torch.Tensor]]:
        """[negative, positive] conditions, the official batch order; [positive] for a request
        encoded without guidance."""
        prefixes = ("negative_", "") if "negative_prompt_embeds" in cond else ("",)
        return [{"prompt_embeds": cond[f"{p}prompt_embeds"], "prompt_attention_mask": cond[f"{p}prompt_attention_mask"]}
                for p in prefixes]

    @torch.no_grad()
    def predict_branches(self, latents: torch.Tensor, timestep: torch.Tensor,
                         branches: list[dict[str, torch.Tensor]]) -> list[torch.Tensor]:
        """One batched forward over the branches; the model input is the same latents for each."""
        dtype = self.transformer.dtype
        count = len(branches)
        x = torch.cat([latents] * count).to(dtype)
        timesteps = timestep.reshape(1).to(latents.dtype).expand(x.shape[0])
        embeds = torch.cat([b["prompt_embeds"] for b in branches]).to(dtype)
        masks = torch.cat([b["prompt_attention_mask"] for b in branches])
        out = self.transformer(x, timesteps, embeds, encoder_attention_mask=masks)
        return list(out.float().chunk(count))

    # -- sequence parallelism --------------------------------------------------------------
    @property
    def num_heads(self) -> int:
        return int(self.dit_config["num_attention_heads"])

    def attention_shape(self, shape: VideoShape) -> AttentionShape:
        """The self-attention call (text is attended in separate cross-attention: text_len 0)."""
        _, _, frames, height, width = self.latent_shape(shape)
        patch = int(self.dit_config.get("patch_size", 2))
        return AttentionShape(seq_len=frames * (height // patch) * (width // patch), text_len=0,
                              heads=self.num_heads, head_dim=int(self.dit_config["attention_head_dim"]))

    def enable_sequence_parallel(self, ctx, strategy) -> int:
        from .parallel import enable_sequence_parallel

        return enable_sequence_parallel(self.transformer, ctx, strategy)

    def cache_blocks(self):
        """The transformer's blocks as the step cache sees them (pipedit.cache)."""
        from .cache_blocks import cache_blocks

        return cache_blocks(self.transformer)

    # -- denoising -------------------------------------------------------------------------
    def latent_shape(self, shape: VideoShape) -> tuple[int, ...]:
        frames = (shape.num_frames - 1) // VAE_TEMPORAL + 1
        channels = int(self.dit_config.get("in_channels", 8))
        return (1, channels, frames, shape.height // VAE_SPATIAL, shape.width // VAE_SPATIAL)

    def prepare_latents(self, shape: VideoShape, generator: torch.Generator) -> torch.Tensor:
        return initial_noise(self.latent_shape(shape), generator, self.device)

    def make_scheduler(self, sampling: SamplingParams):
        scheduler = make_scheduler(sampling, self.device)
        return scheduler, scheduler.timesteps

    # -- decoding --------------------------------------------------------------------------
    @torch.no_grad()
    def decode(self, latents: torch.Tensor) -> torch.Tensor:
        """Latents -> frames [B, F, H, W, 3] in [0, 1], on the uint8 grid the official pipeline
        truncates to ((clamp(v/2 + 0.5, 0, 1) * 255).to(uint8)): writers that round keep it.
        vae_tiling on: the causal temporal tiling (needs >= 3 latent frames); auto or off: untiled."""
        latents = latents.to(self.device)
        return self.frames(self.vae.decode(latents, tiled=bool(self.decode_mode(latents.shape))))

    @staticmethod
    def frames(video: torch.Tensor) -> torch.Tensor:
        """The VAE's video [B, 3, F, H, W] -> frames [B, F, H, W, 3] on the official uint8 grid."""
        frames = (video.float() / 2 + 0.5).clamp(0, 1)
        frames = torch.floor(frames * 255) / 255
        return frames.permute(0, 2, 3, 4, 1)

    def decode_mode(self, latent_shape) -> int:
        """1: the causal temporal tiling (vae_tiling on, >= 3 latent frames), 0: untiled."""
        return int(self.vae_tiling == "on" and latent_shape[2] >= 3)

    # -- one video's decode over several ranks (pipedit.runtime.split_decode) --------------
    def split_plan(self, latents: torch.Tensor, mode: int, parts: int):
        """Row bands, one per part (none for a groupnorm VAE: one band)."""
        from .split_decode import BandPlan

        return BandPlan(self.vae, latents.to(self.device), bool(mode), parts)

    def split_units(self, latent_shape, parts: int) -> int:
        from .split_decode import band_bounds, splittable

        return len(band_bounds(latent_shape[3], parts)) if splittable(self.vae.config) else 1
