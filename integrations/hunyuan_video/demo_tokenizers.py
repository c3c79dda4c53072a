"""Offline tokenizers for the demo checkpoint.

HunyuanVideo's pipeline wraps every prompt in a fixed chat template and crops the first
`crop_start` = 95 tokens (the template prefix) from the encoder output. A plain character-level
tokenizer would spend all 256 + 95 positions on the template and never see the prompt, so the
demo tokenizer is a WordPiece model whose vocabulary holds single characters plus pieces of the
template, chosen so the prefix is exactly 95 tokens long. Unknown words fall back to characters,
so every ASCII prompt is encoded and different prompts give different embeddings.
"""

from __future__ import annotations

import string

from tokenizers import Regex, Tokenizer, models, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast

PAD, BOS, EOS, UNK = "<pad>", "<s>", "</s>", "<unk>"
# A special token such as <|eot_id|>, a word with its leading space, a digit run, punctuation, whitespace.
_PIECE_PATTERN = r"<\|[a-z_]+\|>| ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]| *\n+| +"


def _pre_tokenizer() -> pre_tokenizers.PreTokenizer:
    return pre_tokenizers.Split(Regex(_PIECE_PATTERN), behavior="isolated")


def _base_vocab() -> dict[str, int]:
    vocab = {PAD: 0, UNK: 1, BOS: 2, EOS: 3}
    for char in string.printable:
        vocab.setdefault(char, len(vocab))
    return vocab


def _template_pieces(prefix: str) -> list[str]:
    pieces = _pre_tokenizer().pre_tokenize_str(prefix)
    return [piece for piece, _ in pieces]


def _choose_vocab(prefix: str, target_tokens: int) -> dict[str, int]:
    """Characters plus every template piece, then two-character pieces taken out again (each
    adds one token per occurrence) until `prefix` encodes to `target_tokens` tokens, BOS included."""
    pieces = _template_pieces(prefix)
    kept = sorted(set(pieces))
    count = 1 + len(pieces)
    for piece in sorted(p for p in set(pieces) if len(p) == 2):
        if count >= target_tokens:
            break
        if count + pieces.count(piece) <= target_tokens:
            kept.remove(piece)
            count += pieces.count(piece)
    if count != target_tokens:
        raise RuntimeError(f"cannot fit the template prefix to {target_tokens} tokens (got {count})")
    vocab = _base_vocab()
    for piece in kept:
        vocab.setdefault(piece, len(vocab))
    return vocab


def _tokenizer_object(vocab: dict[str, int], with_eos: bool) -> Tokenizer:
    tokenizer = Tokenizer(models.WordPiece(vocab, unk_token=UNK, continuing_subword_prefix="", max_input_chars_per_word=200))
    tokenizer.pre_tokenizer = _pre_tokenizer()
    single = f"{BOS} $A {EOS}" if with_eos else f"{BOS} $A"
    tokenizer.post_processor = processors.TemplateProcessing(
        single=single, special_tokens=[(BOS, vocab[BOS]), (EOS, vocab[EOS])]
    )
    return tokenizer


def build_llama_tokenizer(template_prefix: str, crop_start: int, max_length: int) -> PreTrainedTokenizerFast:
    vocab = _choose_vocab(template_prefix, crop_start)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=_tokenizer_object(vocab, with_eos=False),
        pad_token=PAD, unk_token=UNK, bos_token=BOS, eos_token=EOS, model_max_length=max_length,
    )
    prefix_tokens = len(tokenizer(template_prefix).input_ids)
    if prefix_tokens != crop_start:
        raise RuntimeError(f"demo tokenizer encodes the template prefix to {prefix_tokens} tokens, expected {crop_start}")
    return tokenizer


def build_clip_tokenizer(max_length: int = 77) -> PreTrainedTokenizerFast:
    return PreTrainedTokenizerFast(
        tokenizer_object=_tokenizer_object(_base_vocab(), with_eos=True),
        pad_token=PAD, unk_token=UNK, bos_token=BOS, eos_token=EOS, model_max_length=max_length,
    )
