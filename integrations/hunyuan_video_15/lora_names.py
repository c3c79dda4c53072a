"""HunyuanVideo 1.5's original layer names (Tencent's release and the trainers on it) and the
diffusers layers they became (facts from diffusers' HunyuanVideo 1.5 checkpoint conversion: its
dual-stream blocks keep q, k and v apart; the token refiner's qkv is fused as HunyuanVideo's; the
final modulation's shift and scale halves swapped). diffusers has no LoRA loader for this family:
pipedit.lora.forms reads every form with these."""

from pipedit.lora.forms import Rename

_D, _DB = r"double_blocks\.(\d+)\.", r"transformer_blocks.\1."
_R = r"txt_in\.individual_token_refiner\.blocks\.(\d+)\."
_RB = r"context_embedder.token_refiner.refiner_blocks.\1."
RENAMES = (
    Rename(_D + r"img_attn_(q|k|v)", (_DB + r"attn.to_\2",)),
    Rename(_D + r"img_attn_proj", (_DB + "attn.to_out.0",)),
    Rename(_D + r"img_attn_(q|k)_norm", (_DB + r"attn.norm_\2",)),
    Rename(_D + r"img_mlp\.fc1", (_DB + "ff.net.0.proj",)),
    Rename(_D + r"img_mlp\.fc2", (_DB + "ff.net.2",)),
    Rename(_D + r"img_mod\.linear", (_DB + "norm1.linear",)),
    Rename(_D + r"txt_attn_(q|k|v)", (_DB + r"attn.add_\2_proj",)),
    Rename(_D + r"txt_attn_proj", (_DB + "attn.to_add_out",)),
    Rename(_D + r"txt_attn_(q|k)_norm", (_DB + r"attn.norm_added_\2",)),
    Rename(_D + r"txt_mlp\.fc1", (_DB + "ff_context.net.0.proj",)),
    Rename(_D + r"txt_mlp\.fc2", (_DB + "ff_context.net.2",)),
    Rename(_D + r"txt_mod\.linear", (_DB + "norm1_context.linear",)),
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
    Rename(r"time_in\.mlp\.0", ("time_embed.timestep_embedder.linear_1",)),
    Rename(r"time_in\.mlp\.2", ("time_embed.timestep_embedder.linear_2",)),
    Rename(r"byt5_in\.fc(1|2|3)", (r"context_embedder_2.linear_\1",)),
    Rename(r"byt5_in\.layernorm", ("context_embedder_2.norm",)),
    Rename(r"vision_in\.proj\.0", ("image_embedder.norm_in",)),
    Rename(r"vision_in\.proj\.1", ("image_embedder.linear_1",)),
    Rename(r"vision_in\.proj\.3", ("image_embedder.linear_2",)),
    Rename(r"vision_in\.proj\.4", ("image_embedder.norm_out",)),
    Rename(r"img_in\.proj", ("x_embedder.proj",)),
    Rename(r"cond_type_embedding", ("cond_type_embed",)),
    Rename(r"final_layer\.linear", ("proj_out",)),
    Rename(r"final_layer\.adaLN_modulation\.1", ("norm_out.linear@1/2", "norm_out.linear@0/2")),
)
