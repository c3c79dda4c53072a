"""The cache setting's forms, where it is given (config, request, flag), and the policies' rules."""

import pytest

from pipedit.cache.policy import TeaCachePolicy, polynomial, teacache_coefficients
from pipedit.cache.spec import CacheSpec, parse_cache, resolve
from pipedit.config import EngineConfig, GenerationDefaults
from pipedit.errors import InvalidRequestError, UserInputError
from pipedit.request import VideoRequest


@pytest.mark.parametrize("text,expected", [("none", CacheSpec()), ("fbcache:0.1", CacheSpec("fbcache", 0.1)),
                                           (" TeaCache:0.15 ", CacheSpec("teacache", 0.15)),
                                           ("fbcache:0", CacheSpec("fbcache", 0.0))])
def test_forms_parse(text, expected):
    assert parse_cache(text) == expected
    assert parse_cache(str(expected)) == expected  # the canonical string round-trips


@pytest.mark.parametrize("text", ["fbcache", "fbcache:", "fbcache:-0.1", "fbcache:nan", "fbcache:inf", "magcache:0.1",
                                  "none:0.1", "teacache:x", "", 0.1])
def test_bad_forms_name_the_allowed_ones(text):
    with pytest.raises(UserInputError, match="fbcache:T or teacache:T"):
        parse_cache(text)


def test_config_request_and_default():
    assert GenerationDefaults(cache="FBCache:0.20").cache == "fbcache:0.2"
    with pytest.raises(UserInputError, match="none, fbcache:T or teacache:T"):
        EngineConfig(generation=GenerationDefaults(cache="fast"))
    with pytest.raises(InvalidRequestError, match="fbcache:T"):
        VideoRequest("a cat", cache="fbcache:-1")
    assert VideoRequest("a cat", cache="teacache:0.1").cache == "teacache:0.1"
    assert resolve(None, "fbcache:0.3") == CacheSpec("fbcache", 0.3)
    assert resolve("none", "fbcache:0.3") == CacheSpec()


def test_teacache_accumulates_rescaled_distances_and_always_computes_first_and_last():
    coefficients = teacache_coefficients("hunyuan-video")
    assert polynomial((2.0, -1.0, 3.0), 2.0) == 9.0  # 2x^2 - x + 3, as numpy.poly1d
    one = polynomial(coefficients, 0.05)
    policy = TeaCachePolicy(CacheSpec("teacache", 1.5 * one), coefficients)
    assert policy.decide(None, 0, 5)  # first step
    assert [policy.decide(0.05, step, 5) for step in (1, 2, 3)] == [False, True, False]  # resets on compute
    assert policy.decide(None, 4, 5)  # the last step computes whatever was accumulated
    with pytest.raises(InvalidRequestError, match="hunyuan-video"):
        teacache_coefficients("opensora-plan")


def test_cli_flag_and_api_field_name_the_allowed_forms(capsys):
    from pipedit.serve.contract.errors import ApiError
    from pipedit.serve.contract.params import ServiceLimits
    from pipedit.serve.contract.params import resolve as resolve_params
    from pipedit.serve.contract.schemas import VideoCreateParams

    from pipedit.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(["generate", "--prompt", "a cat", "--output", "out.mp4", "--cache", "fbcache"])
    assert exit_info.value.code == 2 and "fbcache:T or teacache:T" in capsys.readouterr().err
    limits, defaults = ServiceLimits(), GenerationDefaults(cache="teacache:0.1")
    given = resolve_params(VideoCreateParams(prompt="a cat", cache="FBCache:0.20"), "demo", defaults, limits)
    assert given.cache == "fbcache:0.2"
    assert resolve_params(VideoCreateParams(prompt="a cat"), "demo", defaults, limits).cache == "teacache:0.1"
    with pytest.raises(ApiError) as error:
        resolve_params(VideoCreateParams(prompt="a cat", cache="fast"), "demo", defaults, limits)
    assert error.value.status == 400 and error.value.param == "cache" and "fbcache:T" in str(error.value)


def test_the_api_refuses_teacache_for_a_family_without_coefficients():
    """The server checks the cache against the served model's family (its shape validator is the
    adapter's bound method), so the job is refused with 400 instead of failing in the engine."""
    from pipedit.serve.contract.errors import ApiError
    from pipedit.serve.contract.params import ServiceLimits
    from pipedit.serve.contract.params import resolve as resolve_params
    from pipedit.serve.contract.schemas import VideoCreateParams

    class Adapter:
        def __init__(self, family):
            self.family = family

        def validate(self, shape, steps):
            pass

    limits, defaults = ServiceLimits(), GenerationDefaults()
    ask = VideoCreateParams(prompt="a cat", cache="teacache:0.1")
    assert resolve_params(ask, "demo", defaults, limits, Adapter("hunyuan-video").validate).cache == "teacache:0.1"
    with pytest.raises(ApiError) as error:
        resolve_params(ask, "demo", defaults, limits, Adapter("opensora-plan").validate)
    assert error.value.status == 400 and error.value.param == "cache" and "hunyuan-video" in str(error.value)
    fb = VideoCreateParams(prompt="a cat", cache="fbcache:0.1")
    assert resolve_params(fb, "demo", defaults, limits, Adapter("opensora-plan").validate).cache == "fbcache:0.1"


def test_render_lines_take_a_cache_each(tmp_path):
    from pipedit.render.prompts import read_lines
    from pipedit.render.remote import create_body

    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "a cat"}\n{"prompt": "a cat", "cache": "fbcache:0.2"}\n'
                       '{"prompt": "a dog", "cache": "fast"}\n')
    plain, cached, bad = read_lines(prompts, GenerationDefaults(), "demo")
    assert (plain.settings["cache"], cached.settings["cache"]) == ("none", "fbcache:0.2")
    assert plain.key != cached.key  # a cached video is another video: resuming renders it again
    assert "fbcache:T" in bad.error
    assert "cache" not in create_body(plain) and create_body(cached)["cache"] == "fbcache:0.2"
