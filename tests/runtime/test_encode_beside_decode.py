"""Under DeDiVAE the next request's prompt (and image) encode runs on the text rank while it
decodes: its peak is kept out of the decode tiling budget where the text encoders share a decode
rank, and the planner and the dry run count it on top of the decode's peak (they overlap; they
used to be taken one after the other). HunyuanVideo's demo adapters; free memory is injected and
auto tiling takes its CUDA path (on CPU it never tiles). The encode's measured peak on a GPU:
tests/gpu/test_encode_reserve_gpu.py."""

import json

import pytest

from pipedit.adapter import load_adapter
from pipedit.cli import main
from pipedit.request import VideoShape
from pipedit.runtime.decode_budget import fix_decode_budget

SHAPE = VideoShape(height=64, width=96, num_frames=17)


@pytest.fixture
def ranks(demo_checkpoint, monkeypatch):
    """Two decode ranks with the same free memory, enough for an untiled decode; rank 6 also
    holds the text encoders, whose encode needs a third of an untiled decode's peak."""
    from pipedit.integrations.hunyuan_video import adapter as module
    from pipedit.integrations.hunyuan_video.vae_memory import SAFETY_FRACTION, predict_decode_peak_bytes, should_tile

    text_rank, vae_rank = (load_adapter(demo_checkpoint, parts={"vae"}) for _ in range(2))
    predicted = predict_decode_peak_bytes(text_rank.vae_config, text_rank.latent_shape(SHAPE), text_rank.vae.dtype)
    free = int(1.2 * predicted / SAFETY_FRACTION)
    monkeypatch.setattr(module, "free_device_bytes", lambda device: free)
    monkeypatch.setattr(module, "should_tile", lambda mode, device, predicted, free:
                        should_tile(mode, "cuda", predicted, free))
    text_rank.reserve_for_encode(predicted // 3)
    return {6: text_rank, 7: vae_rank}, free, predicted // 3


def _mode(adapter):
    return adapter.decode_mode(adapter.latent_shape(SHAPE))


def test_the_text_ranks_budget_leaves_room_for_an_encode(ranks):
    adapters, free, encode = ranks
    assert adapters[6].free_decode_bytes() == free - encode and adapters[7].free_decode_bytes() == free
    assert [_mode(adapters[r]) for r in (6, 7)] == [1, 0]  # alone, each on its own (one decode rank)
    worker_calls = {"decode_free_bytes": "free_decode_bytes", "fix_decode_budget": "fix_decode_budget"}  # DecodeWorker's
    budget = fix_decode_budget((6, 7), lambda rank, method, *args: getattr(adapters[rank], worker_calls[method])(*args))
    assert budget == free - encode
    assert [_mode(adapters[r]) for r in (6, 7)] == [1, 1]  # both decide as the text rank must


def test_the_planner_adds_the_encodes_peak_to_the_decodes():
    from pipedit.planner.cost import Shape
    from pipedit.planner.memory import ALLOCATOR_OVERHEAD, decode_rank_bytes, encode_peak_bytes
    from pipedit.planner.models import full_size

    model = full_size("hunyuan-video")
    shape = Shape(720, 1280, 129)
    with_text = decode_rank_bytes(model, shape, True, True, False)
    alone = decode_rank_bytes(model, shape, False, True, False)
    encode = encode_peak_bytes(model)
    # Llama-3-8B's 33 hidden states of 256 tokens (about 4096 wide, bf16; guidance-distilled: one
    # prompt): ~0.1 GB.
    assert 0.05e9 < encode < 0.5e9
    assert with_text - alone == pytest.approx(ALLOCATOR_OVERHEAD * (model.text_params * 2 + encode))


def _decode_rank(tmp_path, capsys, checkpoint, text_encoder):
    config = tmp_path / f"{text_encoder}.yaml"
    config.write_text(f"model:\n  dtype: bfloat16\nparallel:\n  decode_ranks: 1\n  aco: 'off'\n"
                      f"  text_encoder: {text_encoder}\ngeneration:\n  height: 64\n  width: 64\n  num_frames: 9\n")
    assert main(["dry-run", "--config", str(config), "--model-path", str(checkpoint), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    return next(r for r in report["ranks"] if r["role"] == "decode")


def test_the_dry_run_counts_the_encode_on_top_of_the_decode(tmp_path, capsys, demo_checkpoint, monkeypatch):
    from pipedit.dryrun import ranks as dry_ranks

    peaks = {}
    reserve = dry_ranks.WorldRun._reserve_encode

    def recorded(self, worker, counter):
        reserve(self, worker, counter)
        peaks.update(self.encode_peaks)

    monkeypatch.setattr(dry_ranks.WorldRun, "_reserve_encode", recorded)
    text = _decode_rank(tmp_path, capsys, demo_checkpoint, "vae")
    alone = _decode_rank(tmp_path, capsys, demo_checkpoint, "dit")
    assert text["holds"] == ["text", "vae"] and alone["holds"] == ["vae"]
    encode = peaks[text["rank"]]  # measured on the decode rank of the first run
    assert encode > 0
    # What the text encoders add to the decode rank's peak: their weights and the encode's peak.
    added = text["peak_bytes"] - alone["peak_bytes"] - (text["by_kind"]["weights"] - alone["by_kind"]["weights"])
    assert added >= encode
