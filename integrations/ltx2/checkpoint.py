"""What a diffusers-layout LTX-2 checkpoint holds, read from model_index.json and the component
configs without loading weights, and which components each role loads.

Served (diffusers 0.42.1's definitions): LTX2Pipeline (text-to-video, and image-to-video when a
request brings an image: the same weights) and LTX2ImageToVideoPipeline (image-to-video only), for
LTX-2 and LTX-2.3 (the transformer's and connectors' configs switch between them; the code follows
the configs). Not served: the stages LTX-2's other pipelines add (latent upsampler, IC-LoRA,
keyframe/condition, DFR, HDR, diffusion decode) and the prompt enhancer.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipedit.errors import ModelPathError

PIPELINES = ("LTX2Pipeline", "LTX2ImageToVideoPipeline")
SERVED = ("LTX-2 and LTX-2.3 text-to-video and image-to-video (LTX2Pipeline, LTX2ImageToVideoPipeline: the "
          "video with its sound, in one or a few steps)")
# The other LTX-2 pipelines of diffusers, by the stage they add: what a refusal names.
REFUSED = {
    "LTX2LatentUpsamplePipeline": "the latent upsampler (a second, upscaling stage)",
    "LTX2InContextPipeline": "IC-LoRA (in-context reference conditioning)",
    "LTX2ConditionPipeline": "keyframe and video conditioning",
    "LTX2DFRPipeline": "DFR (the dynamic frame-rate stages)",
    "LTX2DFRTemporalRefinePipeline": "DFR temporal refinement",
    "LTX2HDRPipeline": "the HDR LoRA stage",
    "LTX2VideoDiffusionDecodePipeline": "the diffusion decoder",
}
TEXT_PARTS = ("tokenizer", "text_encoder", "connectors")
SOUND_PARTS = ("audio_vae", "vocoder")


def refusal(pipeline: str | None, path) -> str:
    stage = REFUSED.get(pipeline or "")
    what = f"{pipeline}: {stage}, which pipedit does not run" if stage else f"a {pipeline}"
    return f"{path} holds {what}; the ltx-2 adapter serves {SERVED}"


@dataclass(frozen=True)
class LTX2Layout:
    needs_image: bool  # LTX2ImageToVideoPipeline: every request brings its first frame

    @classmethod
    def read(cls, path, index: dict) -> LTX2Layout:
        name = index.get("_class_name")
        if name not in PIPELINES:
            raise ModelPathError(refusal(name, path))
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
