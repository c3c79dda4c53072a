"""HunyuanVideo 1.5 under the dry run's fake tensors.

diffusers' HunyuanVideo15Transformer3DModel.forward packs each sample's valid image, ByT5 and Qwen
tokens first by boolean-mask indexing and branches on whether the image tokens are all zero:
values fake tensors do not have. The dry run's text fakes (below) make every token valid (the most
text the DiT attends to), so the packing is a plain concatenation in the same order; this stand-in
forward runs the model's own submodules (embedders, blocks with pipedit's processors and hooks,
output norm and projection) on tensors of the reference's sizes. It is a memory stand-in, not
diffusers' numerics: the cond-type embeddings (same-size additions) are left out."""

from __future__ import annotations

import types

import torch

from pipedit.dryrun.models import fake_component


def _packed_forward(self, hidden_states, timestep, encoder_hidden_states, encoder_attention_mask,
                    timestep_r=None, encoder_hidden_states_2=None, encoder_attention_mask_2=None, image_embeds=None,
                    attention_kwargs=None, return_dict=True):
    batch, _, frames, height, width = hidden_states.shape
    p_t, p = self.config.patch_size_t, self.config.patch_size
    rotary = self.rope(hidden_states)
    temb = self.time_embed(timestep, timestep_r=timestep_r)
    video = self.x_embedder(hidden_states)
    text = self.context_embedder(encoder_hidden_states, timestep, encoder_attention_mask)
    context = torch.cat([self.image_embedder(image_embeds), self.context_embedder_2(encoder_hidden_states_2), text],
                        dim=1)
    mask = torch.ones(context.shape[:2], dtype=torch.bool, device=context.device)
    for block in self.transformer_blocks:
        video, context = block(video, context, temb, mask, rotary)
    out = self.proj_out(self.norm_out(video, temb))
    out = out.reshape(batch, frames // p_t, height // p, width // p, -1, p_t, p, p)
    out = out.permute(0, 4, 1, 5, 2, 6, 3, 7).flatten(6, 7).flatten(4, 5).flatten(2, 3)
    return (out,)


def fake_hunyuan_video_15_component(root, index, name, *, dtype=None, device=None):
    """fake_component, with the transformer's forward replaced by the packed stand-in."""
    module = fake_component(root, index, name, dtype=dtype, device=device)
    if name == "transformer":
        module.forward = types.MethodType(_packed_forward, module)
    return module


def fake_qwen_encode(tokenizer, text_encoder, prompt):
    """HunyuanVideo 1.5's Qwen states with all 1000 prompt positions valid (the most text its DiT
    attends to; picking the valid ones reads mask values): the forward over the padded template
    length, then the crop, as encode_mllm runs it."""
    from .text_encoding import CROP_START, LAYERS_SKIPPED, MAX_TOKENS

    tokens = tokenizer([prompt], max_length=MAX_TOKENS + CROP_START)
    hidden = text_encoder(input_ids=tokens.input_ids, attention_mask=tokens.attention_mask,
                          output_hidden_states=True).hidden_states
    return hidden[-(LAYERS_SKIPPED + 1)][:, CROP_START:]


def fake_byt5_encode(tokenizer, text_encoder, prompt):
    """HunyuanVideo 1.5's ByT5 states with all 256 glyph positions valid (quoted text that long)."""
    from .text_encoding import GLYPH_TOKENS

    tokens = tokenizer([prompt], max_length=GLYPH_TOKENS)
    return text_encoder(input_ids=tokens.input_ids, attention_mask=tokens.attention_mask.float())[0]


def fake_image_pixels(image, shape, spatial_ratio):
    """The image-to-video condition's pixels before the VAE: preprocessing reads pixel values
    (host data); only the shape and dtype matter here."""
    return torch.empty(1, 3, 1, shape.height, shape.width, dtype=torch.float32)
