"""Named adapters (model.offered_loras) chosen per request (VideoRequest.loras) on one engine: unknown names
are refused naming the offered ones, and the device keeps at most model.max_gpu_loras adapters
(least recently used back to host). That each request gets diffusers' latents with its own
adapters across switches: tests/runtime/test_wan_parallel_e2e.py (Ulysses 2 + a decode rank); that
a served sequence gets the videos of one-shot runs: tests/serve/test_lora_service.py."""

import pytest
import torch

from pipedit.config import EngineConfig, ModelConfig
from pipedit.errors import InvalidRequestError, UserInputError
from pipedit.request import VideoRequest
from pipedit.runtime.engine import Engine

PROMPT = "a red kite over the dunes"
HEIGHT, WIDTH, FRAMES, STEPS, SEED, GUIDANCE = 48, 80, 9, 3, 11, 5.0


@pytest.fixture(scope="module")
def checkpoint(wan_three_heads):
    return wan_three_heads


@pytest.fixture(scope="module")
def adapters(wan_three_heads_adapters):
    return wan_three_heads_adapters


def _request(*loras):
    return VideoRequest(PROMPT, height=HEIGHT, width=WIDTH, num_frames=FRAMES, steps=STEPS, seed=SEED,
                        guidance_scale=GUIDANCE, loras=loras)


def test_unknown_names_and_bad_scales_are_refused(checkpoint, adapters):
    config = EngineConfig(model=ModelConfig(path=str(checkpoint), offered_loras={"style": str(adapters[0])}))
    with Engine(config) as engine:
        with pytest.raises(InvalidRequestError, match="'anime' is not an adapter this server offers; offered: style"):
            engine.generate(_request({"name": "anime"}))
    with pytest.raises(InvalidRequestError, match="finite number"):
        _request({"name": "style", "scale": float("inf")})
    with pytest.raises(InvalidRequestError, match="named twice"):
        _request({"name": "style"}, {"name": "style", "scale": 2})
    with pytest.raises(InvalidRequestError, match=r"expected \{\"name\": NAME"):
        _request({"path": "/etc/passwd"})  # a client names adapters, never files
    with pytest.raises(UserInputError, match="adapter name"):
        ModelConfig(offered_loras={"a b": str(adapters[0])})


def test_least_recently_used_adapters_leave_the_device_first(checkpoint, adapters):
    from pipedit.adapter import load_adapter
    from pipedit.lora.inject import apply_loras
    from pipedit.lora.spec import named_loras
    from pipedit.lora.switch import RankLoras

    model = ModelConfig(offered_loras={"a": str(adapters[0]), "b": str(adapters[1]), "c": str(adapters[0])},
                        max_gpu_loras=2)
    loaded = apply_loras(load_adapter(checkpoint, parts={"dit"}), named=named_loras(model.offered_loras))
    switch = RankLoras(loaded.components, model, torch.device("cpu"))
    assert list(switch.on_device) == ["a", "b"]
    switch.activate(_request({"name": "c"}))
    assert list(switch.on_device) == ["b", "c"]
    switch.activate(_request({"name": "b"}, {"name": "a"}))
    assert list(switch.on_device) == ["b", "a"]
    switch.activate(_request({"name": "b"}, {"name": "a"}))  # the same set: no switch
    assert switch.switches == 2
    with pytest.raises(InvalidRequestError, match=r"model.max_gpu_loras = 2"):
        switch.activate(_request({"name": "a"}, {"name": "b"}, {"name": "c"}))
