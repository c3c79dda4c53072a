"""Named adapters under --compile switch through fixed slots (pipedit.lora.slots): a sequence of
requests with other adapter sets and scales gives the outputs of the eager switching path
(set_adapters), and the compiled blocks never compile again after the first forward, where
switching by set_adapters compiles again for every new set (the control below).

The graphs are counted by a torch.compile backend that records each graph dynamo hands it and
runs it as captured (no inductor: what is counted is dynamo's recompiles, which inductor would
only make slower). Tolerance: the slots multiply each adapter's alpha/r and scale into B before
the matmul where peft multiplies the product after it: float32 rounding, 1e-5 relative."""

import torch

from lora_files import write_wan_adapters
from pipedit.adapter import load_adapter
from pipedit.config import ModelConfig
from pipedit.lora.inject import apply_loras
from pipedit.lora.slots import SlotLoras
from pipedit.lora.switch import RankLoras
from pipedit.request import VideoRequest
from pipedit.runtime.compile import compile_blocks

A = ({"name": "style", "scale": 0.7}, {"name": "distill", "scale": 1.3})
SEQUENCE = [A, (), ({"name": "distill", "scale": 0.6},), A, ({"name": "style", "scale": -0.5},), ()]


class _CountingBackend:
    def __init__(self):
        self.graphs = 0

    def __call__(self, graph, inputs):
        self.graphs += 1
        return graph.forward


def _transformer(checkpoint, model):
    loaded = apply_loras(load_adapter(checkpoint, parts={"dit"}), named=model.offered_loras)
    transformer = loaded.components["transformer"]
    return loaded.components, transformer


def _inputs(transformer):
    config = transformer.config
    generator = torch.Generator().manual_seed(5)
    hidden = torch.randn(1, config.in_channels, 3, 6, 10, generator=generator)
    text = torch.randn(1, 7, config.text_dim, generator=generator)
    return dict(hidden_states=hidden, timestep=torch.tensor([700]), encoder_hidden_states=text, return_dict=False)


def test_switching_through_slots_gives_the_eager_outputs_without_compiling_again(tmp_path):
    from pipedit.integrations.wan.demo_checkpoint import WanDims, write_demo_checkpoint

    checkpoint = write_demo_checkpoint(tmp_path / "wan", WanDims(heads=2, head_dim=8, text_dim=16, ffn_dim=24, seed=4))
    style, distill = write_wan_adapters(checkpoint, tmp_path)
    model = ModelConfig(path=str(checkpoint), offered_loras={"style": str(style), "distill": str(distill)},
                        max_gpu_loras=2, compile=True)
    components, eager = _transformer(checkpoint, model)
    switch = RankLoras(components, model, torch.device("cpu"))
    slot_components, slotted = _transformer(checkpoint, model)
    slots = SlotLoras(slot_components, model, torch.device("cpu"))
    counted = _CountingBackend()
    compile_blocks(slotted, backend=counted)
    control_components, control = _transformer(checkpoint, model)
    control_switch = RankLoras(control_components, model, torch.device("cpu"))
    control_counted = _CountingBackend()
    compile_blocks(control, backend=control_counted)
    inputs = _inputs(eager)
    graphs, outputs = [], []
    with torch.no_grad():
        for loras in SEQUENCE:
            request = VideoRequest("x", loras=loras)
            switch.activate(request)
            slots.activate(request)
            control_switch.activate(request)
            expected = eager(**inputs)[0]
            got = slotted(**inputs)[0]
            control(**inputs)
            assert (got - expected).abs().max() <= 1e-5 * expected.abs().max(), loras
            graphs.append(counted.graphs)
            outputs.append(expected)
    assert graphs[0] > 0 and graphs == [graphs[0]] * len(SEQUENCE)  # compiled once, for the first request
    assert control_counted.graphs > graphs[0]  # set_adapters: a new set compiles again
    assert (outputs[0] - outputs[1]).abs().max() > 1e-2 * outputs[1].abs().max()  # the adapters act
    assert torch.equal(outputs[1], outputs[5]) and slots.switches == 6


def test_slots_are_as_many_as_the_adapters_offered(tmp_path):
    """One adapter offered under the default max_gpu_loras (4): one slot per adapted layer, not
    four (three would run zero LoRA pairs at every step), and it still gives the eager output."""
    from pipedit.integrations.wan.demo_checkpoint import WanDims, write_demo_checkpoint

    checkpoint = write_demo_checkpoint(tmp_path / "wan", WanDims(heads=2, head_dim=8, text_dim=16, ffn_dim=24, seed=4))
    style, _ = write_wan_adapters(checkpoint, tmp_path)
    model = ModelConfig(path=str(checkpoint), offered_loras={"style": str(style)}, compile=True)
    assert model.max_gpu_loras == 4
    components, eager = _transformer(checkpoint, model)
    switch = RankLoras(components, model, torch.device("cpu"))
    slot_components, slotted = _transformer(checkpoint, model)
    slots = SlotLoras(slot_components, model, torch.device("cpu"))
    assert slots.layers["transformer"] and all(list(layer.lora_A) == ["slot0"]
                                               for layer in slots.layers["transformer"].values())
    request = VideoRequest("x", loras=({"name": "style", "scale": 0.8},))
    switch.activate(request)
    slots.activate(request)
    inputs = _inputs(eager)
    with torch.no_grad():
        expected, got = eager(**inputs)[0], slotted(**inputs)[0]
    assert (got - expected).abs().max() <= 1e-5 * expected.abs().max()
