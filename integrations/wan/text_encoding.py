"""Wan's text side as diffusers' WanPipeline runs it: the prompt cleaned (ftfy, HTML entities
unescaped twice, whitespace runs collapsed), UMT5 over max_length tokens, and the embeddings of the
padding positions replaced by zeros (the DiT attends to all max_length tokens, unmasked)."""

from __future__ import annotations

import html

import ftfy
import regex  # not re: its \s is Unicode White_Space, as diffusers' (re's also matches \x1c-\x1f)
import torch

MAX_TEXT_TOKENS = 512  # WanPipeline's max_sequence_length default
DEFAULT_NEGATIVE_PROMPT = ""  # WanPipeline's: no negative prompt given -> the empty one


def clean_prompt(text: str) -> str:
    """ftfy, HTML entities (twice, as diffusers does: '&amp;amp;' -> '&'), then one space per run."""
    text = html.unescape(html.unescape(ftfy.fix_text(text))).strip()
    return regex.sub(r"\s+", " ", text).strip()


@torch.no_grad()
def encode_text(tokenizer, text_encoder, prompt: str, device, max_tokens: int = MAX_TEXT_TOKENS) -> torch.Tensor:
    """[1, max_tokens, dim] in the text encoder's dtype: the valid tokens' states, then zeros."""
    tokens = tokenizer([clean_prompt(prompt)], padding="max_length", max_length=max_tokens, truncation=True,
                       add_special_tokens=True, return_attention_mask=True, return_tensors="pt")
    mask = tokens.attention_mask
    valid = int(mask.gt(0).sum())
    encoder_device = next(text_encoder.parameters()).device
    states = text_encoder(tokens.input_ids.to(encoder_device), mask.to(encoder_device)).last_hidden_state
    states = states.to(device=device, dtype=text_encoder.dtype)[0, :valid]
    return torch.cat([states, states.new_zeros(max_tokens - valid, states.shape[1])])[None]
