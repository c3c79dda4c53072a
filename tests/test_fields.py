"""The generation fields are declared once (pipedit.fields): every interface derives its part from
the declaration, checks a value with the field's one validation, and a field added only to the
declaration reaches every interface."""

import json
import os
import subprocess
import sys
from dataclasses import fields as dataclass_fields
from pathlib import Path

import pytest

from pipedit import fields as declared
from pipedit.capabilities import Capabilities
from pipedit.cli import build_parser
from pipedit.config import GenerationDefaults
from pipedit.errors import UserInputError
from pipedit.fields import FIELD_MODULES_ENV, FIELDS, GenerationField, api_fields, register
from pipedit.lora.spec import LoraOffer, LoraSpec
from pipedit.render.prompts import line_keys, read_lines
from pipedit.request import VideoRequest
from pipedit.serve.contract import reference
from pipedit.serve.contract.errors import ApiError
from pipedit.serve.contract.options import create_options
from pipedit.serve.contract.params import ServiceLimits, resolve
from pipedit.serve.contract.schemas import create_params_model, extras_model

EVERYTHING = Capabilities(negative_prompt=True, image=True, guidance_scale_2=True, flow_shift=True)
ONE_ADAPTER = LoraOffer((("style", LoraSpec("style.safetensors", 0.8)),), 2)  # the form offers loras then


class _Model:
    """A served model that takes every input (the options route offers what the model takes)."""

    capabilities = EVERYTHING


def _flags(command: str) -> set[str]:
    (commands,) = [action for action in build_parser()._actions if action.dest == "command"]
    return {flag for action in commands.choices[command]._actions for flag in action.option_strings}


def _api_schema() -> set[str]:
    return set(create_params_model().model_json_schema()["properties"])


def test_every_field_reaches_every_interface():
    schema, echoed, keys = _api_schema(), set(extras_model().model_fields), set(line_keys())
    generate, render = _flags("generate"), _flags("render")
    offered = {f["name"] for f in create_options("m", _Model(), GenerationDefaults(), ServiceLimits(),
                                                 ONE_ADAPTER)["fields"]}
    for spec in FIELDS.values():
        assert spec.api in schema or spec.api == reference.PARAM, spec.name  # the image: the input_reference upload
        assert spec.name in keys, spec.name
        if spec.in_config:
            assert spec.flag in generate and spec.flag in render, spec.name
        elif spec.cli:
            assert spec.flag in generate, spec.name
        assert spec.name in offered or not spec.form, spec.name
        if spec in api_fields() and spec.name != "prompt":
            assert spec.api in echoed, spec.name
    assert {"--prompt", "--image"} <= generate  # the two fields with a form of their own on the CLI


def test_the_request_and_the_config_hold_the_declared_fields():
    from pipedit.sampling import SamplingParams

    assert [f.name for f in dataclass_fields(VideoRequest)] == [s.name for s in declared.request_fields()] + \
        ["request_id"]
    assert [f.name for f in dataclass_fields(GenerationDefaults)] == [s.name for s in declared.config_fields()]
    defaults = GenerationDefaults()
    assert all(getattr(defaults, s.name) == s.default for s in declared.config_fields())
    request = VideoRequest("a fox")
    assert all(getattr(request, s.name) == s.request_default for s in declared.request_fields() if s.name != "prompt")
    assert [f.name for f in dataclass_fields(SamplingParams)] == ["height", "width", "num_frames", "steps", "flow_shift"]
    per_field = {s.capability for s in declared.capability_fields()}
    assert per_field == {"negative_prompt", "image", "guidance_scale_2", "flow_shift"}
    assert {f.name for f in dataclass_fields(Capabilities)} == per_field | {"needs_image", "ring", "cfg_parallel", "has_sound"}


def test_one_validation_the_same_words_everywhere(tmp_path):
    words = "seed must be between 0 and 9223372036854775807, got -1"
    with pytest.raises(UserInputError) as request:
        VideoRequest("a fox", seed=-1)
    with pytest.raises(UserInputError) as config:
        GenerationDefaults(seed=-1)
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "a fox", "seed": -1}\n')
    (line,) = read_lines(prompts, GenerationDefaults(), "m")
    with pytest.raises(ApiError) as api:
        resolve(create_params_model()(prompt="a fox", seed=-1), "m", GenerationDefaults(), ServiceLimits())
    assert str(request.value) == words and line.error == words and api.value.message == words
    assert str(config.value) == f"generation.{words}"
    assert api.value.param == "seed" and api.value.code == "invalid_value"


def test_a_field_added_only_to_the_declaration_reaches_every_interface(monkeypatch, tmp_path):
    shift = GenerationField("shift", float, None, "The scheduler's shift; defaults to the checkpoint's.", low=0,
                            high=20, nullable=True, in_config=False, in_request=False, label="Shift")
    monkeypatch.setitem(FIELDS, "shift", shift)

    assert "shift" in _api_schema() and "shift" in extras_model().model_fields
    assert "shift" in line_keys() and "--shift" in _flags("generate")
    options = create_options("m", None, GenerationDefaults(), ServiceLimits())
    (offered,) = [f for f in options["fields"] if f["name"] == "shift"]
    assert (offered["type"], offered["minimum"], offered["maximum"], offered["label"]) == ("number", 0, 20, "Shift")

    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "a", "shift": 5}\n{"prompt": "a"}\n{"prompt": "a", "shift": 25}\n')
    shifted, plain, bad = read_lines(prompts, GenerationDefaults(), "m")
    assert shifted.settings["shift"] == 5.0 and "shift" not in plain.settings and shifted.key != plain.key
    assert bad.error == "shift must be between 0 and 20, got 25"

    params = create_params_model()
    assert resolve(params(prompt="a", shift=3), "m", GenerationDefaults(), ServiceLimits()).shift == 3.0
    with pytest.raises(ApiError) as error:
        resolve(params(prompt="a", shift=-1), "m", GenerationDefaults(), ServiceLimits())
    assert error.value.param == "shift" and error.value.message.startswith("shift must be between 0 and 20, got -1")


def test_a_field_registered_from_outside_reaches_every_interface(tmp_path):
    """fake_sharpness.py declares one field (a capability, a sampling parameter, a rule with the
    steps); check_fake_field.py reports what each interface makes of it, in an interpreter that
    loads it through PIPEDIT_FIELD_MODULES before any class is built from the fields."""
    tests = Path(__file__).parent
    path = os.pathsep.join([str(tests / "fields_plugin"), str(tests / "serve"), os.environ.get("PYTHONPATH", "")])
    env = dict(os.environ, **{FIELD_MODULES_ENV: "fake_sharpness", "PYTHONPATH": path})
    done = subprocess.run([sys.executable, str(tests / "fields_plugin" / "check_fake_field.py")], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout)

    assert seen["cli"] == {"generate": 0.3, "render": 0.4}  # a config default's flag on generate and render
    words = "sharpness must be between 0 and 1, got"
    assert seen["config"] == {"loaded": 0.25, "default": None, "refused": f"generation.{words} 2",
                              "request_from_config": 0.25}
    assert seen["request"] == {
        "value": 0.5, "default": None, "refused": f"{words} -1", "pickled": True, "field_values": 0.5,
        "scheduler_got": 0.5, "job_request": 0.5,  # make_scheduler(sampling) and the request the hooks get
        "capability_refusal": "sharpness is not taken by this model: leave it out",
        "rule_refusal": "sharpness 0.5 needs at least 2 steps, got 1"}
    render = seen["render"]
    assert render["sharp_setting"] == 0.5 and render["error"] == f"{words} 7"
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "a fox"}\n')
    (plain,) = read_lines(prompts, GenerationDefaults(), "m")
    assert render["plain_key"] == plain.key != render["sharp_key"]  # lines without it keep their keys

    api = seen["api"]
    for kind, schema in api["schema"].items():
        assert {"type": "number"} in schema["anyOf"], kind
    option = api["option"]
    assert (option["param"], option["minimum"], option["maximum"], option["label"]) == ("sharpness", 0, 1, "Sharpness")
    assert api["takes"] is True and api["created"] == 200 and api["echo"] == 0.75
    assert api["ruled"] == [400, {"message": "sharpness 0.75 needs at least 2 steps, got 1", "param": "sharpness",
                                  "type": "invalid_request_error", "code": "invalid_value"}]
    assert api["engine_got"] == [0.75]  # stored with the job, read back into the engine's request


def test_a_field_registers_once_and_before_the_classes_are_built():
    with pytest.raises(ValueError, match="'seed' is declared already"):
        register(FIELDS["seed"])
    late = GenerationField("late", int, None, "Too late.", nullable=True)
    with pytest.raises(RuntimeError, match="pipedit.request.VideoRequest"):
        register(late)
    assert "late" not in FIELDS
