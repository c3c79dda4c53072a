"""HunyuanVideo's original layer names (Tencent's release, musubi-tuner, kohya) and the diffusers
layers they became (facts from diffusers' HunyuanVideo checkpoint conversion): fused projections
split by rows (img_attn_qkv into to_q, to_k, to_v; a single block's linear1 into to_q, to_k, to_v
and proj_mlp), the final modulation's shift and scale halves swapped."""

from pipedit.lora.forms import Rename

_D, _S = r"double_blocks\.(\d+)\.", r"single_blocks\.(\d+)\."
_DB, _SB = r"transformer_blocks.\1.", r"single_transformer_blocks.\1."
_R = r"txt_in\.individual_token_refiner\.blocks\.(\d+)\."
_RB = r"context_embedder.token_refiner.refiner_blocks.\1."
# Shared with HunyuanVideo 1.5, which keeps these layers under the same names.
DOUBLE_BLOCK_STREAMS = (  # every layer of a dual-stream block but its q, k, v projections
    Rename(_D + r"img_attn_proj", (_DB + "attn.to_out.0",)),
    Rename(_D + r"img_attn_(q|k)_norm", (_DB + r"attn.norm_\2",)),
    Rename(_D + r"img_mlp\.fc1", (_DB + "ff.net.0.proj",)),
    Rename(_D + r"img_mlp\.fc2", (_DB + "ff.net.2",)),
    Rename(_D + r"img_mod\.linear", (_DB + "norm1.linear",)),
    Rename(_D + r"txt_attn_proj", (_DB + "attn.to_add_out",)),
    Rename(_D + r"txt_attn_(q|k)_norm", (_DB + r"attn.norm_added_\2",)),
    Rename(_D + r"txt_mlp\.fc1", (_DB + "ff_context.net.0.proj",)),
    Rename(_D + r"txt_mlp\.fc2", (_DB + "ff_context.net.2",)),
    Rename(_D + r"txt_mod\.linear", (_DB + "norm1_context.linear",)),
)
TEXT_INPUT = (  # the token refiner (its qkv fused) and the text input's embedders
    Rename(_R + r"self_attn_qkv", (_RB + "attn.to_q", _RB + "attn.to_k", _RB + "attn.to_v")),
    Rename(_R + r"self_attn_proj", (_RB + "attn.to_out.0",)),
    Rename(_R + r"norm(1|2)", (_RB + r"norm\2",)),
    Rename(_R + r"mlp\.fc1", (_RB + "ff.net.0.proj",)),
    Rename(_R + r"mlp\.fc2", (_RB + "ff.net.2",)),
    Rename(_R + r"adaLN_modulation\.1", (_RB + "norm_out.linear",)),
    Rename(r"txt_in\.input_embedder", ("context_embedder.proj_in",)),
    Rename(r"txt_in\.t_embedder\.mlp\.0", ("context_embedder.time_text_embed.timestep_embedder.linear_1",)),
    Rename(r"txt_in\.t_embedder\.mlp\.2", ("context_embedder.time_text_embed.timestep_embedder.linear_2",)),
    Rename(r"txt_in\.c_embedder\.linear_(1|2)", (r"context_embedder.time_text_embed.text_embedder.linear_\1",)),
)
PATCHES_AND_FINAL = (
    Rename(r"img_in\.proj", ("x_embedder.proj",)),
    Rename(r"final_layer\.linear", ("proj_out",)),
    Rename(r"final_layer\.adaLN_modulation\.1", ("norm_out.linear@1/2", "norm_out.linear@0/2")),
)
RENAMES = (
    Rename(_D + r"img_attn_qkv", (_DB + "attn.to_q", _DB + "attn.to_k", _DB + "attn.to_v")),
    Rename(_D + r"txt_attn_qkv", (_DB + "attn.add_q_proj", _DB + "attn.add_k_proj", _DB + "attn.add_v_proj")),
    *DOUBLE_BLOCK_STREAMS,
    Rename(_S + r"linear1", (_SB + "attn.to_q", _SB + "attn.to_k", _SB + "attn.to_v", _SB + "proj_mlp")),
    Rename(_S + r"linear2", (_SB + "proj_out",)),
    Rename(_S + r"(q|k)_norm", (_SB + r"attn.norm_\2",)),
    Rename(_S + r"modulation\.linear", (_SB + "norm.linear",)),
    *TEXT_INPUT,
    Rename(r"time_in\.mlp\.0", ("time_text_embed.timestep_embedder.linear_1",)),
    Rename(r"time_in\.mlp\.2", ("time_text_embed.timestep_embedder.linear_2",)),
    Rename(r"vector_in\.in_layer", ("time_text_embed.text_embedder.linear_1",)),
    Rename(r"vector_in\.out_layer", ("time_text_embed.text_embedder.linear_2",)),
    Rename(r"guidance_in\.mlp\.0", ("time_text_embed.guidance_embedder.linear_1",)),
    Rename(r"guidance_in\.mlp\.2", ("time_text_embed.guidance_embedder.linear_2",)),
    *PATCHES_AND_FINAL,
)
