"""Create parameters resolve against the model's defaults; only what the client sent overrides."""

import pytest

from pipedit.config import GenerationDefaults
from pipedit.serve.contract.errors import ApiError
from pipedit.serve.contract.params import ServiceLimits, resolve
from pipedit.serve.contract.schemas import VideoCreateParams

DEFAULTS = GenerationDefaults(height=128, width=96, num_frames=17, steps=10, guidance_scale=6.0, seed=3, fps=24)


def _resolve(**fields):
    return resolve(VideoCreateParams(**fields), "demo", DEFAULTS, ServiceLimits())


def test_defaults_fill_what_was_not_sent():
    settings = _resolve(prompt="a fox", num_inference_steps=4)
    assert (settings.width, settings.height, settings.num_frames, settings.seed) == (96, 128, 17, 3)
    assert settings.num_inference_steps == 4 and settings.seconds == "0.708"


def test_explicit_null_means_default_and_size_is_width_by_height():
    settings = _resolve(prompt="a fox", seed=None, size="64x32")
    assert settings.seed == 3 and (settings.width, settings.height) == (64, 32)


@pytest.mark.parametrize("seconds, fps, frames", [("2", 8, 17), (1, 24, 25), (0.01, 24, 1), ("1.5", 10, 17)])
def test_seconds_become_the_nearest_4k_plus_1_frames(seconds, fps, frames):
    assert _resolve(prompt="a fox", seconds=seconds, fps=fps).num_frames == frames


def test_num_frames_wins_over_seconds_and_limits_hold():
    assert _resolve(prompt="a fox", seconds="4", num_frames=9).num_frames == 9
    with pytest.raises(ApiError) as error:
        _resolve(prompt="a fox", seconds="60")
    assert error.value.status == 400 and error.value.param == "seconds"
    with pytest.raises(ApiError) as error:
        _resolve(prompt="x" * 5000)
    assert error.value.code == "prompt_too_long"
    with pytest.raises(ApiError) as error:
        _resolve(prompt="a fox", negative_prompt="blurry")
    assert error.value.code == "unsupported_parameter"


@pytest.mark.parametrize("seconds", [float("inf"), "1e400", 1e308, "nan"])
def test_infinite_or_huge_lengths_are_refused_not_crashed(seconds):
    # Found by the API fuzz test: these once overflowed while counting frames (a 500).
    with pytest.raises(ApiError) as caught:
        _resolve(prompt="a fox", seconds=seconds)
    assert caught.value.status == 400 and caught.value.param == "seconds"
