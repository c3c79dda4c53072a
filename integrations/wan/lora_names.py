"""Wan's original layer names (the Wan-AI release, musubi-tuner, lightx2v) and the diffusers
layers they became (facts from diffusers' Wan checkpoint conversion): pipedit.lora.forms reads
LoRA files in the original forms with these."""

from pipedit.lora.forms import Rename

_B = r"blocks\.(\d+)\."
RENAMES = (
    Rename(_B + r"self_attn\.(q|k|v)", (r"blocks.\1.attn1.to_\2",)),
    Rename(_B + r"self_attn\.o", (r"blocks.\1.attn1.to_out.0",)),
    Rename(_B + r"self_attn\.norm_(q|k)", (r"blocks.\1.attn1.norm_\2",)),
    Rename(_B + r"cross_attn\.(q|k|v)", (r"blocks.\1.attn2.to_\2",)),
    Rename(_B + r"cross_attn\.o", (r"blocks.\1.attn2.to_out.0",)),
    Rename(_B + r"cross_attn\.(k|v)_img", (r"blocks.\1.attn2.add_\2_proj",)),
    Rename(_B + r"cross_attn\.norm_(q|k)", (r"blocks.\1.attn2.norm_\2",)),
    Rename(_B + r"cross_attn\.norm_k_img", (r"blocks.\1.attn2.norm_added_k",)),
    Rename(_B + r"ffn\.0", (r"blocks.\1.ffn.net.0.proj",)),
    Rename(_B + r"ffn\.2", (r"blocks.\1.ffn.net.2",)),
    # The original's norm3 (before cross-attention, with weights) is diffusers' norm2, and back.
    Rename(_B + r"norm3", (r"blocks.\1.norm2",)),
    Rename(_B + r"norm2", (r"blocks.\1.norm3",)),
    Rename(_B + r"modulation", (r"blocks.\1.scale_shift_table",)),
    Rename(r"head\.head", ("proj_out",)),
    Rename(r"head\.modulation", ("scale_shift_table",)),
    Rename(r"time_embedding\.0", ("condition_embedder.time_embedder.linear_1",)),
    Rename(r"time_embedding\.2", ("condition_embedder.time_embedder.linear_2",)),
    Rename(r"text_embedding\.0", ("condition_embedder.text_embedder.linear_1",)),
    Rename(r"text_embedding\.2", ("condition_embedder.text_embedder.linear_2",)),
    Rename(r"time_projection\.1", ("condition_embedder.time_proj",)),
    Rename(r"img_emb\.proj\.0", ("condition_embedder.image_embedder.norm1",)),
    Rename(r"img_emb\.proj\.1", ("condition_embedder.image_embedder.ff.net.0.proj",)),
    Rename(r"img_emb\.proj\.3", ("condition_embedder.image_embedder.ff.net.2",)),
    Rename(r"img_emb\.proj\.4", ("condition_embedder.image_embedder.norm2",)),
    Rename(r"patch_embedding", ("patch_embedding",)),
)
