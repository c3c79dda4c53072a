"""`pipedit bench lora`'s parts that need no timing: the random adapters it writes when the user
gives fewer than two files load into the checkpoint's transformer through the same path a user's
file takes, on every attention projection; refusals come before anything loads. (The timed run
itself is a benchmark, run by hand: its figures are in the docs.)"""

import pytest

from pipedit.cli import main


def test_random_adapters_load_onto_every_attention_projection(tmp_path):
    from pipedit.adapter import load_adapter
    from pipedit.bench.lora import random_adapters
    from pipedit.families import family
    from pipedit.lora.inject import apply_loras
    from pipedit.integrations.wan.demo_checkpoint import WanDims, write_demo_checkpoint
    from pipedit.lora.spec import LoraSpec

    checkpoint = write_demo_checkpoint(tmp_path / "wan", WanDims(heads=2, head_dim=8, text_dim=16, ffn_dim=24))
    files = random_adapters(checkpoint, family("wan"), 2, rank=4, folder=tmp_path)
    loaded = apply_loras(load_adapter(checkpoint, parts={"dit"}), tuple(LoraSpec(str(f)) for f in files))
    adapted = {name.rsplit(".", 1)[-1] if not name.endswith("to_out.0") else "to_out.0"
               for name, module in loaded.components["transformer"].named_modules() if hasattr(module, "lora_A")}
    assert adapted == {"to_q", "to_k", "to_v", "to_out.0"}
    layers = [m for m in loaded.components["transformer"].modules() if hasattr(m, "lora_A")]
    assert all(set(m.lora_A) == {"lora0", "lora1"} and m.r["lora0"] == 4 for m in layers)


@pytest.mark.parametrize("flags, words", [
    (["--model", "opensora-plan"], "LoRA adapters are not available for opensora-plan"),
    (["--lora", "a", "--lora", "b", "--lora", "c"], "at most two adapters, got 3"),
    (["--rank", "0"], "--rank must be at least 1"),
])
def test_refusals_come_before_anything_loads(flags, words, capsys, tmp_path):
    assert main(["bench", "lora", "--out", str(tmp_path), *flags]) == 2
    assert words in capsys.readouterr().err
