"""`decode_ranks: auto` calibrates in a rank actor: the driver never holds a model."""

import gc
import os

import pytest

from pipedit.config import EngineConfig, GenerationDefaults, ModelConfig, ParallelConfig
from pipedit.request import VideoRequest
from pipedit.runtime import calibration


def _transformers_alive() -> int:
    from diffusers import HunyuanVideoTransformer3DModel

    gc.collect()
    return sum(type(obj) is HunyuanVideoTransformer3DModel for obj in gc.get_objects())


def _config(path):
    return EngineConfig(model=ModelConfig(path=str(path)),
                        parallel=ParallelConfig(decode_ranks="auto", ranks=3),
                        generation=GenerationDefaults(height=64, width=64, num_frames=5, steps=3))


def test_calibration_runs_in_a_rank_actor_and_leaves_no_model_behind(ray_session, demo_checkpoint):
    before = _transformers_alive()
    request = VideoRequest("a red fox", height=64, width=64, num_frames=5, steps=3)
    measured = calibration.measure_request_times(_config(demo_checkpoint), str(demo_checkpoint), request)
    assert measured["pid"] != os.getpid()
    assert measured["t_denoise"] > 0 and measured["t_decode"] > 0
    assert _transformers_alive() == before


def test_auto_split_is_cached_per_shape(ray_session, demo_checkpoint, tmp_path, monkeypatch):
    monkeypatch.setenv("PIPEDIT_CACHE", str(tmp_path))
    config = _config(demo_checkpoint)
    first = calibration.resolve_parallel(config, str(demo_checkpoint), heads=4)
    assert first.decode_ranks >= 1 and first.ulysses * first.ring + first.decode_ranks == 3
    assert (tmp_path / "calibration.json").is_file()

    def no_second_run(*args):
        raise AssertionError("calibrated twice for one shape")

    monkeypatch.setattr(calibration, "measure_request_times", no_second_run)
    assert calibration.resolve_parallel(config, str(demo_checkpoint), heads=4) == first
    other_shape = EngineConfig(model=config.model, parallel=config.parallel,
                               generation=GenerationDefaults(height=64, width=96, num_frames=5, steps=3))
    with pytest.raises(AssertionError, match="calibrated twice"):
        calibration.resolve_parallel(other_shape, str(demo_checkpoint), heads=4)
