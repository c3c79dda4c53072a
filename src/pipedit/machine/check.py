"""`pipedit check-node`: does every parallel path of this node give the single-device result?

Runs the same prompts on one rank (the reference), then under each parallel configuration that
fits the node (Ulysses 2/4/8, ring 2, USP, a PipeSP chunk, DeDiVAE, DeDiVAE + Aco), and compares
the final latents with the reference. A configuration passes when
max|latents - reference| / max|reference| <= tolerance. Default tolerances: 1e-4 in float32 (the
parallel paths reorder float sums, nothing more); 3e-2 in bfloat16/float16, where GEMMs of
other shapes round differently at every step. Prints one line per configuration and per-step
times; the exit code is 1 if any configuration fails or mismatches.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

import torch

from ..config import EngineConfig, ParallelConfig
from ..request import RequestFailure, VideoRequest

PROMPTS = ("a red fox running through fresh snow", "a lighthouse at dusk, waves breaking on rocks")
TOLERANCE = {"float32": 1e-4, "half": 3e-2}


@dataclass(frozen=True)
class Case:
    name: str
    parallel: dict = field(default_factory=dict)

    @property
    def ranks(self) -> int:
        p = ParallelConfig(**self.parallel)
        return p.denoise_ranks + p.decode_ranks


@dataclass
class Outcome:
    case: Case
    error: float | None  # relative max abs difference of the latents (worst prompt); None: failed
    step_s: float | None
    message: str = ""


def node_cases(ranks: int, heads: int) -> list[Case]:
    """The configurations a node of `ranks` ranks can run, for a model with `heads` heads."""
    cases = [Case(f"ulysses {u}", dict(ulysses=u, pipesp_chunk="off")) for u in (2, 4, 8) if u <= min(ranks, heads)]
    if ranks >= 2:
        cases.append(Case("ring 2", dict(ring=2)))
    if ranks >= 4 and ranks // 2 <= heads:
        cases.append(Case(f"usp {ranks // 2}x2", dict(ulysses=ranks // 2, ring=2, pipesp_chunk="off")))
    widest = max((u for u in range(2, min(ranks, heads) + 1)), default=None)
    if widest:
        cases.append(Case(f"ulysses {widest} pipesp chunk 1", dict(ulysses=widest, pipesp_chunk=1)))
        decode_ulysses = min(ranks - 1, heads)
        cases.append(Case(f"dedivae {decode_ulysses}+1", dict(ulysses=decode_ulysses, decode_ranks=1, aco="off")))
        cases.append(Case(f"dedivae {decode_ulysses}+1 aco", dict(ulysses=decode_ulysses, decode_ranks=1, aco="on")))
    return cases


def _requests(config: EngineConfig) -> list[VideoRequest]:
    g = config.generation
    return [VideoRequest(p, height=g.height, width=g.width, num_frames=g.num_frames, steps=g.steps,
                         guidance_scale=g.guidance_scale, seed=g.seed + i) for i, p in enumerate(PROMPTS)]


def _run(config: EngineConfig) -> tuple[dict[str, torch.Tensor], float]:
    """Final latents per prompt and seconds per denoising step (the fastest prompt: warm)."""
    from ..runtime.engine import Engine

    requests = _requests(config)
    prompt_of = {r.request_id: r.prompt for r in requests}
    with Engine(config) as engine:
        outcomes = list(engine.generate_many(requests))
    failed = [o for o in outcomes if isinstance(o, RequestFailure)]
    if failed:
        raise RuntimeError(failed[0].message)
    steps = [o.timings["denoise_s"] / config.generation.steps for o in outcomes]
    return {prompt_of[o.request_id]: o.latents for o in outcomes}, min(steps)


class ReferenceRank:
    """The one-rank reference in its own rank process (a Ray actor with one GPU on GPU nodes):
    the driver must hold no model (a reference on cuda:0 in the driver would leave ~43 GB of a
    13B model there, where the next configuration's rank 0 needs the whole GPU). Killing the actor
    frees everything it loaded."""

    def run(self, config: EngineConfig) -> tuple[dict[str, torch.Tensor], float, int]:
        import os

        latents, step_s = _run(config)
        return latents, step_s, os.getpid()


def run_reference(config: EngineConfig) -> tuple[dict[str, torch.Tensor], float, int]:
    """(final latents per prompt, seconds per step, the pid that ran them) of the one-rank run."""
    import ray

    use_gpu = config.model.device_type() == "cuda"
    actor = ray.remote(num_cpus=1, num_gpus=1 if use_gpu else 0)(ReferenceRank).options(
        runtime_env={"env_vars": {"TOKENIZERS_PARALLELISM": "false"}}).remote()
    try:
        return ray.get(actor.run.remote(config))
    finally:
        ray.kill(actor)


def _relative_error(got: dict, reference: dict) -> float:
    return max(((got[p] - ref).abs().max() / ref.abs().max().clamp_min(1e-12)).item() for p, ref in reference.items())


def default_tolerance(config: EngineConfig) -> float:
    dtype = config.model.torch_dtype()
    return TOLERANCE["float32"] if dtype in (None, torch.float32) else TOLERANCE["half"]


def check_node(config: EngineConfig, cases: list[Case], tolerance: float, report=print) -> list[Outcome]:
    """Runs the reference, then every case; reports a line per case as it finishes."""
    single = replace(config, parallel=ParallelConfig(pipesp_chunk="off"))
    start = time.perf_counter()
    reference, reference_step, _ = run_reference(single)
    report(f"reference: 1 rank, {reference_step * 1e3:.1f} ms/step ({time.perf_counter() - start:.0f} s)")
    outcomes = []
    for case in cases:
        try:
            latents, step_s = _run(replace(config, parallel=ParallelConfig(**case.parallel)))
            outcome = Outcome(case, _relative_error(latents, reference), step_s)
        except Exception as error:  # noqa: BLE001 - one configuration failing must not hide the rest
            outcome = Outcome(case, None, None, f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}")
        outcomes.append(outcome)
        report(format_outcome(outcome, tolerance, reference_step))
    return outcomes


def passed(outcome: Outcome, tolerance: float) -> bool:
    return outcome.error is not None and outcome.error <= tolerance


def format_outcome(outcome: Outcome, tolerance: float, reference_step: float) -> str:
    status = "ok" if passed(outcome, tolerance) else ("FAILED" if outcome.error is None else "MISMATCH")
    if outcome.error is None:
        return f"{outcome.case.name:<28} ranks {outcome.case.ranks}  {status}  {outcome.message}"
    speedup = reference_step / outcome.step_s if outcome.step_s else float("nan")
    return (f"{outcome.case.name:<28} ranks {outcome.case.ranks}  {status:<8} rel. diff {outcome.error:.2e}  "
            f"{outcome.step_s * 1e3:8.1f} ms/step  {speedup:5.2f}x vs 1 rank")
