"""Offline tokenizers for the tiny HunyuanVideo 1.5 checkpoints.

The Qwen2.5-VL tokenizer is byte-level BPE: with no merges at all, each UTF-8 byte of the text is
one token, so any prompt encodes without a downloaded vocabulary. The pipeline formats prompts as
a chat (system message, user prompt, assistant turn) through the tokenizer's chat template, so the
tokenizer carries one in Qwen's form. ByT5's tokenizer needs no files at all (bytes + 3)."""

from __future__ import annotations

from transformers import ByT5Tokenizer, Qwen2Tokenizer

SPECIAL = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
# Qwen's chat form: each message as <|im_start|>role\ncontent<|im_end|>\n, then the assistant's turn.
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def _byte_symbols() -> list[str]:
    """The 256 printable stand-ins GPT-2 style byte-level BPE uses for the bytes 0..255."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    symbols, extra = {}, 0
    for byte in range(256):
        if byte in printable:
            symbols[byte] = chr(byte)
        else:
            symbols[byte] = chr(256 + extra)
            extra += 1
    return [symbols[byte] for byte in range(256)]


def build_qwen_tokenizer(max_length: int) -> Qwen2Tokenizer:
    vocab = {symbol: index for index, symbol in enumerate(_byte_symbols())}
    for token in SPECIAL:
        vocab[token] = len(vocab)
    tokenizer = Qwen2Tokenizer(vocab=vocab, merges=[], model_max_length=max_length)
    tokenizer.add_special_tokens({"additional_special_tokens": list(SPECIAL[1:])})
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def build_byt5_tokenizer() -> ByT5Tokenizer:
    return ByT5Tokenizer()
