"""LTX-2's prompt embedding, as LTX2Pipeline builds it (diffusers 0.42.1).

The prompt is tokenized with left padding to `max_length` tokens; every hidden state of the Gemma 3
encoder (the embeddings' and each layer's) is kept, stacked per token as [T, D * (layers + 1)];
the connectors normalise them per layer (LTX-2.0: a masked mean/range over the real tokens; 2.3:
an RMS norm per token), project them for the video and the audio stream and run each stream's
connector transformer, whose learnt registers take the padding's place. Out come the video and the
audio text embeddings and the mask of the tokens the DiT attends to.
"""

from __future__ import annotations

import torch

MAX_LENGTH = 1024  # LTX2Pipeline's max_sequence_length default


@torch.no_grad()
def encode_text(tokenizer, text_encoder, connectors, prompt: str, device, max_length: int = MAX_LENGTH):
    """-> (video embeds [1, T, D], audio embeds [1, T, Da], mask [1, T] int64) for one prompt."""
    tokenizer.padding_side = "left"  # as the pipeline sets it for Gemma
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokens = tokenizer([prompt.strip()], padding="max_length", max_length=max_length, truncation=True,
                       add_special_tokens=True, return_tensors="pt")
    ids, mask = tokens.input_ids.to(device), tokens.attention_mask.to(device)
    hidden = text_encoder(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states
    stacked = torch.stack(hidden, dim=-1).flatten(2, 3).to(text_encoder.dtype)
    video, audio, kept = connectors(stacked, mask, padding_side="left")
    return video, audio, kept
