import hashlib
import json

import torch

from pipedit.cli import main

COMPONENTS = ["scheduler", "text_encoder", "text_encoder_2", "tokenizer", "tokenizer_2", "transformer", "vae"]


def _digest(folder):
    return {
        str(f.relative_to(folder)): hashlib.sha256(f.read_bytes()).hexdigest()
        for f in sorted(folder.rglob("*")) if f.is_file()
    }


def test_layout_is_diffusers_hunyuan(demo_checkpoint):
    index = json.loads((demo_checkpoint / "model_index.json").read_text())
    assert index["_class_name"] == "HunyuanVideoPipeline"
    assert sorted(k for k in index if not k.startswith("_")) == COMPONENTS
    assert (demo_checkpoint / "transformer" / "diffusion_pytorch_model.safetensors").is_file()
    assert (demo_checkpoint / "vae" / "diffusion_pytorch_model.safetensors").is_file()


def test_cli_writes_the_same_bytes_every_time(demo_checkpoint, tmp_path, capsys):
    assert main(["demo-checkpoint", str(tmp_path / "again")]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "again")
    assert _digest(tmp_path / "again") == _digest(demo_checkpoint)


def test_refuses_to_overwrite_a_checkpoint(demo_checkpoint, capsys):
    assert main(["demo-checkpoint", str(demo_checkpoint)]) == 2
    assert "already holds a checkpoint" in capsys.readouterr().err


def test_diffusers_loads_it_unchanged(diffusers_pipeline):
    assert type(diffusers_pipeline).__name__ == "HunyuanVideoPipeline"
    assert diffusers_pipeline.transformer.config.num_attention_heads == 4
    assert diffusers_pipeline.scheduler.config.shift == 7.0


def test_prompt_reaches_the_text_encoder(diffusers_pipeline):
    """The template prefix is exactly crop_start tokens, so the prompt survives the crop and
    different prompts give different embeddings, with padding masked."""
    embeds_a, _, mask_a = diffusers_pipeline.encode_prompt("a red fox", device="cpu")
    embeds_b, _, mask_b = diffusers_pipeline.encode_prompt("a blue whale", device="cpu")
    assert mask_a.shape == (1, 256)
    assert 0 < int(mask_a.sum()) < 256  # some padding: the mask path is exercised
    assert int(mask_b.sum()) == int(mask_a.sum()) + 3
    assert not torch.equal(embeds_a, embeds_b)
