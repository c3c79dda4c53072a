"""The planner's prediction of one VAE decode, for the decode deadline (runtime.deadlines).

On a GPU with a datasheet profile the prediction is that profile's; on a GPU without one (e.g. an
A100) it is the generic profile's (planner.auto.GENERIC_PROFILE, the slowest at convolutions), so
that the first decode is never bounded below what a slow GPU needs. CPU ranks get none: the
configured floor bounds their decodes."""

from __future__ import annotations

from ..adapter import VideoShape
from ..planner.auto import GENERIC_PROFILE
from ..planner.cost import Shape, decode_seconds
from ..planner.hardware import PROFILES, make_node, profile_for_gpu_name
from ..planner.models import ModelSpec
from .deadlines import DecodePrediction


def decode_predictor(model: ModelSpec, gpu_name: str | None) -> DecodePrediction | None:
    """Seconds for one decode of a shape on the GPU named `gpu_name` (None: CPU ranks)."""
    if gpu_name is None:
        return None
    node = make_node(PROFILES[profile_for_gpu_name(gpu_name) or GENERIC_PROFILE], 1, "pcie")

    def predict(shape: VideoShape) -> float:
        size = Shape(shape.height, shape.width, shape.num_frames)
        # Whether the decode tiles depends on free memory at the time: bound by the slower mode.
        return max(decode_seconds(model, size, node, tiled) for tiled in (False, True))

    return predict
