"""HunyuanVideo 1.5's released configs (no weights) in the diffusers layout the adapter reads
(hunyuanvideo-community's HunyuanVideo-1.5 *-Diffusers layout); the dims are
.planner's, so the dry run and the planner describe the same models.
Not the release's: the scheduler's shift (it moves timesteps, not memory)."""

from __future__ import annotations

from pathlib import Path

from pipedit.dryrun.released import write_config

from . import planner as release

_SCHEDULER = {"_class_name": "FlowMatchEulerDiscreteScheduler", "num_train_timesteps": 1000, "shift": 5.0,
              "use_dynamic_shifting": False}
_GUIDER = {"_class_name": "ClassifierFreeGuidance", "guidance_scale": 6.0, "guidance_rescale": 0.0,
           "use_original_formulation": False, "start": 0.0, "stop": 1.0, "enabled": True}


def write_release(name: str, root: Path) -> Path:
    """`name` is one of planner.RELEASES."""
    image = release.RELEASES[name][1] == "i2v"
    index = {"_class_name": "HunyuanVideo15ImageToVideoPipeline" if image else "HunyuanVideo15Pipeline",
             "scheduler": ["diffusers", "FlowMatchEulerDiscreteScheduler"],
             "guider": ["diffusers", "ClassifierFreeGuidance"],
             "text_encoder": ["transformers", "Qwen2_5_VLTextModel"], "tokenizer": ["transformers", "Qwen2Tokenizer"],
             "text_encoder_2": ["transformers", "T5EncoderModel"], "tokenizer_2": ["transformers", "ByT5Tokenizer"],
             "transformer": ["diffusers", "HunyuanVideo15Transformer3DModel"],
             "vae": ["diffusers", "AutoencoderKLHunyuanVideo15"]}
    if image:
        index.update(image_encoder=["transformers", "SiglipVisionModel"],
                     feature_extractor=["transformers", "SiglipImageProcessor"])
        write_config(root / "image_encoder", "config.json", release.SIGLIP)
        write_config(root / "feature_extractor", "preprocessor_config.json",
               {"image_processor_type": "SiglipImageProcessor", "size": {"height": 384, "width": 384}})
    write_config(root, "model_index.json", index)
    write_config(root / "transformer", "config.json", release.transformer_config(name))
    write_config(root / "vae", "config.json", release.VAE)
    write_config(root / "text_encoder", "config.json", release.QWEN_TEXT)
    write_config(root / "text_encoder_2", "config.json", release.BYT5_ENCODER)
    for tokenizer in ("tokenizer", "tokenizer_2"):
        write_config(root / tokenizer, "tokenizer_config.json", {})
    write_config(root / "scheduler", "scheduler_config.json", _SCHEDULER)
    write_config(root / "guider", "guider_config.json", _GUIDER)
    return root
