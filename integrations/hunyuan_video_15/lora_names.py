"""HunyuanVideo 1.5's original layer names (Tencent's release and the trainers on it) and the
diffusers layers they became (facts from diffusers' HunyuanVideo 1.5 checkpoint conversion: its
dual-stream blocks keep q, k and v apart; the token refiner's qkv is fused as HunyuanVideo's; the
final modulation's shift and scale halves swapped). diffusers has no LoRA loader for this family:
pipedit.lora.forms reads every form with these. The layers named as in HunyuanVideo come from
its table."""

from pipedit.integrations.hunyuan_video.lora_names import DOUBLE_BLOCK_STREAMS, PATCHES_AND_FINAL, TEXT_INPUT
from pipedit.lora.forms import Rename

_D, _DB = r"double_blocks\.(\d+)\.", r"transformer_blocks.\1."

RENAMES = (
    Rename(_D + r"img_attn_(q|k|v)", (_DB + r"attn.to_\2",)),
    Rename(_D + r"txt_attn_(q|k|v)", (_DB + r"attn.add_\2_proj",)),
    *DOUBLE_BLOCK_STREAMS,
    *TEXT_INPUT,
    Rename(r"time_in\.mlp\.0", ("time_embed.timestep_embedder.linear_1",)),
    Rename(r"time_in\.mlp\.2", ("time_embed.timestep_embedder.linear_2",)),
    Rename(r"byt5_in\.fc(1|2|3)", (r"context_embedder_2.linear_\1",)),
    Rename(r"byt5_in\.layernorm", ("context_embedder_2.norm",)),
    Rename(r"vision_in\.proj\.0", ("image_embedder.norm_in",)),
    Rename(r"vision_in\.proj\.1", ("image_embedder.linear_1",)),
    Rename(r"vision_in\.proj\.3", ("image_embedder.linear_2",)),
    Rename(r"vision_in\.proj\.4", ("image_embedder.norm_out",)),
    Rename(r"cond_type_embedding", ("cond_type_embed",)),
    *PATCHES_AND_FINAL,
)
