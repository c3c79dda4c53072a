"""The tiny demo LTX-2 checkpoints `pipedit demo-checkpoint --model ltx-2 --preset NAME` writes (names
only: importing this costs nothing, the CLI's parser lists them)."""

from __future__ import annotations

from typing import NamedTuple


class Preset(NamedTuple):
    version: str  # "2.0" (LTX-2) or "2.3" (LTX-2.3): the component configs diffusers' releases switch between
    image_to_video: bool  # LTX2ImageToVideoPipeline
    distilled: bool  # the distilled release's scheduler: no dynamic shift, no terminal shift
    about: str


PRESETS: dict[str, Preset] = {
    "t2v": Preset("2.0", False, False, "LTX-2 text-to-video with sound (LTX2Pipeline)"),
    "i2v": Preset("2.0", True, False, "LTX-2 image-to-video with sound (LTX2ImageToVideoPipeline)"),
    "t2v-2.3": Preset("2.3", False, False, "LTX-2.3 text-to-video: gated attention, prompt modulation, "
                                           "per-modality text projections, a vocoder with bandwidth extension"),
    "i2v-2.3": Preset("2.3", True, False, "LTX-2.3 image-to-video (LTX2ImageToVideoPipeline)"),
    "t2v-distilled": Preset("2.0", False, True, "LTX-2 distilled text-to-video: the few-step scheduler "
                                                "(no dynamic shift)"),
}
DEFAULT_PRESET = "t2v"


def check_preset(preset: str) -> None:
    if preset not in PRESETS:
        from pipedit.errors import UserInputError

        raise UserInputError(f"unknown ltx-2 preset {preset!r}; choose one of: {', '.join(PRESETS)}")


def described() -> tuple[str, dict[str, str]]:
    """(the default preset, {preset: one-line description}), for `demo-checkpoint --help`."""
    return DEFAULT_PRESET, {name: preset.about for name, preset in PRESETS.items()}
