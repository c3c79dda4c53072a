"""The transformer passes of one LTX-2 step, with the arguments LTX2Pipeline gives each pass.

A branch's `kind` (guidance.BRANCHES) picks its pass: negative and positive run plain, together
as one batch when both are asked (the pipeline's CFG batch); stg perturbs the STG blocks'
self-attention; isolated turns the audio-video cross-attention off. Image-to-
video gives the first latent frame's tokens timestep 0 (they hold the image's latents); the sound's
timestep and the sigma stay the step's.
"""

from __future__ import annotations

import torch

from .guidance import stg_blocks

USE_CROSS_TIMESTEP = True  # LTX2Pipeline's default (the cross-modality sigma in the a2v/v2a modulation)


def _groups(branches: list[dict]) -> list[list[int]]:
    """Indices of the passes: a negative branch followed by its positive one share a batch."""
    groups, i = [], 0
    while i < len(branches):
        if branches[i]["kind"] == "negative" and i + 1 < len(branches) and branches[i + 1]["kind"] == "positive":
            groups.append([i, i + 1])
            i += 2
        else:
            groups.append([i])
            i += 1
    return groups


def _first_frame_mask(grid, device) -> torch.Tensor:
    """[1, S] float32: 1 on the first latent frame's tokens (packed order: frame-major)."""
    per_frame = grid.video_tokens // (grid.frames // grid.patch_t)
    mask = torch.zeros(1, grid.video_tokens, device=device)
    mask[:, :per_frame] = 1.0
    return mask


def run_branches(adapter, latents: torch.Tensor, timestep: torch.Tensor, branches: list[dict]) -> list[torch.Tensor]:
    transformer = adapter.transformer
    grid, fps = adapter.grid_of(branches[0])
    video, audio = grid.tokens(adapter.model_latents(latents, branches[0]))
    dtype = branches[0]["prompt_embeds"].dtype  # the pipeline casts its inputs to the prompt's dtype
    image = "image_latents" in branches[0]
    preds: list[torch.Tensor | None] = [None] * len(branches)
    for group in _groups(branches):
        count = len(group)
        chosen = [branches[i] for i in group]
        kind = chosen[0]["kind"]
        step = timestep.reshape(1).to(torch.float32).expand(count)
        video_step = step.unsqueeze(-1) * (1 - _first_frame_mask(grid, video.device)) if image else step
        mask = torch.cat([b["prompt_mask"] for b in chosen])
        out_video, out_audio = transformer(
            hidden_states=video.expand(count, -1, -1).to(dtype), audio_hidden_states=audio.expand(count, -1, -1).to(dtype),
            encoder_hidden_states=torch.cat([b["prompt_embeds"] for b in chosen]),
            audio_encoder_hidden_states=torch.cat([b["audio_prompt_embeds"] for b in chosen]),
            timestep=video_step, audio_timestep=step, sigma=step,
            encoder_attention_mask=mask, audio_encoder_attention_mask=mask,
            num_frames=grid.frames, height=grid.height, width=grid.width, fps=float(fps),
            audio_num_frames=grid.audio_frames,
            isolate_modalities=kind == "isolated",
            spatio_temporal_guidance_blocks=list(stg_blocks(len(transformer.transformer_blocks))) if kind == "stg" else None,
            use_cross_timestep=USE_CROSS_TIMESTEP, return_dict=False)
        for row, index in enumerate(group):
            preds[index] = grid.from_tokens(out_video[row:row + 1].float(), out_audio[row:row + 1].float())
    return preds
