"""Wan's released configs (no weights) in the diffusers layout the wan adapter reads: Wan-AI's
Wan2.1-T2V-1.3B/14B-Diffusers, Wan2.2-T2V-A14B-Diffusers (`transformer_2`, boundary_ratio) and
Wan2.2-TI2V-5B-Diffusers (expand_timesteps). The dims are pipedit.integrations.wan.release's, so the dry run
and the planner describe the same models (a test compares parameter counts).

Not the release's: the VAE's latents_mean / latents_std (zeros and ones of the right length; they
scale the latents, memory does not depend on them) and the scheduler's flow_shift (the UniPC
flow-prediction form of the releases with flow_shift 3.0: it moves the timesteps, not memory, and
the A14B boundary step with them).
"""

from __future__ import annotations

from pathlib import Path

from pipedit.dryrun.released import write_config

from . import release as wan

_UNIPC = {"_class_name": "UniPCMultistepScheduler", "num_train_timesteps": 1000, "prediction_type": "flow_prediction",
          "use_flow_sigmas": True, "flow_shift": 3.0, "solver_order": 2, "solver_type": "bh2", "predict_x0": True,
          "lower_order_final": True, "final_sigmas_type": "zero", "timestep_spacing": "linspace"}


def _index(release: str) -> dict:
    index = {
        "_class_name": "WanPipeline", "scheduler": ["diffusers", "UniPCMultistepScheduler"],
        "text_encoder": ["transformers", "UMT5EncoderModel"], "tokenizer": ["transformers", "T5TokenizerFast"],
        "transformer": ["diffusers", "WanTransformer3DModel"], "transformer_2": [None, None],
        "vae": ["diffusers", "AutoencoderKLWan"], "boundary_ratio": None, "expand_timesteps": False,
    }
    if wan.EXPERTS.get(release, 1) > 1:
        index.update(transformer_2=["diffusers", "WanTransformer3DModel"], boundary_ratio=wan.BOUNDARY_RATIO[release])
    if release in wan.EXPAND_TIMESTEPS:
        index["expand_timesteps"] = True
    return index


def write_release(release: str, root: Path) -> Path:
    """`release` is one of release.RELEASES."""
    index = _index(release)
    write_config(root, "model_index.json", index)
    for name in ("transformer", "transformer_2"):
        if index[name][0] is not None:
            write_config(root / name, "config.json", wan.TRANSFORMERS[release])
    vae = wan.VAES[release]
    stats = {"latents_mean": [0.0] * vae["z_dim"], "latents_std": [1.0] * vae["z_dim"]}
    write_config(root / "vae", "config.json", {**vae, **stats})
    write_config(root / "text_encoder", "config.json", wan.UMT5_XXL)
    write_config(root / "tokenizer", "tokenizer_config.json", {"model_max_length": wan.TEXT_TOKENS})
    write_config(root / "scheduler", "scheduler_config.json", _UNIPC)
    return root
