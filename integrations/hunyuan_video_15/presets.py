"""The tiny demo HunyuanVideo 1.5 checkpoints `pipedit demo-checkpoint --model hunyuan-video-1.5
--preset NAME` writes (names only: importing this costs nothing, the CLI's parser lists them)."""

from __future__ import annotations

PRESETS: dict[str, str] = {
    "t2v": "HunyuanVideo 1.5 text-to-video (HunyuanVideo15Pipeline)",
    "i2v": "HunyuanVideo 1.5 image-to-video (HunyuanVideo15ImageToVideoPipeline, a SigLIP image encoder)",
}
DEFAULT_PRESET = "t2v"


def check_preset(preset: str) -> None:
    if preset not in PRESETS:
        from pipedit.errors import UserInputError

        raise UserInputError(f"unknown hunyuan-video-1.5 preset {preset!r}; choose one of: {', '.join(PRESETS)}")


def described() -> tuple[str, dict[str, str]]:
    """(the default preset, {preset: one-line description}), for `demo-checkpoint --help`."""
    return DEFAULT_PRESET, dict(PRESETS)
