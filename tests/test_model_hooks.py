"""The optional adapter hooks: declared once with their defaults, inherited by every adapter, and
the scheduler seam's sampling parameters."""

import pytest
import torch

from pipedit.integrations.hunyuan_video.adapter import HunyuanVideoAdapter
from pipedit.integrations.opensora_plan.adapter import OpenSoraPlanAdapter
from pipedit.integrations.wan.adapter import WanAdapter
from pipedit.model_hooks import AdapterHooks
from pipedit.request import VideoRequest
from pipedit.sampling import SamplingParams


class _OneTransformer(AdapterHooks):
    transformer = "dit"


def test_the_defaults_are_those_of_a_model_that_needs_nothing_special():
    hooks = _OneTransformer()
    request = VideoRequest("a fox", height=16, width=16, num_frames=1, steps=3, guidance_scale=4.5)
    latents = torch.ones(1, 2)
    assert hooks.guidance_scale_at(request, torch.tensor(500.0)) == 4.5
    assert hooks.finish_latents(latents, {}) is latents
    assert hooks.experts == ["dit"] and hooks.expert_set is None
    assert hooks.cfg_branches({}) is None
    assert hooks.cache_blocks() is None
    assert hooks.decode_mode((1, 16, 2, 4, 4)) == 0 and hooks.split_units((1, 16, 2, 4, 4), 2) == 1
    with pytest.raises(NotImplementedError):
        hooks.split_plan(latents, 0, 2)
    preds = [torch.zeros(2), torch.ones(2)]
    assert torch.equal(hooks.combine_guidance(preds, 3.0), torch.full((2,), 3.0))


@pytest.mark.parametrize("adapter_class, branches", [(HunyuanVideoAdapter, False),  # embedded guidance
                                                     (OpenSoraPlanAdapter, True), (WanAdapter, True)])
def test_every_adapter_inherits_the_hooks(adapter_class, branches):
    assert issubclass(adapter_class, AdapterHooks)
    assert adapter_class.capabilities.cfg_parallel is branches


def test_sampling_params_come_from_the_request():
    request = VideoRequest("a fox", height=16, width=16, num_frames=1, steps=7)
    assert SamplingParams.of(request) == SamplingParams(height=16, width=16, num_frames=1, steps=7)
