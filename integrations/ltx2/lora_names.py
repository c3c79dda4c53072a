"""LTX-2's original layer names (Lightricks' LTX-2 trainer: `diffusion_model.<layer>` keys) and
the diffusers layers they became (facts from diffusers' LTX-2 LoRA conversion and the
LTX2VideoTransformer3DModel's modules): pipedit.lora.forms reads LoRA files in the original form
with these. Layers not listed kept their name (the blocks' attention projections to_q/to_k/to_v/
to_out.0 and to_gate_logits, ff/audio_ff, caption projections, proj_out, audio_proj_out, the
scale-shift tables).

LTX-2's adapters may also target the text connectors (diffusers' `connectors` component: keys
`connectors.` in diffusers' form, `text_embedding_projection.` in the original). They run in the
prompt encoding, which a request's adapter choice does not reach, so such files are refused."""

import re

from pipedit.lora.forms import Rename

_B = r"transformer_blocks\.(\d+)\."
_ATTENTION = r"(attn1|attn2|audio_attn1|audio_attn2|audio_to_video_attn|video_to_audio_attn)"
# The timestep modulations (an embedding MLP and the projection to the modulation rows).
_ADALN = {"adaln_single": "time_embed", "audio_adaln_single": "audio_time_embed",
          "prompt_adaln_single": "prompt_adaln", "audio_prompt_adaln_single": "audio_prompt_adaln",  # LTX-2.3
          "av_ca_video_scale_shift_adaln_single": "av_cross_attn_video_scale_shift",
          "av_ca_a2v_gate_adaln_single": "av_cross_attn_video_a2v_gate",
          "av_ca_audio_scale_shift_adaln_single": "av_cross_attn_audio_scale_shift",
          "av_ca_v2a_gate_adaln_single": "av_cross_attn_audio_v2a_gate"}
_ADALN_LAYERS = ("emb.timestep_embedder.linear_1", "emb.timestep_embedder.linear_2", "linear")
_CONNECTORS = ("LTX-2's text connectors (they run in the prompt encoding; pipedit applies LoRA adapters to the "
               "transformer only): use an adapter file without the connectors' keys")

# Names are spelled out whole (no `.+` groups) so the kohya spelling (dots as underscores) matches too.
RENAMES = (
    Rename(_B + _ATTENTION + r"\.(q|k)_norm", (r"transformer_blocks.\1.\2.norm_\3",)),
    Rename(_B + r"scale_shift_table_a2v_ca_(video|audio)",
           (r"transformer_blocks.\1.\2_a2v_cross_attn_scale_shift_table",)),
    Rename(r"patchify_proj", ("proj_in",)),
    Rename(r"audio_patchify_proj", ("audio_proj_in",)),
    *(Rename(re.escape(f"{original}.{layer}"), (f"{name}.{layer}",))
      for original, name in _ADALN.items() for layer in _ADALN_LAYERS),
    Rename(r"(connectors|text_embedding_projection)\..*", (), refused=_CONNECTORS),
)
