"""`decode_ranks: auto` asks the planner when no calibration measurement is cached."""


from pipedit.config import EngineConfig, GenerationDefaults, ModelConfig, ParallelConfig
from pipedit.planner.auto import predict_decode_ranks
from pipedit.planner.hardware import profile_for_gpu_name
from pipedit.runtime import calibration


def _config(path, device="cuda"):
    return EngineConfig(model=ModelConfig(path=str(path), device=device),
                        parallel=ParallelConfig(decode_ranks="auto", ranks=8),
                        generation=GenerationDefaults(height=544, width=960, num_frames=65, steps=30))


def _no_measurement(*args):
    raise AssertionError("measured although the planner could predict")


def test_the_generic_profile_is_the_slowest_at_decoding():
    """Their first decode of GPUs without a profile is bounded by it
    (pipedit.runtime.decode_prediction): it must be the slowest at convolutions (the VAE)."""
    from pipedit.planner.auto import GENERIC_PROFILE
    from pipedit.planner.hardware import PROFILES

    rate = {key: p.peak_flops * p.eff_conv for key, p in PROFILES.items()}
    assert min(rate, key=rate.get) == GENERIC_PROFILE


def test_gpu_names_map_to_profiles():
    assert profile_for_gpu_name("NVIDIA H100 80GB HBM3") == "h100"
    assert profile_for_gpu_name("NVIDIA RTX A6000") == "a6000"
    assert profile_for_gpu_name("NVIDIA L40") == "l40"
    assert profile_for_gpu_name("NVIDIA L40S") is None
    assert profile_for_gpu_name("Tesla T4") is None


def test_auto_uses_the_planner_without_a_measurement(demo_checkpoint, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PIPEDIT_CACHE", str(tmp_path))
    monkeypatch.setattr(calibration, "gpu_model_name", lambda: "NVIDIA H100 80GB HBM3")
    monkeypatch.setattr(calibration, "measure_request_times", _no_measurement)
    resolved = calibration.resolve_parallel(_config(demo_checkpoint), str(demo_checkpoint), heads=4)
    expected = predict_decode_ranks(str(demo_checkpoint), "hunyuan-video", "NVIDIA H100", 8, 544, 960, 65, 30)
    assert resolved.decode_ranks == expected.decode_ranks >= 1
    assert resolved.ulysses * resolved.ring + resolved.decode_ranks == 8
    assert "using the planner's prediction" in capsys.readouterr().err


def test_gpus_without_a_profile_use_the_generic_one_instead_of_measuring(demo_checkpoint, tmp_path, monkeypatch,
                                                                         capsys):
    """Measuring would run a whole request on one GPU holding every model part (OOM at 544p)."""
    monkeypatch.setenv("PIPEDIT_CACHE", str(tmp_path))
    monkeypatch.setattr(calibration, "gpu_model_name", lambda: "NVIDIA A100-SXM4-80GB")
    monkeypatch.setattr(calibration, "measure_request_times", _no_measurement)
    resolved = calibration.resolve_parallel(_config(demo_checkpoint), str(demo_checkpoint), heads=4)
    expected = predict_decode_ranks(str(demo_checkpoint), "hunyuan-video", "NVIDIA RTX A6000", 8, 544, 960, 65, 30)
    assert resolved.decode_ranks == expected.decode_ranks >= 1
    assert "a6000 (generic: no profile for NVIDIA A100-SXM4-80GB) profile" in capsys.readouterr().err


def test_a_cached_measurement_wins(demo_checkpoint, tmp_path, monkeypatch):
    monkeypatch.setenv("PIPEDIT_CACHE", str(tmp_path))
    calls = []

    def measured(config, path, request):
        calls.append(request)
        return {"t_denoise": 3.0, "t_decode": 1.0, "pid": 0}

    monkeypatch.setattr(calibration, "measure_request_times", measured)
    config = _config(demo_checkpoint)
    monkeypatch.setattr(calibration, "gpu_model_name", lambda: "NVIDIA H100 80GB HBM3")
    g = config.generation
    request = calibration.VideoRequest("x", height=g.height, width=g.width, num_frames=g.num_frames, steps=g.steps)
    calibration.request_times(config, str(demo_checkpoint), request)  # an H100 measurement, cached
    assert len(calls) == 1
    monkeypatch.setattr(calibration, "measure_request_times", _no_measurement)
    assert calibration.resolve_parallel(config, str(demo_checkpoint), heads=4).decode_ranks == 2  # balance rule


def test_cpu_never_asks_the_planner(demo_checkpoint):
    assert calibration.planned_decode_ranks(_config(demo_checkpoint, device="cpu"), str(demo_checkpoint)) is None
