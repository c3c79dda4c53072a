"""Pydantic models in the shape of OpenAI's video API (field names and types as the official
SDK reads them), plus pipedit's diffusion settings. pipedit's own output fields live in ONE
nested object, `pipedit`, so that OpenAI clients see exactly the fields they know."""

from __future__ import annotations

from typing import Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field

VideoStatus = Literal["queued", "in_progress", "completed", "failed", "cancelled"]
FINAL_STATUSES = frozenset({"completed", "failed", "cancelled"})


class VideoCreateParams(BaseModel):
    """POST /v1/videos. Fields left out take the model's defaults (see `model_fields_set`)."""

    model_config = ConfigDict(extra="forbid")

    prompt: str = Field(description="What the video shows.")
    model: Optional[str] = Field(None, description="The served model's name; defaults to it.")
    size: Optional[str] = Field(None, description="WIDTHxHEIGHT in pixels, e.g. 128x128.")
    seconds: Optional[Union[str, float]] = Field(
        None, description="Clip length; sets num_frames from fps when num_frames is not given.")
    num_frames: Optional[int] = Field(None, description="Frame count, 4k+1 for HunyuanVideo.")
    fps: Optional[int] = Field(None, description="Frames per second of the mp4.")
    num_inference_steps: Optional[int] = Field(None, description="Denoising steps.")
    guidance_scale: Optional[float] = Field(None, description="Classifier-free / embedded guidance.")
    guidance_scale_2: Optional[float] = Field(None, description="Two-expert models (Wan2.2 A14B): the low-noise "
                                                                "expert's guidance scale; defaults to guidance_scale.")
    negative_prompt: Optional[str] = Field(
        None, description="What to steer away from, for models with classifier-free guidance (Wan, OpenSoraPlan); "
                          "HunyuanVideo: must be empty.")
    seed: Optional[int] = Field(None, description="Seed of the initial noise.")
    cache: Optional[str] = Field(None, description="Step caching: none, fbcache:T or teacache:T; defaults to the "
                                                   "server's generation.cache.")

    def given(self) -> dict:
        """Only the fields the client sent (explicit nulls count as not sent)."""
        return {name: getattr(self, name) for name in self.model_fields_set if getattr(self, name) is not None}


class VideoError(BaseModel):
    code: str
    message: str


class ImageInfo(BaseModel):
    """The job's input_reference image, as it was uploaded (the model resizes it to the video)."""

    format: str
    width: int
    height: int
    bytes: int


class PipeditExtras(BaseModel):
    stage: str = Field(description="queued, encoding, denoising, decoding, writing, done, failed, cancelled")
    step: int = 0
    total_steps: int = 0
    queue_position: Optional[int] = Field(None, description="Jobs ahead of this one; null once it runs.")
    seed: int
    num_frames: int
    fps: int
    num_inference_steps: int
    guidance_scale: float
    cache: Optional[str] = Field(None, description="The step cache the job runs with (none, fbcache:T, teacache:T).")
    negative_prompt: Optional[str] = Field(None, description="The negative prompt given; null: the model's default.")
    guidance_scale_2: Optional[float] = Field(None, description="The low-noise expert's; null: guidance_scale.")
    input_reference: Optional[ImageInfo] = Field(None, description="The image the video starts from (image-to-video).")
    timings: dict[str, float] = Field(
        default_factory=dict, description="Seconds per phase; with a step cache also cache_computed and cache_skipped "
                                          "(transformer evaluations run and skipped).")


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
