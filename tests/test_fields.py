"""The generation fields are declared once (pipedit.fields): every interface derives its part from
the declaration, checks a value with the field's one validation, and a field added only to the
declaration reaches every interface."""

from dataclasses import fields as dataclass_fields

import pytest

from pipedit import fields as declared
from pipedit.capabilities import Capabilities
from pipedit.cli import build_parser
from pipedit.config import GenerationDefaults
from pipedit.errors import UserInputError
from pipedit.fields import FIELDS, GenerationField, api_fields
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
    assert {f.name for f in dataclass_fields(VideoRequest)} >= {s.name for s in declared.request_fields()}
    assert [f.name for f in dataclass_fields(GenerationDefaults)] == [s.name for s in declared.config_fields()]
    defaults = GenerationDefaults()
    assert all(getattr(defaults, s.name) == s.default for s in declared.config_fields())


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
