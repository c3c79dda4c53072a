"""What the engine's `decode_ranks: auto` asks the planner when no calibration measurement is
available: the decode-rank count of the best predicted configuration for the model's configs
on a node of known GPUs."""

from __future__ import annotations

from dataclasses import dataclass

from .cost import Shape
from .hardware import node, profile_for_gpu_name
from .models import ModelSpec, from_checkpoint
from .memory import IDLE_EXPERT
from .search import Problem, candidates, rank

# Consecutive prompts the choice optimises for: the paper's protocol (DeDiVAE pays off in queues).
AUTO_PROMPTS = 10
# GPUs without a datasheet profile (an A100, an L40S) are planned with the A6000's (Ampere, as the
# A100; the slowest profile at convolutions, so it also bounds their first VAE decode from below,
# see pipedit.runtime.decode_prediction): the decode-rank count follows the ratio of decode to
# denoise time, which the profiles' efficiency factors set more than their peak rates. Measuring instead would
# run a whole request of the configured shape on one GPU holding every model part (DiT, both text
# encoders, VAE): out of memory at 544p on 80 GB.
GENERIC_PROFILE = "a6000"


@dataclass(frozen=True)
class AutoChoice:
    decode_ranks: int
    batch_s: float
    gpu: str


def predict_decode_ranks(model_path: str, family: str, gpu_name: str, ranks: int, height: int, width: int,
                         frames: int, steps: int, idle_expert: str | None = None) -> AutoChoice | None:
    """None with fewer than 2 ranks or when no configuration with decode ranks fits; idle_expert:
    the engine's model.idle_expert (two-expert models: the planner keeps to it)."""
    if ranks < 2:
        return None
    key = profile_for_gpu_name(gpu_name)
    label = key or f"{GENERIC_PROFILE} (generic: no profile for {gpu_name})"
    best = best_with_decode_ranks(from_checkpoint(model_path, family), key or GENERIC_PROFILE, ranks,
                                  Shape(height, width, frames), steps, idle_expert)
    return None if best is None else AutoChoice(best.candidate.decode_ranks, best.batch_s, label)


def best_with_decode_ranks(model: ModelSpec, gpu: str, ranks: int, shape: Shape, steps: int,
                           idle_expert: str | None = None):
    """The fastest fitting configuration with decode ranks on `ranks` GPUs of profile `gpu` (their
    own links: NVLink on H100/H200), for AUTO_PROMPTS prompts; None if none fits. idle_expert: a
    two-expert model's model.idle_expert (None: either)."""
    problem = Problem(model, node(gpu, ranks, "nvlink" if gpu in ("h100", "h200") else "pcie"), shape, steps,
                      AUTO_PROMPTS)
    fitting, _ = rank(problem, candidates(model, ranks, (idle_expert,) if idle_expert else IDLE_EXPERT))
    return next((x for x in fitting if x.candidate.decode_ranks > 0), None)
