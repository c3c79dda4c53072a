"""What a diffusers-layout Wan checkpoint holds, read from model_index.json and the transformer's
config without loading weights, and which of its components each role loads.

Supported (diffusers 0.42.1's definitions):
- WanPipeline: Wan2.1 text-to-video (one transformer), Wan2.2 A14B text-to-video (transformer for
  high noise, transformer_2 for low noise, switched at boundary_ratio);
- WanImageToVideoPipeline: Wan2.1 I2V (a CLIP vision image encoder; the transformer has image_dim)
  and Wan2.2 I2V A14B (no image encoder, two experts);
- expand_timesteps (Wan2.2 TI2V-5B, a 48-channel VAE): per-token timesteps; with an image, its
  latents replace the first latent frame (WanImageToVideoPipeline's form), without one it is text-
  to-video (WanPipeline's). A WanPipeline TI2V checkpoint takes an image optionally.
Not supported: a pipeline without `transformer`; last_image (first-last-frame), VACE, Animate.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipedit.errors import ModelPathError

PIPELINES = ("WanPipeline", "WanImageToVideoPipeline")
SUPPORTED = ("Wan2.1 T2V, Wan2.2 A14B T2V and TI2V-5B (WanPipeline), Wan2.1 I2V, Wan2.2 I2V A14B and "
             "TI2V-5B (WanImageToVideoPipeline)")
TEXT_PARTS = ("tokenizer", "text_encoder")
IMAGE_PARTS = ("image_processor", "image_encoder")


def _present(index: dict, name: str) -> bool:
    entry = index.get(name)
    return isinstance(entry, list) and len(entry) == 2 and entry[0] is not None


@dataclass(frozen=True)
class WanLayout:
    image_to_video: bool  # WanImageToVideoPipeline: latents get the first-frame condition channels
    image_embeds: bool  # Wan2.1 I2V: the transformer cross-attends to the CLIP image embedding
    boundary_ratio: float | None  # two experts: transformer while t >= boundary_ratio * num_train_timesteps
    expand_timesteps: bool = False  # Wan2.2 TI2V-5B: per-token timesteps, the image as first latent frame

    @property
    def takes_image(self) -> bool:
        return self.image_to_video or self.expand_timesteps

    @property
    def needs_image(self) -> bool:
        """As diffusers: WanImageToVideoPipeline requires its image."""
        return self.image_to_video

    @property
    def two_experts(self) -> bool:
        return self.boundary_ratio is not None

    @property
    def variant(self) -> str:
        if self.expand_timesteps:
            return "Wan2.2 TI2V-5B"
        kind = "I2V" if self.image_to_video else "T2V"
        return f"Wan2.2 {kind} A14B" if self.two_experts else f"Wan2.1 {kind}"

    @classmethod
    def read(cls, path, index: dict, transformer_config: dict) -> WanLayout:
        name = index.get("_class_name")
        if name not in PIPELINES:
            raise ModelPathError(f"{path} holds a {name}; the wan adapter loads {SUPPORTED}")
        if not _present(index, "transformer"):
            raise ModelPathError(f"{path} has no transformer (model_index.json); supported: {SUPPORTED}")
        image_to_video = name == "WanImageToVideoPipeline"
        # As WanImageToVideoPipeline: the image embedding exists only for a transformer with image_dim.
        expand = bool(index.get("expand_timesteps"))
        image_embeds = image_to_video and transformer_config.get("image_dim") is not None
        if image_embeds and not all(_present(index, part) for part in IMAGE_PARTS):
            raise ModelPathError(f"{path}: the transformer takes a CLIP image embedding (image_dim) but "
                                 f"model_index.json lacks image_encoder or image_processor")
        ratio = index.get("boundary_ratio")
        # As diffusers: without boundary_ratio, transformer_2 is never used (so it is not loaded).
        if ratio is not None and not _present(index, "transformer_2"):
            raise ModelPathError(f"{path} sets boundary_ratio {ratio} but has no transformer_2")
        if ratio is not None and not 0 <= float(ratio) <= 1:
            raise ModelPathError(f"{path}: boundary_ratio must lie in [0, 1], got {ratio}")
        return cls(image_to_video, image_embeds, None if ratio is None else float(ratio), expand)

    def components_for(self, parts) -> list[str]:
        """The components a role loads: text (and, for I2V, the image encoder and the VAE that
        encodes the first frame), dit (every expert), vae (decoding)."""
        wanted = ["scheduler"]
        if "text" in parts:
            wanted += TEXT_PARTS
            if self.image_embeds:
                wanted += IMAGE_PARTS
            if self.takes_image:
                wanted.append("vae")
        if "dit" in parts:
            wanted += ["transformer", "transformer_2"] if self.two_experts else ["transformer"]
        if "vae" in parts and "vae" not in wanted:
            wanted.append("vae")
        return wanted
