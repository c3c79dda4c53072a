"""mT5 text encoding of Open-Sora-Plan v1.3: the official prompt templates, 512 tokens padded
to max length, the attention mask passed to the encoder and on to the DiT."""

from __future__ import annotations

from pathlib import Path

import torch

from pipedit.errors import ModelPathError

MAX_TOKENS = 512
POSITIVE_TEMPLATE = "\n    high quality, high aesthetic, {}\n    "
NEGATIVE_PROMPT = (
    "\n    nsfw, lowres, bad anatomy, bad hands, text, error, missing fingers, extra digit, fewer digits, "
    "cropped, worst quality, \n    low quality, normal quality, jpeg artifacts, signature, watermark, "
    "username, blurry.\n    "
)


def load_text_encoder(folder: str | Path, dtype: torch.dtype | None, device) -> tuple:
    """(tokenizer, MT5EncoderModel) from a folder laid out as google/mt5-xxl is published."""
    from transformers import AutoTokenizer, MT5EncoderModel

    folder = Path(folder)
    if not (folder / "config.json").is_file():
        raise ModelPathError(f"text encoder folder {folder} has no config.json (expected the google/mt5-xxl layout: "
                             f"config.json, weights, tokenizer files)")
    tokenizer = AutoTokenizer.from_pretrained(folder)
    options = {"dtype": dtype} if dtype is not None else {}
    encoder = MT5EncoderModel.from_pretrained(folder, **options)
    encoder.requires_grad_(False)
    return tokenizer, encoder.eval().to(device)


@torch.no_grad()
def encode_text(tokenizer, encoder, text: str, device) -> tuple[torch.Tensor, torch.Tensor]:
    """(embeddings [1, 512, d_model], mask [1, 512] int64)."""
    tokens = tokenizer([text], padding="max_length", max_length=MAX_TOKENS, truncation=True,
                       return_attention_mask=True, return_tensors="pt")
    mask = tokens.attention_mask.to(device)
    hidden = encoder(tokens.input_ids.to(device), attention_mask=mask).last_hidden_state
    return hidden, mask
