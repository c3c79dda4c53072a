"""Pydantic models in the shape of OpenAI's video API (field names and types as the official
SDK reads them), plus pipedit's diffusion settings. pipedit's own output fields live in ONE
nested object, `pipedit`, so that OpenAI clients see exactly the fields they know."""

from __future__ import annotations

import json
from typing import Annotated, Literal, Optional, Union, get_args, get_origin, get_type_hints

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationInfo, create_model
from pydantic_core import PydanticCustomError
from typing_extensions import Required, TypedDict

from pipedit.fields import FIELDS, GenerationField, api_fields

VideoStatus = Literal["queued", "in_progress", "completed", "failed", "cancelled"]
FINAL_STATUSES = frozenset({"completed", "failed", "cancelled"})


class _CreateParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    def given(self) -> dict:
        """Only the fields the client sent (explicit nulls count as not sent)."""
        return {name: getattr(self, name) for name in self.model_fields_set if getattr(self, name) is not None}


# The create fields that are not generation fields: which model, and the API's forms of the size
# and the frame count. The generation fields follow, from pipedit.fields.
_API_ONLY = {
    "model": (Optional[str], Field(None, description="The served model's name; defaults to it.")),
    "size": (Optional[str], Field(None, description="WIDTHxHEIGHT in pixels, e.g. 128x128.")),
    "seconds": (Optional[Union[str, float]], Field(
        None, description="Clip length; sets num_frames from fps when num_frames is not given.")),
}


FORM = "form"  # the validation context of a multipart create: {FORM: True}


def _as_sent(value, info: ValidationInfo):
    """A number as the client sent it. Hazard: pydantic's lax mode makes `true` 1.0 and "5" 5.0
    before pipedit's checks could refuse them; JSON has numbers, so a JSON body's must be numbers.
    A multipart form's values are all text: there a string is read as the number it spells."""
    if isinstance(value, bool) or (isinstance(value, str) and not (info.context or {}).get(FORM)):
        raise PydanticCustomError("invalid_value", "must be a number, got {value}", {"value": json.dumps(value)})
    return value


def _number(kind):
    return Annotated[kind, BeforeValidator(_as_sent)] if kind in (int, float) else kind


def _api_item(item):
    """A list entry's type in the API: a TypedDict's numbers as _number takes them."""
    if not isinstance(item, type) or not hasattr(item, "__required_keys__"):
        return item
    keys = {key: Required[_number(get_args(hint)[0])] if get_origin(hint) is Required else _number(hint)
            for key, hint in get_type_hints(item, include_extras=True).items()}
    made = TypedDict(item.__name__, keys, total=item.__total__)
    made.__doc__ = item.__doc__
    return made


def annotation(spec: GenerationField):
    """The field's type in the API: its kind, or a list of its items."""
    return list[_api_item(spec.item)] if spec.kind is list else _number(spec.kind)


def create_params_model() -> type[_CreateParams]:
    """POST /v1/videos's body: the prompt, the API-only fields and every generation field the API
    takes under its own name (pipedit.fields.api_fields). Fields left out take the server's
    defaults (see `given`)."""
    generation = {spec.api: (Optional[annotation(spec)], Field(None, description=spec.description))
                  for spec in api_fields() if spec.name != "prompt"}
    prompt = FIELDS["prompt"]
    return create_model("VideoCreateParams", __base__=_CreateParams,
                        prompt=(prompt.kind, Field(description=prompt.description)), **_API_ONLY, **generation)


VideoCreateParams = create_params_model()


class VideoError(BaseModel):
    code: str
    message: str


class ImageInfo(BaseModel):
    """The job's input_reference image, as it was uploaded (the model resizes it to the video)."""

    format: str
    width: int
    height: int
    bytes: int


class _Extras(BaseModel):
    stage: str = Field(description="queued, encoding, denoising, decoding, writing, done, failed, cancelled")
    step: int = 0
    total_steps: int = 0
    queue_position: Optional[int] = Field(None, description="Jobs ahead of this one; null once it runs.")
    input_reference: Optional[ImageInfo] = Field(None, description="The image the video starts from (image-to-video).")
    timings: dict[str, float] = Field(
        default_factory=dict, description="Seconds per phase; cfg_branches, the guidance branches run per step (2 with "
                                          "classifier-free guidance, 1 without); with LoRA adapters lora_switch_s (activating "
                                          "the request's set); with a step cache also cache_computed and "
                                          "cache_skipped (transformer evaluations run and skipped).")


def echoed_fields():
    """The generation fields a Video echoes in `pipedit`, under their API names: those of the
    create schema but the prompt (a Video's own field)."""
    return [spec for spec in api_fields() if spec.name != "prompt"]


def extras_model() -> type[_Extras]:
    """A Video's `pipedit` object: progress, and the settings the job runs with (null: the
    model's default, for the fields that have one)."""
    echoed = {spec.api: (Optional[annotation(spec)], Field(None, description=spec.description)) if spec.nullable
              else (annotation(spec), Field(description=spec.description)) for spec in echoed_fields()}
    return create_model("PipeditExtras", __base__=_Extras, **echoed)


PipeditExtras = extras_model()


class Video(BaseModel):
    id: str
    object: Literal["video"] = "video"
    model: str
    status: VideoStatus
    progress: int = Field(ge=0, le=100)
    created_at: int
    completed_at: Optional[int] = None
    expires_at: Optional[int] = None
    prompt: Optional[str] = None
    size: str
    seconds: str
    error: Optional[VideoError] = None
    remixed_from_video_id: Optional[str] = None
    pipedit: PipeditExtras


class VideoList(BaseModel):
    object: Literal["list"] = "list"
    data: list[Video]
    first_id: Optional[str] = None
    last_id: Optional[str] = None
    has_more: bool = False


class VideoDeleted(BaseModel):
    id: str
    object: Literal["video.deleted"] = "video.deleted"
    deleted: bool = True


class ErrorDetail(BaseModel):
    message: str
    type: str
    param: Optional[str] = None
    code: Optional[str] = None


class ErrorBody(BaseModel):
    error: ErrorDetail
