"""LTX-2 under the dry run's fake tensors.

`fake_gemma_encode` stands in for the adapter's `encode_text`: the prompt encoding as LTX2Pipeline
computes it (Gemma 3's every hidden state, stacked and flattened, then the connectors), with every
one of the 1024 tokens valid, so the results have the shapes and the storages of the real encode
without reading the mask's values."""

from __future__ import annotations

import torch

TEXT_TOKENS = 1024  # LTX2Pipeline's max_sequence_length


def fake_gemma_encode(tokenizer, text_encoder, connectors, prompt: str, device, max_sequence_length: int = TEXT_TOKENS):
    """(video prompt embeds [1, L, Dv], audio prompt embeds [1, L, Da], attention mask [1, L] int64) at
    L = max_sequence_length, in the text encoder's dtype on `device`: Dv = Da = the connectors'
    caption_channels (LTX-2), or their video_hidden_dim and audio_hidden_dim (LTX-2.3, per-modality
    projections). The mask is what the connectors return (all ones: registers fill the padding)."""
    tokens = tokenizer([prompt], max_length=max_sequence_length)
    states = text_encoder(input_ids=tokens.input_ids, attention_mask=tokens.attention_mask,
                          output_hidden_states=True).hidden_states
    stacked = torch.stack(states, dim=-1).flatten(2, 3).to(dtype=text_encoder.dtype)
    video, audio, mask = connectors(stacked, tokens.attention_mask, padding_side="left")
    return video.to(device), audio.to(device), mask.to(device)
