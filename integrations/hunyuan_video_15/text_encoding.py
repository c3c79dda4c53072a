"""HunyuanVideo 1.5's text side as diffusers' HunyuanVideo15Pipeline runs it (diffusers 0.42.1):
- Qwen2.5-VL: the prompt as a chat (the pipeline's system message, the prompt as the user's turn,
  a blank for an empty prompt, then the assistant's turn), padded to max_tokens + crop tokens;
  the hidden state `skipped + 1` from the end, with the first `crop` positions (the template's
  start) dropped;
- ByT5: the quoted text of the prompt ("..." or “...”) as the pipeline formats it, over 256 byte
  tokens; no quoted text: no tokens (the pipeline's zero embeddings are all masked out).
Only the valid (unmasked) tokens are returned: the DiT puts the valid ones first and masks the
rest, which then contribute nothing; the adapter pads branches to a common length again.

The template numbers and the system message are read from the pinned pipeline's defaults, so
they live in one place."""

from __future__ import annotations

import inspect

import torch
from diffusers.pipelines.hunyuan_video1_5.pipeline_hunyuan_video1_5 import (
    HunyuanVideo15Pipeline,
    extract_glyph_texts,
)

_MLLM = inspect.signature(HunyuanVideo15Pipeline._get_mllm_prompt_embeds).parameters
SYSTEM_MESSAGE: str = _MLLM["system_message"].default
CROP_START: int = _MLLM["crop_start"].default  # 108
MAX_TOKENS: int = _MLLM["tokenizer_max_length"].default  # 1000 prompt tokens after the crop
LAYERS_SKIPPED: int = _MLLM["num_hidden_layers_to_skip"].default  # 2: hidden_states[-3]
GLYPH_TOKENS: int = inspect.signature(HunyuanVideo15Pipeline._get_byt5_prompt_embeds).parameters[
    "tokenizer_max_length"].default  # 256


def _valid(states: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """[1, L, D], mask [1, L] -> [1, n, D]: the valid positions, in order."""
    return states[mask.bool()][None]


@torch.no_grad()
def encode_mllm(tokenizer, text_encoder, prompt: str) -> torch.Tensor:
    """[1, n, text_dim] in the encoder's dtype: the valid prompt tokens' states after the crop."""
    chat = [[{"role": "system", "content": SYSTEM_MESSAGE}, {"role": "user", "content": prompt or " "}]]
    tokens = tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=True, return_dict=True,
                                           padding="max_length", max_length=MAX_TOKENS + CROP_START,
                                           truncation=True, return_tensors="pt")
    device = next(text_encoder.parameters()).device
    ids, mask = tokens.input_ids.to(device), tokens.attention_mask.to(device)
    hidden = text_encoder(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states
    states = hidden[-(LAYERS_SKIPPED + 1)]
    return _valid(states[:, CROP_START:], mask[:, CROP_START:]).to(text_encoder.dtype)


@torch.no_grad()
def encode_glyphs(tokenizer, text_encoder, prompt: str) -> torch.Tensor:
    """[1, n, byt5_dim]: ByT5's states of the prompt's quoted text (n = 0 without any)."""
    glyphs = extract_glyph_texts(prompt)
    width = text_encoder.config.d_model
    device = next(text_encoder.parameters()).device
    if glyphs is None:
        return torch.zeros(1, 0, width, dtype=text_encoder.dtype, device=device)
    tokens = tokenizer(glyphs, padding="max_length", max_length=GLYPH_TOKENS, truncation=True,
                       add_special_tokens=True, return_tensors="pt").to(device)
    states = text_encoder(input_ids=tokens.input_ids, attention_mask=tokens.attention_mask.float())[0]
    return _valid(states, tokens.attention_mask)
