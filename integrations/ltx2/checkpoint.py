"""What a diffusers-layout LTX-2 checkpoint holds, read from model_index.json and the component
configs without loading weights, and which components each role loads.

Served (diffusers 0.42.1's definitions): LTX2Pipeline (text-to-video, and image-to-video when a
request brings an image: the same weights) and LTX2ImageToVideoPipeline (image-to-video only), for
LTX-2 and LTX-2.3 (the transformer's and connectors' configs switch between them; the code follows
the configs). Not served: the stages LTX-2's other pipelines add (family.py's `refuses` names
them) and the prompt enhancer (opt-in in the pipelines too: pipedit encodes the prompt as given).
"""

from __future__ import annotations

from dataclasses import dataclass

from pipedit.errors import ModelPathError

PIPELINES = ("LTX2Pipeline", "LTX2ImageToVideoPipeline")
SERVED = ("LTX-2 and LTX-2.3 text-to-video and image-to-video (LTX2Pipeline, LTX2ImageToVideoPipeline: the "
          "video with its sound, in one or a few steps)")
TEXT_PARTS = ("tokenizer", "text_encoder", "connectors")
SOUND_PARTS = ("audio_vae", "vocoder")


@dataclass(frozen=True)
class LTX2Layout:
    needs_image: bool  # LTX2ImageToVideoPipeline: every request brings its first frame

    @classmethod
    def read(cls, path, index: dict) -> LTX2Layout:
        name = index.get("_class_name")
        if name not in PIPELINES:
            raise ModelPathError(f"{path} holds a {name}; the ltx-2 adapter serves {SERVED}")
        missing = [part for part in ("transformer", "vae", *SOUND_PARTS, *TEXT_PARTS) if part not in index]
        if missing:
            raise ModelPathError(f"{path}: model_index.json lacks {', '.join(missing)}; {SERVED} need them all")
        return cls(needs_image=name == "LTX2ImageToVideoPipeline")

    @staticmethod
    def components_for(parts) -> list[str]:
        """text: the Gemma encoder, its tokenizer and the connectors, and the video VAE that encodes a
        request's image; dit: the transformer; vae: both VAEs and the vocoder."""
        wanted = ["scheduler"]
        if "text" in parts:
            wanted += [*TEXT_PARTS, "vae"]
        if "dit" in parts:
            wanted.append("transformer")
        if "vae" in parts:
            wanted += [name for name in ("vae", *SOUND_PARTS) if name not in wanted]
        return wanted
