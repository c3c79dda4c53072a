"""LTX-2 under the dry run (pipedit.integrations.ltx2.released, .dryrun): the released configs written
without weights build the released modules; the faked prompt encode is the encode LTX2Pipeline runs
(Gemma's every hidden state, then the connectors) with every token valid; a dry run of one rank."""

import json

import pytest
import torch
import transformers

from pipedit.integrations.ltx2 import release
from pipedit.dryrun.models import fake_component
from pipedit.integrations.ltx2.dryrun import fake_gemma_encode
from pipedit.integrations.ltx2.released import write_release

TINY_GEMMA = {"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
              "text_config": {"model_type": "gemma3_text", "hidden_size": 64, "intermediate_size": 96,
                              "num_hidden_layers": 3, "num_attention_heads": 2, "num_key_value_heads": 1,
                              "head_dim": 32, "vocab_size": 300, "sliding_window": 64},
              "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 32, "intermediate_size": 48,
                                "num_hidden_layers": 1, "num_attention_heads": 2, "image_size": 28, "patch_size": 14}}
# LTX-2's connectors (shared projection, caption width) and LTX-2.3's (per-modality widths), 4 = 3 layers + 1.
TINY_CONNECTORS = {
    "ltx-2": {"caption_channels": 64, "text_proj_in_factor": 4, "video_connector_num_attention_heads": 2,
              "video_connector_attention_head_dim": 32, "video_connector_num_layers": 1,
              "video_connector_num_learnable_registers": 8, "audio_connector_num_attention_heads": 2,
              "audio_connector_attention_head_dim": 32, "audio_connector_num_layers": 1,
              "audio_connector_num_learnable_registers": 8, "rope_type": "split"},
    "ltx-2.3": {"caption_channels": 64, "text_proj_in_factor": 4, "video_connector_num_attention_heads": 3,
                "video_connector_attention_head_dim": 32, "video_connector_num_layers": 1,
                "video_connector_num_learnable_registers": 8, "audio_connector_num_attention_heads": 2,
                "audio_connector_attention_head_dim": 16, "audio_connector_num_layers": 1,
                "audio_connector_num_learnable_registers": 8, "rope_type": "split", "per_modality_projections": True,
                "video_hidden_dim": 96, "audio_hidden_dim": 32, "proj_bias": True},
}


class _AllValid:
    """A tokenizer whose every position is a valid token (the dry run's stub, with the attributes
    LTX2Pipeline sets)."""

    pad_token, eos_token, padding_side = "<pad>", "<eos>", "left"

    def __call__(self, texts, max_length=None, **_):
        ids = torch.arange(len(texts) * max_length).reshape(len(texts), max_length) % 300
        return transformers.BatchEncoding({"input_ids": ids, "attention_mask": torch.ones_like(ids)})


@pytest.mark.parametrize("name", release.RELEASES)
def test_the_released_configs_build_the_released_modules(tmp_path, name):
    """Each folder's config builds (meta device) the module model_index.json names, with the planner's
    parameter count (the Gemma 3 12B text encoder from its config.json, through transformers)."""
    root = write_release(name, tmp_path / name)
    index = json.loads((root / "model_index.json").read_text())
    assert index["_class_name"] == "LTX2Pipeline" and index["connectors"][0] == "ltx2"
    for folder, config in release.COMPONENTS[name].items():
        with torch.device("meta"):
            module = fake_component(root, index, folder, dtype=torch.bfloat16)
        count = release.gemma_params() if folder == "text_encoder" else release.params(config)
        assert sum(p.numel() for p in module.parameters()) == count, folder
    scheduler = json.loads((root / "scheduler" / "scheduler_config.json").read_text())
    assert scheduler["use_dynamic_shifting"] is (name not in release.DISTILLED)


@pytest.mark.parametrize("variant", ["ltx-2", "ltx-2.3"])
def test_the_faked_encode_is_the_pipelines_encode_with_every_token_valid(variant):
    """On real tiny modules: equal to LTX2Pipeline's own prompt encode (its _get_gemma_prompt_embeds,
    then the connectors as __call__ runs them), so the shapes the dry run hands the DiT are the real
    ones: [1, 1024, video width], [1, 1024, audio width], [1, 1024]."""
    from diffusers import LTX2Pipeline
    from diffusers.pipelines.ltx2.connectors import LTX2TextConnectors

    torch.manual_seed(0)
    gemma = transformers.Gemma3ForConditionalGeneration(transformers.AutoConfig.for_model(**TINY_GEMMA)).eval()
    connectors = LTX2TextConnectors(**TINY_CONNECTORS[variant]).eval()
    tokenizer = _AllValid()

    class _Pipe:
        pass

    pipe = _Pipe()
    pipe.tokenizer, pipe.text_encoder, pipe._execution_device = tokenizer, gemma, torch.device("cpu")
    with torch.no_grad():
        embeds, mask = LTX2Pipeline._get_gemma_prompt_embeds(pipe, "a cat", max_sequence_length=1024)
        expected = connectors(embeds, mask, padding_side="left")
        got = fake_gemma_encode(tokenizer, gemma, connectors, "a cat", "cpu")
    widths = {"ltx-2": (64, 64), "ltx-2.3": (96, 32)}[variant]
    assert [tuple(t.shape) for t in got] == [(1, 1024, widths[0]), (1, 1024, widths[1]), (1, 1024)]
    for ours, theirs in zip(got, expected):
        assert torch.equal(ours, theirs)


@pytest.mark.slow
def test_one_rank_of_ltx2_from_the_released_configs(tmp_path, capsys):
    """The dry run of the released LTX-2 on one rank; at 64x64x9 the weights are nearly all of it:
    the planner's count of the same modules and the dry run's storages agree within 5%."""
    from pipedit.cli import main

    config = tmp_path / "config.yaml"
    config.write_text("model:\n  dtype: bfloat16\ngeneration:\n  height: 64\n  width: 64\n  num_frames: 9\n")
    assert main(["dry-run", "--config", str(config), "--model", "ltx-2", "--steps", "1", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] and report["released_configs"] and report["model"] == "ltx-2"
    (rank,) = report["ranks"]
    assert rank["holds"] == ["dit", "text", "vae"]
    assert rank["planner_error"] == pytest.approx(0.0, abs=0.05)
