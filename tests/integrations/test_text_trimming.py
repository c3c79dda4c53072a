"""Padded text tokens are dropped before the DiT, so attention runs without a key mask; results
equal diffusers (which keeps the padding and masks it) within 1e-4 on latents: the same math,
only masked-out terms removed, so differences are float rounding of shorter reductions."""

import pytest
import torch

from pipedit.adapter import load_adapter
from pipedit.config import EngineConfig, ModelConfig
from pipedit.request import VideoRequest
from pipedit.runtime.engine import Engine

PROMPTS = [
    "fox",  # a few tokens: most of the 256 are padding
    "an old lighthouse keeper climbs the spiral stairs at dusk while waves break on the rocks " * 2,
]


def _kernel_calls(engine):
    from pipedit.integrations.hunyuan_video.parallel import SequenceParallelAttnProcessor

    processors = engine.executor.worker.adapter.transformer.attn_processors.values()
    calls = {}
    for processor in processors:
        if isinstance(processor, SequenceParallelAttnProcessor):
            for name, count in processor.strategy.kernel.calls.items():
                calls[name] = calls.get(name, 0) + count
    return calls


@pytest.mark.parametrize("prompt", PROMPTS, ids=["short", "long"])
def test_trimmed_text_equals_diffusers_and_runs_unmasked(demo_checkpoint, diffusers_pipeline, prompt):
    request = VideoRequest(prompt, height=64, width=80, num_frames=5, steps=2, seed=5)
    with Engine(EngineConfig(model=ModelConfig(path=str(demo_checkpoint)))) as engine:
        ours = engine.generate(request).latents
        calls = _kernel_calls(engine)
    reference = diffusers_pipeline(
        prompt=prompt, height=64, width=80, num_frames=5, num_inference_steps=2,
        generator=torch.Generator("cpu").manual_seed(5), output_type="latent",
    ).frames
    assert (ours - reference).abs().max().item() <= 1e-4
    assert calls.get("sdpa", 0) > 0 and "sdpa-masked" not in calls


def test_condition_keeps_only_valid_tokens(demo_checkpoint):
    adapter = load_adapter(demo_checkpoint)
    cond = adapter.encode_prompt("a red fox")
    valid = int(cond["prompt_attention_mask"].sum())
    assert 0 < valid < cond["prompt_embeds"].shape[1]
    trimmed = adapter.prepare_condition(cond)
    assert adapter.text_length(trimmed) == valid and not adapter.text_keys.padded
    assert torch.equal(trimmed["prompt_embeds"], cond["prompt_embeds"][:, :valid])
    assert bool(trimmed["prompt_attention_mask"].all())


def test_left_padding_keeps_the_masked_path(demo_checkpoint):
    adapter = load_adapter(demo_checkpoint)
    cond = adapter.encode_prompt("a red fox")
    cond["prompt_attention_mask"] = cond["prompt_attention_mask"].flip(1)  # valid tokens last
    kept = adapter.prepare_condition(cond)
    assert kept is cond and adapter.text_keys.padded
