"""Wan under the dry run's fake tensors. Its text encoding reads the valid length from the mask (a
value): `fake_umt5_encode` stands in for it, with every token valid (its result then has the same
shape and holds the same storages, less the zero-padding copy). Its image preprocessing reads
pixels: `fake_first_frame_video` gives its result's shape."""

from __future__ import annotations

import torch


def fake_umt5_encode(tokenizer, text_encoder, prompt, device, max_tokens=512):
    tokens = tokenizer([prompt], max_length=max_tokens)
    states = text_encoder(tokens.input_ids, tokens.attention_mask).last_hidden_state
    return states.to(device=device, dtype=text_encoder.dtype)


def fake_first_frame_video(image, shape, spatial_ratio, frames):
    """Wan's image condition before the VAE: the resized image's pixels, then zero frames. The
    preprocessing reads pixel values (host data); only the shape and dtype matter here."""
    return torch.empty(1, 3, frames, shape.height, shape.width, dtype=torch.float32)
