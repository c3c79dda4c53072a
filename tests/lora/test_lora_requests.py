"""Named adapters (model.loras) chosen per request (VideoRequest.loras) on one engine: each request
gets the latents of diffusers' pipeline with its own adapters, whatever ran before it (a switch
leaks nothing), unknown names are refused naming the offered ones, and the device keeps at most
model.max_gpu_loras adapters (least recently used back to host).

Tolerance as tests/lora/test_lora_wan.py: the same fp32 modules on the same CPU; pipedit batches the
guidance branches in one forward where WanPipeline runs two: 1e-4 relative on the final latents.
"""

import pytest
import torch

from lora_files import with_adapters, write_wan_adapters
from pipedit.config import EngineConfig, ModelConfig
from pipedit.errors import InvalidRequestError, UserInputError
from pipedit.request import VideoRequest
from pipedit.runtime.engine import Engine

PROMPT = "a red kite over the dunes"
HEIGHT, WIDTH, FRAMES, STEPS, SEED, GUIDANCE = 48, 80, 9, 3, 11, 5.0


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    from pipedit.integrations.wan.demo_checkpoint import WanDims, write_demo_checkpoint

    return write_demo_checkpoint(tmp_path_factory.mktemp("wan") / "tiny",
                                 WanDims(heads=3, head_dim=8, text_dim=24, ffn_dim=40, seed=3))


@pytest.fixture(scope="module")
def adapters(checkpoint, tmp_path_factory):
    return write_wan_adapters(checkpoint, tmp_path_factory.mktemp("loras"))


def _reference(checkpoint, adapters=(), scales=()):
    from diffusers import WanPipeline

    pipe = with_adapters(WanPipeline.from_pretrained(checkpoint), adapters, scales)
    return pipe(prompt=PROMPT, height=HEIGHT, width=WIDTH, num_frames=FRAMES, num_inference_steps=STEPS,
                guidance_scale=GUIDANCE, output_type="latent",
                generator=torch.Generator("cpu").manual_seed(SEED)).frames


def _request(*loras):
    return VideoRequest(PROMPT, height=HEIGHT, width=WIDTH, num_frames=FRAMES, steps=STEPS, seed=SEED,
                        guidance_scale=GUIDANCE, loras=loras)


def _relative(ours, reference):
    return ((ours - reference).abs().max() / reference.abs().max()).item()


@pytest.mark.slow
def test_each_request_gets_its_own_adapters_across_switches(checkpoint, adapters):
    """A (both adapters, one at its configured default scale), none, B (one adapter), A again."""
    both = _reference(checkpoint, adapters, [0.7, 1.3])
    plain = _reference(checkpoint)
    distill = _reference(checkpoint, adapters[1:], [0.6])
    loras = {"style": {"path": str(adapters[0]), "scale": 0.7}, "distill": str(adapters[1])}
    config = EngineConfig(model=ModelConfig(path=str(checkpoint), loras=loras, max_gpu_loras=2))
    a = {"name": "style"}, {"name": "distill", "scale": 1.3}
    with Engine(config) as engine:
        results = list(engine.generate_many([_request(*a), _request(), _request(("distill", 0.6)), _request(*a)]))
    assert [r.latents.shape for r in results] == [both.shape] * 4
    for result, reference in zip(results, [both, plain, distill, both]):
        assert _relative(result.latents, reference) <= 1e-4
    assert _relative(plain, both) > 1e-2 and _relative(distill, both) > 1e-2


def test_unknown_names_and_bad_scales_are_refused(checkpoint, adapters):
    config = EngineConfig(model=ModelConfig(path=str(checkpoint), loras={"style": str(adapters[0])}))
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
        ModelConfig(loras={"a b": str(adapters[0])})


def test_least_recently_used_adapters_leave_the_device_first(checkpoint, adapters):
    from pipedit.adapter import load_adapter
    from pipedit.lora.spec import named_loras
    from pipedit.lora.switch import RankLoras

    model = ModelConfig(loras={"a": str(adapters[0]), "b": str(adapters[1]), "c": str(adapters[0])}, max_gpu_loras=2)
    loaded = load_adapter(checkpoint, parts={"dit"}, named_loras=named_loras(model.loras))
    switch = RankLoras(loaded.components, model, torch.device("cpu"))
    assert list(switch.on_device) == ["a", "b"]
    switch.activate(_request({"name": "c"}))
    assert list(switch.on_device) == ["b", "c"]
    switch.activate(_request({"name": "b"}, {"name": "a"}))
    assert list(switch.on_device) == ["b", "a"]
    switch.activate(_request({"name": "b"}, {"name": "a"}))  # the same set: no switch
    assert switch.switches == 2
    with pytest.raises(InvalidRequestError, match="more than model.max_gpu_loras"):
        switch.activate(_request({"name": "a"}, {"name": "b"}, {"name": "c"}))
