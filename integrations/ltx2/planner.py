"""The planner's view of LTX-2 (pipedit.planner): specs of the releases (.release's configs,
parameter counts from the modules built on the meta device), the spec of a checkpoint, and the
decode's cost: the video VAE, then the audio VAE and the vocoder.

- The DiT: 48 blocks whose video tokens (32 x 128, patch 1) cross-attend to 1024 text tokens, with
  the audio stream beside them (ModelSpec.side_stream: 32 x 64 heads, 25 tokens a second of video
  at the pipeline's 24 fps, kept whole on every rank), and attention both ways between the streams
  at the audio's width.
- Guidance: diffusers' LTX2Pipeline defaults (CFG, spatio-temporal guidance and the modality-isolation
  pass) run four transformer passes a step; cfg_batch counts them (memory: the four together, an
  upper bound: diffusers batches CFG's two and runs the others one at a time). The distilled
  release runs one pass (guidance 1).
- Text: Gemma 3 12B and the connectors (the connectors turn its 49 hidden states into the DiT's
  prompt tokens), both placed where the family's text encoders go (text_beside_vae: a decode rank
  when there is one).
- Decode: untiled (LTX2Pipeline's default), the video VAE then the audio VAE and the vocoder; the
  peak is the larger of the two, which do not overlap on one rank. FLOPs and the largest activation
  come from the decoders run on the meta device at the request's size (no memory, no arithmetic);
  the peak is DECODE_ACTIVATIONS x the largest activation (the decode's tensors on fake tensors
  peak at 5.3x it for the 2.0 VAE and 4.5x for the 2.3 VAE at 768x512x121; not measured on a GPU).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from pipedit.planner.cost import ACT_BYTES, Shape
from pipedit.planner.models import ModelSpec, SideStream, TextEncoder, param_count, read_config

from . import release

DECODE_ACTIVATIONS = 6.0  # live activations at a decode's peak, in units of its largest one
AUDIO_COMPRESSION = 4  # AutoencoderKLLTX2Audio's temporal and mel compression (a constant of the class)


def _audio_tokens_per_frame(dit: dict, audio_vae: dict) -> float:
    """Audio tokens per video frame: latents a second (16 kHz mel, hop 160, 4x: 25) over the fps."""
    rate = int(audio_vae.get("sample_rate", 16000)) / int(audio_vae.get("mel_hop_length", 160)) / AUDIO_COMPRESSION
    return rate / int(dit.get("audio_patch_size_t", 1)) / release.FRAME_RATE


def _vae(components: dict) -> dict:
    """The video VAE's config, with the audio VAE's and the vocoder's under "_audio_vae" and
    "_vocoder" (the decode's cost walks all three)."""
    config = components["vae"]
    return {**config, "temporal_compression_ratio": int(config.get("temporal_compression_ratio", 8)),
            "spatial_compression_ratio": int(config.get("spatial_compression_ratio", 32)),
            "_audio_vae": components["audio_vae"], "_vocoder": components["vocoder"]}


def spec(name: str, components: dict, distilled: bool, counts: dict | None = None) -> ModelSpec:
    """An LTX-2 spec from its component configs ({"transformer": ..., "vae": ..., "audio_vae": ...,
    "vocoder": ..., "connectors": ...}, diffusers' config.json keys); `counts`: parameter counts
    read from a checkpoint's files by folder, else counted from the configs."""
    counts = counts or {}
    dit, audio_vae = components["transformer"], components["audio_vae"]
    heads, head_dim = int(dit["num_attention_heads"]), int(dit["attention_head_dim"])
    audio_width = int(dit["audio_num_attention_heads"]) * int(dit["audio_attention_head_dim"])

    def count(folder: str) -> float:
        return counts.get(folder) or release.params(components[folder])

    encoders = (TextEncoder("gemma-3-12b", counts.get("text_encoder") or release.gemma_params(), release.TEXT_TOKENS),
                TextEncoder("ltx2-text-connectors", count("connectors"), release.TEXT_TOKENS))
    return ModelSpec(
        name=name, family="ltx-2", hidden=heads * head_dim, heads=heads, head_dim=head_dim, dual_layers=0,
        single_layers=int(dit["num_layers"]), mlp_ratio=4.0, text_tokens=release.TEXT_TOKENS, cross_attention=True,
        cfg_batch=1 if distilled else 4, dit_params=count("transformer"),
        patch=(int(dit.get("patch_size_t", 1)), int(dit.get("patch_size", 1)), int(dit.get("patch_size", 1))),
        latent_channels=int(components["vae"].get("latent_channels", 128)), vae=_vae(components),
        vae_params=count("vae") + count("audio_vae") + count("vocoder"), text_encoders=encoders,
        vae_tiling=False, text_beside_vae=True,
        side_stream=SideStream(hidden=audio_width, mlp_ratio=4.0,
                               tokens_per_frame=_audio_tokens_per_frame(dit, audio_vae), exchange_width=audio_width),
    )


def released(name: str) -> ModelSpec:
    return spec(release.LABELS[name], release.COMPONENTS[name], name in release.DISTILLED)


SIZES = {name: (lambda name=name: released(name)) for name in release.RELEASES}


def from_checkpoint(root: Path) -> ModelSpec:
    """The checkpoint's configs (transformer/, connectors/, vae/, audio_vae/, vocoder/) and parameter
    counts (safetensors headers; the released dims' counts where a folder has no weights). Distilled
    when its scheduler has the dynamic shift off (the distilled releases' scheduler)."""
    components = {folder: read_config(root / folder / "config.json")
                  for folder in ("transformer", "connectors", "vae", "audio_vae", "vocoder")}
    scheduler = root / "scheduler" / "scheduler_config.json"
    distilled = scheduler.is_file() and not read_config(scheduler).get("use_dynamic_shifting", True)
    counts = {folder: param_count(root / folder) for folder in (*components, "text_encoder")}
    dit = components["transformer"]
    name = f"{root.name} (LTX-2, {dit['num_attention_heads']}x{dit['attention_head_dim']})"
    return spec(name, components, distilled, {k: v for k, v in counts.items() if v is not None})


# -- the decode ----------------------------------------------------------------------------------


def _items(config: dict) -> tuple:
    return tuple(sorted((k, repr(v)) for k, v in config.items() if not k.startswith("_") or k == "_class_name"))


@lru_cache(maxsize=64)
def _decode_trace(kind: str, items: tuple, shape: tuple) -> tuple[float, int]:
    """(FLOPs, largest module output in elements) of one decode on the meta device (`items`: the
    config as sorted (key, repr(value)) pairs, hashable for the cache)."""
    import ast

    import torch
    from torch.utils.flop_counter import FlopCounterMode

    config = {key: ast.literal_eval(value) for key, value in items}
    module_class = release.component_class(config.pop("_class_name"))
    largest = [0]

    def record(module, inputs, output):
        if isinstance(output, torch.Tensor):
            largest[0] = max(largest[0], output.numel())

    with torch.device("meta"):
        module = module_class.from_config(config)  # float32: the counts do not depend on the dtype
        hooks = [m.register_forward_hook(record) for m in module.modules()]
        with FlopCounterMode(display=False) as counter, torch.no_grad():
            x = torch.empty(shape)
            if kind == "vocoder":
                module(x)
            else:
                module.decode(x, return_dict=False)
        for hook in hooks:
            hook.remove()
    return float(counter.get_total_flops()), largest[0]


def _audio_traces(model: ModelSpec, frames: int) -> list[tuple[float, int]]:
    audio_vae, vocoder = model.vae.get("_audio_vae"), model.vae.get("_vocoder")
    if audio_vae is None or model.side_stream is None:
        return []
    length = model.side_stream.tokens(frames)
    mel_bins = int(audio_vae.get("mel_bins", 64)) // AUDIO_COMPRESSION
    latents = (1, int(audio_vae.get("latent_channels", 8)), length, mel_bins)
    traces = [_decode_trace("audio_vae", _items(audio_vae), latents)]
    if vocoder is not None:  # the decoded mel spectrogram (channels, 4 (length - 1) + 1 frames, mel bins)
        frames_out = AUDIO_COMPRESSION * (length - 1) + 1
        mel = (1, int(audio_vae.get("output_channels", 2)), frames_out, int(audio_vae.get("mel_bins", 64)))
        traces.append(_decode_trace("vocoder", _items(vocoder), mel))
    return traces


def _video_trace(model: ModelSpec, height: int, width: int, frames: int) -> tuple[float, int]:
    video = {k: v for k, v in model.vae.items() if not k.startswith("_") or k == "_class_name"}
    latents = (1, model.latent_channels, *model.latent_shape(height, width, frames))
    return _decode_trace("vae", _items(video), latents)


def vae_flops(model: ModelSpec, height: int, width: int, frames: int, tiled: bool) -> float:
    """The video VAE's decode, then the audio VAE's and the vocoder's (untiled only)."""
    traces = [_video_trace(model, height, width, frames), *_audio_traces(model, frames)]
    return sum(flops for flops, _ in traces)


def decode_peak_bytes(model: ModelSpec, shape: Shape, tiled: bool) -> float:
    """The larger of the video and the audio decode's peaks (one after the other on a rank), bf16."""
    traces = [_video_trace(model, shape.height, shape.width, shape.frames), *_audio_traces(model, shape.frames)]
    return DECODE_ACTIVATIONS * max(largest for _, largest in traces) * ACT_BYTES
