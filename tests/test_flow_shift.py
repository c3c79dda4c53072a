"""flow_shift, the scheduler shift a request may set: one declaration (pipedit.fields), refused
with the same words by every interface, the checkpoint's scheduler rebuilt from its config with
it (pipedit.sampling) where the scheduler has a shift, refused by name elsewhere (OpenSoraPlan's
Euler ancestral sampler has none), part of a render line's identity and of a job's echo."""

import numpy as np
import pytest
import torch

from pipedit.adapter import UnsupportedInputError, check_inputs, load_adapter
from pipedit.cli import main
from pipedit.config import GenerationDefaults
from pipedit.errors import UserInputError
from pipedit.render.prompts import read_lines, settings_key
from pipedit.request import VideoRequest
from pipedit.sampling import SamplingParams, scheduler_for, shift_parameter
from pipedit.serve.contract.errors import ApiError
from pipedit.serve.contract.options import create_options
from pipedit.serve.contract.params import ServiceLimits, request_values, resolve
from pipedit.serve.contract.schemas import create_params_model
from pipedit.serve.jobs.store import JobRecord
from pipedit.serve.jobs.views import to_video


# A zero shift maps every sigma to 0; the review's finite but absurd shifts (1e-300 ... 1e308) ran
# to a completed black video.
@pytest.mark.parametrize("value", [0.0, -2.5, 1e-300, 5e-324, 1e38, 1e308])
def test_a_bad_shift_is_refused_with_the_fields_words_everywhere(tmp_path, value):
    words = f"flow_shift must be between 0.01 and 100, got {value}"
    with pytest.raises(UserInputError) as request:
        VideoRequest("a fox", flow_shift=value)
    with pytest.raises(UserInputError) as config:
        GenerationDefaults(flow_shift=value)
    with pytest.raises(ApiError) as api:
        resolve(create_params_model()(prompt="a fox", flow_shift=value), "m", GenerationDefaults(), ServiceLimits())
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "a fox", "flow_shift": %r}\n{"prompt": "a fox", "flow_shift": "5"}\n' % value)
    line, text = read_lines(prompts, GenerationDefaults(), "m")
    assert str(request.value) == words and line.error == words and api.value.message == words
    assert str(config.value) == f"generation.{words}"
    assert (api.value.param, api.value.code) == ("flow_shift", "invalid_value")
    assert text.error == "flow_shift must be a number (between 0.01 and 100), got '5'"
    with pytest.raises(UserInputError, match=r"flow_shift must be a number \(between 0.01 and 100\), got inf"):
        VideoRequest("a fox", flow_shift=float("inf"))


def test_the_cli_flag_is_checked_with_the_same_words(capsys):
    assert main(["generate", "--prompt", "a fox", "--flow-shift", "0", "--output", "never.mp4"]) == 2
    assert "generation.flow_shift must be between 0.01 and 100, got 0" in capsys.readouterr().err


def test_a_shift_keys_a_render_line_and_a_line_without_one_keeps_its_key(tmp_path):
    plain = {"prompt": "a fox", "model": "m", "steps": 4}
    assert settings_key(dict(plain, flow_shift=None)) == settings_key(plain)
    assert settings_key(dict(plain, flow_shift=5.0)) not in (settings_key(plain), settings_key(dict(plain, flow_shift=3.0)))
    # The run's --flow-shift (generation.flow_shift) is a line's shift when the line sets none.
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "a fox"}\n')
    (unshifted,) = read_lines(prompts, GenerationDefaults(), "m")
    (shifted,) = read_lines(prompts, GenerationDefaults(flow_shift=5.0), "m")
    assert shifted.settings["flow_shift"] == 5.0 and shifted.key != unshifted.key


def test_a_job_stores_runs_and_echoes_the_shift(demo_checkpoint):
    served = load_adapter(demo_checkpoint, parts=frozenset()).validate  # HunyuanVideo: it takes a shift
    settings = resolve(create_params_model()(prompt="a fox", flow_shift=5), "m", GenerationDefaults(),
                       ServiceLimits(), validate=served)
    assert settings.flow_shift == 5.0 and request_values(settings.to_json())["flow_shift"] == 5.0
    default = resolve(create_params_model()(prompt="a fox"), "m", GenerationDefaults(flow_shift=8.0),
                      ServiceLimits(), validate=served)
    assert default.flow_shift == 8.0  # the server's generation.flow_shift
    record = JobRecord(id="video_1", status="completed", created_at=1.0, params=settings.to_json(),
                       extras={"stage": "done", "timings": {"denoise_s": 2.0, "cfg_branches": 1.0}})
    echoed = to_video(record, "m").pipedit
    assert (echoed.flow_shift, echoed.timings["cfg_branches"]) == (5.0, 1.0)  # a Video's `pipedit`
    before = {k: v for k, v in settings.to_json().items() if k != "flow_shift"}  # a row older than the field
    older = to_video(JobRecord(id="video_0", status="queued", created_at=1.0, params=before), "m")
    assert older.status == "queued" and older.pipedit.flow_shift is None  # read, not shown as unreadable
    request = VideoRequest("a fox", steps=3, flow_shift=5.0)
    assert SamplingParams.of(request) == SamplingParams(steps=3, flow_shift=5.0)


def test_shift_keys_of_the_schedulers_diffusers_ships():
    from diffusers import (DPMSolverMultistepScheduler, EulerAncestralDiscreteScheduler,
                           FlowMatchEulerDiscreteScheduler, UniPCMultistepScheduler)

    cases = [(UniPCMultistepScheduler(use_flow_sigmas=True, flow_shift=3.0), "flow_shift"),
             (DPMSolverMultistepScheduler(use_flow_sigmas=True), "flow_shift"),
             (FlowMatchEulerDiscreteScheduler(shift=7.0), "shift"),
             (UniPCMultistepScheduler(), None),  # no flow sigmas: flow_shift is never read
             (FlowMatchEulerDiscreteScheduler(use_dynamic_shifting=True), None),  # shifted per resolution
             (EulerAncestralDiscreteScheduler(), None)]
    assert [shift_parameter(scheduler.config) for scheduler, _ in cases] == [key for _, key in cases]
    with pytest.raises(ValueError, match="EulerAncestralDiscreteScheduler has no flow-matching shift"):
        scheduler_for(EulerAncestralDiscreteScheduler(), SamplingParams(steps=2, flow_shift=2.0))


def test_hunyuan_video_rebuilds_its_scheduler_with_the_shift(demo_checkpoint):
    """As diffusers: FlowMatchEulerDiscreteScheduler.from_config(config, shift=X), timesteps set
    from HunyuanVideoPipeline's sigmas (linspace(1, 0, steps + 1)[:-1])."""
    from diffusers import FlowMatchEulerDiscreteScheduler

    adapter = load_adapter(demo_checkpoint, parts=frozenset())
    assert adapter.capabilities.flow_shift
    config = adapter.components["scheduler"].config
    for shift, expected in ((None, config.shift), (5.0, 5.0)):
        scheduler, timesteps = adapter.make_scheduler(SamplingParams(steps=4, flow_shift=shift))
        reference = FlowMatchEulerDiscreteScheduler.from_config(config, shift=expected)
        reference.set_timesteps(sigmas=np.linspace(1.0, 0.0, 5)[:-1])
        assert scheduler.config.shift == expected and torch.equal(scheduler.sigmas, reference.sigmas)
        assert torch.equal(timesteps, reference.timesteps)
    assert config.shift == 7.0  # the checkpoint's own, untouched by a request's shift


def test_opensora_plan_refuses_a_shift_naming_the_models_that_take_one(osp_demo):
    adapter = load_adapter(osp_demo, parts=frozenset())
    assert not adapter.capabilities.flow_shift
    with pytest.raises(UnsupportedInputError) as refused:
        check_inputs(adapter, flow_shift=5.0)
    assert refused.value.param == "flow_shift"
    assert "the models that take it: hunyuan-video, and wan" in str(refused.value)
    assert "opensora-plan: this checkpoint's scheduler has none; leave it out" in str(refused.value)
    check_inputs(adapter, flow_shift=None)  # left out: accepted
    with pytest.raises(ApiError) as api:
        resolve(create_params_model()(prompt="a fox", flow_shift=5), "m", GenerationDefaults(), ServiceLimits(),
                validate=adapter.validate)
    assert (api.value.param, api.value.code) == ("flow_shift", "unsupported_parameter")
    offered = {f["name"] for f in create_options("m", adapter, GenerationDefaults(), ServiceLimits())["fields"]}
    assert "flow_shift" not in offered and "guidance_scale" in offered
