"""The tiny demo Wan checkpoints `pipedit demo-checkpoint --model wan --preset NAME` writes (names
only: importing this costs nothing, the CLI's parser lists them)."""

from __future__ import annotations

from typing import NamedTuple


class Preset(NamedTuple):
    boundary_ratio: float | None  # None: one transformer
    image_to_video: bool  # WanImageToVideoPipeline
    ti2v: bool  # Wan2.2 TI2V-5B: expand_timesteps, a 48-channel VAE (16x spatial)
    about: str


PRESETS: dict[str, Preset] = {
    "t2v": Preset(None, False, False, "Wan2.1 text-to-video (WanPipeline)"),
    "a14b": Preset(0.875, False, False, "Wan2.2 A14B text-to-video: two experts switched at boundary_ratio 0.875"),
    "i2v": Preset(None, True, False, "Wan2.1 image-to-video (WanImageToVideoPipeline with a CLIP image encoder)"),
    "i2v-a14b": Preset(0.9, True, False, "Wan2.2 I2V A14B: two experts, no image encoder"),
    "ti2v": Preset(None, False, True, "Wan2.2 TI2V-5B (WanPipeline, expand_timesteps, 48-channel VAE): text, "
                                      "or an image as first frame"),
}
DEFAULT_PRESET = "t2v"


def check_preset(preset: str) -> None:
    if preset not in PRESETS:
        from pipedit.errors import UserInputError

        raise UserInputError(f"unknown wan preset {preset!r}; choose one of: {', '.join(PRESETS)}")


def described() -> tuple[str, dict[str, str]]:
    """(the default preset, {preset: one-line description}), for `demo-checkpoint --help`."""
    return DEFAULT_PRESET, {name: preset.about for name, preset in PRESETS.items()}
