"""Runs of the real denoise (and Aco helper) worker code with a step cache, on one in-process
rank or on spawned gloo ranks (a module, so that spawn can import it)."""

from __future__ import annotations

import functools

import torch

from pipedit.adapter import load_adapter
from pipedit.config import EngineConfig, ModelConfig, ParallelConfig
from pipedit.request import VideoRequest
from pipedit.runtime.layout import WorldLayout

HUNYUAN = {"prompt": "a lighthouse at dusk", "height": 80, "width": 112, "num_frames": 9, "steps": 6, "seed": 5}
SMALL_HUNYUAN = {**HUNYUAN, "height": 48, "width": 48, "num_frames": 5, "steps": 3}
OSP = {"prompt": "a red fox in the snow", "height": 64, "width": 64, "num_frames": 9, "steps": 6, "seed": 3,
       "guidance_scale": 4.5}
UNGUIDED_OSP = {**OSP, "guidance_scale": 0.5}  # no classifier-free guidance: the conditional pass alone


def _config(model_path: str, parallel: dict) -> EngineConfig:
    return EngineConfig(model=ModelConfig(path=model_path), parallel=ParallelConfig(**parallel))


@functools.lru_cache(maxsize=4)
def _encoded(model_path: str, prompt: str, guidance_scale: float) -> dict[str, torch.Tensor]:
    """As the text rank encodes it (no negative prompt for a request without guidance)."""
    from pipedit.runtime.rank import encode_request

    return encode_request(load_adapter(model_path, parts={"text"}), VideoRequest(prompt, guidance_scale=guidance_scale))


def _condition(model_path: str, request: VideoRequest) -> dict[str, torch.Tensor]:
    return dict(_encoded(model_path, request.prompt, request.guidance_scale))


def run_denoise(rank: int, world_size: int, model_path: str, parallel: dict, request: dict, cache: str) -> dict:
    """One request on this rank: final latents and the cache's record per step (computed,
    agreed distances, and this rank's local sums before the agreement); a decode rank serves
    Aco heads for every step and records the calls it served. With decode ranks, every step
    runs with Aco on (an Aco layout)."""
    from pipedit.runtime.decode_worker import DecodeWorker
    from pipedit.runtime.worker import DenoiseWorker

    config = _config(model_path, parallel)
    layout = WorldLayout.from_config(config.parallel, "dit")
    req = VideoRequest(**request, cache=cache)
    if rank >= layout.denoise:
        return _serve_helper(DecodeWorker(config, layout, rank), model_path, req)
    worker = DenoiseWorker(config, layout, rank)
    worker._init_process_group = lambda rendezvous: None  # the spawner started the group
    worker.setup(model_path)
    local, agreement = [], worker.cache.agreement

    def recording(sums):
        local.append(sums.tolist())
        return agreement(sums)

    worker.cache.agreement = recording  # the hook is made at the first cached request, with this
    total = worker.begin(req, _condition(model_path, req))
    for _ in range(total):
        worker.step(aco=layout.aco)
    state = worker.job.cache
    result = {"latents": worker.job.latents.clone(), "report": worker.cache_report(), "local_sums": local,
              "cfg_branches": worker.job_report()["cfg_branches"],
              "computed": list(state.computed) if state else None,
              "distances": list(state.distances) if state else None}
    return result  # no finish: the decode side of the handoff is not under test


def _serve_helper(worker, model_path: str, request: VideoRequest) -> dict:
    """An Aco helper: one aco_serve per step, as the scheduler drives it; records the calls served."""
    from pipedit.runtime import decode_worker

    served, original = [], decode_worker.serve_aco_calls

    def recording(*args, **kwargs):
        served.append(original(*args, **kwargs))
        return served[-1]

    decode_worker.serve_aco_calls = recording
    worker._init_process_group = lambda rendezvous: None
    worker.setup(model_path)
    probe = load_adapter(model_path, parts={"dit"})
    calls = len(probe.cache_blocks().blocks)  # the demo models route one attention call per block
    attention = probe.attention_shape(request.shape)
    from pipedit.attention.aco import AcoShape

    shape = AcoShape(attention.seq_len, 0, attention.head_dim, probe.transformer.dtype)
    for _ in range(request.steps):
        worker.aco_serve(shape)
    return {"served": served, "calls": calls}


# (name, model key, parallel settings, cache): the layouts of a 2-rank world the agreement test
# runs one after another in the same spawned processes. The last one is no step-cache case: CFG
# parallel on a request without guidance, in the same world to spare spawning another.
LAYOUTS = (
    ("ulysses2", "hunyuan", {"ulysses": 2}, "fbcache:0.4"),
    ("cfg_parallel", "osp", {"cfg_parallel": True}, "fbcache:0.45"),
    ("aco", "hunyuan", {"decode_ranks": 1, "aco": "on"}, "teacache:0.1"),
    ("cfg_unguided", "osp", {"cfg_parallel": True}, "none"),
)


def layout_request(name: str, model: str) -> dict:
    return UNGUIDED_OSP if name == "cfg_unguided" else {"hunyuan": HUNYUAN, "osp": OSP}[model]


def agreement_world(rank: int, world_size: int, paths: dict) -> dict:
    return {name: run_denoise(rank, world_size, paths[model], parallel, layout_request(name, model), cache)
            for name, model, parallel, cache in LAYOUTS}


def run_single(model_path: str, runs: list[tuple[dict, str | None]], default: str = "none") -> list[dict]:
    """Several (request, cache) runs, one after another, on one in-process denoise worker (one
    rank, as the engine's in-process executor runs it); `default` is the engine's generation.cache."""
    from dataclasses import replace

    from pipedit.runtime.worker import DenoiseWorker

    config = _config(model_path, {})
    config = replace(config, generation=replace(config.generation, cache=default))
    worker = DenoiseWorker(config, WorldLayout.from_config(config.parallel, "dit"), 0)
    worker.setup(model_path)
    results = []
    for request, cache in runs:
        req = VideoRequest(**request, cache=cache)
        for _ in range(worker.begin(req, _condition(model_path, req))):
            worker.step()
        state = worker.job.cache
        results.append({"latents": worker.job.latents.clone(), "report": worker.cache_report(),
                        "computed": list(state.computed) if state else None})
    return results
