"""The offline Gemma tokenizer of the tiny LTX-2 checkpoints.

Gemma's tokenizer is a BPE with byte fallback: a character missing from the vocabulary becomes its
UTF-8 bytes (<0x..> tokens), so with no merges at all any prompt encodes, one token per known
character, without a downloaded vocabulary. The ids of the special tokens are Gemma's (pad 0,
eos 1, bos 2, unk 3, mask 4); every prompt starts with <bos>, as Gemma's. The image tokens exist
so that the Gemma 3 model's image token ids fall inside this vocabulary (prompts never hold them).
"""

from __future__ import annotations

import string

from transformers import GemmaTokenizer

SPECIAL = ("<pad>", "<eos>", "<bos>", "<unk>", "<mask>")
IMAGE_TOKENS = ("<start_of_image>", "<end_of_image>", "<image_soft_token>")
WORD_BOUNDARY = "\u2581"  # Gemma's stand-in for a space


def gemma_vocab() -> dict[str, int]:
    tokens = [*SPECIAL, *IMAGE_TOKENS, *(f"<0x{byte:02X}>" for byte in range(256)), WORD_BOUNDARY]
    tokens += [char for char in string.ascii_letters + string.digits + string.punctuation if char not in tokens]
    return {token: index for index, token in enumerate(tokens)}


def build_gemma_tokenizer(max_length: int) -> GemmaTokenizer:
    """Left padding, as LTX2Pipeline sets it before encoding (Gemma prompts are padded on the left)."""
    tokenizer = GemmaTokenizer(vocab=gemma_vocab(), merges=[], model_max_length=max_length, padding_side="left",
                               add_bos_token=True)
    tokenizer.add_special_tokens({"additional_special_tokens": list(IMAGE_TOKENS)})
    return tokenizer


def image_token_ids() -> dict[str, int]:
    """The Gemma 3 config's image token ids in this vocabulary."""
    vocab = gemma_vocab()
    return {"boi_token_index": vocab[IMAGE_TOKENS[0]], "eoi_token_index": vocab[IMAGE_TOKENS[1]],
            "image_token_index": vocab[IMAGE_TOKENS[2]]}
