"""Discrete-event simulation of K consecutive requests (all submitted at t = 0) under one schedule.

- sequential: each request encodes, denoises and decodes on the same ranks before the next one
  starts; with CPU offload (the paper's baseline) every phase first moves its module onto the
  GPUs and the previous one back to host memory.
- DeDiVAE: the denoise group runs requests back to back; each finished latent goes point to point
  to a FIFO decode queue served by N decode ranks, one video per rank.
- split decode (split_decode_s set): a latent waits for a free decode rank; if every decode rank
  is idle then, all of them decode it at once in split_decode_s (the scheduler's choice,
  pipedit.runtime.request_pipeline); otherwise the free rank takes it alone.
- Aco: a step whose start finds no decode running or queued uses the decode ranks for attention
  heads (its faster step time); otherwise the denoise group computes attention alone.
Text encoding runs before each request's denoising when it lives with the DiT; beside the VAE
the prompts are encoded ahead of time (only the first request waits for it). A two-expert model
with its idle expert in host memory spends swap_s per request swapping experts on the denoise
ranks (nothing else overlaps it).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass


@dataclass(frozen=True)
class Timings:
    """Per-request phase times of one configuration, in seconds."""

    steps: int
    step_s: float
    decode_s: float
    text_s: float = 0.0
    step_aco_s: float | None = None  # None: Aco off
    handoff_s: float = 0.0
    decode_ranks: int = 0  # 0: sequential on the denoise ranks
    text_on_vae: bool = False
    offload_s: tuple[float, float, float] = (0.0, 0.0, 0.0)  # text encoder, DiT, VAE: in + out
    split_decode_s: float | None = None  # one decode over all decode ranks; None: never split
    swap_s: float = 0.0  # idle expert offloaded: expert swaps per request on the denoise ranks


@dataclass(frozen=True)
class Outcome:
    batch_s: float  # all K videos done
    done_s: tuple[float, ...]  # each request's completion time, in submission order
    aco_steps: int  # steps that ran with Aco

    @property
    def mean_latency_s(self) -> float:
        return sum(self.done_s) / len(self.done_s)


def simulate(t: Timings, prompts: int) -> Outcome:
    if prompts < 1:
        raise ValueError("prompts must be at least 1")
    if t.decode_ranks == 0:
        return _sequential(t, prompts)
    return _pipelined(t, prompts)


def _sequential(t: Timings, prompts: int) -> Outcome:
    per_request = t.text_s + t.steps * t.step_s + t.swap_s + t.decode_s + sum(t.offload_s)
    done = tuple(per_request * (k + 1) for k in range(prompts))
    return Outcome(done[-1], done, 0)


def _pipelined(t: Timings, prompts: int) -> Outcome:
    clock = 0.0
    servers = [0.0] * t.decode_ranks  # when each decode rank is next free
    heapq.heapify(servers)
    decodes: list[tuple[float, float]] = []  # (latent arrival, decode end)
    done: list[float] = []
    aco_steps = 0
    for k in range(prompts):
        if not t.text_on_vae or k == 0:
            clock += t.text_s
        for _ in range(t.steps):
            idle = all(not (arrival <= clock < end) for arrival, end in decodes)
            if t.step_aco_s is not None and idle:
                clock += t.step_aco_s
                aco_steps += 1
            else:
                clock += t.step_s
        clock += t.swap_s + t.handoff_s
        start = max(clock, servers[0])  # the scheduler waits for a free decode rank
        if t.split_decode_s is not None and max(servers) <= start:  # then every rank is idle
            end = start + t.split_decode_s
            servers = [end] * t.decode_ranks
        else:
            heapq.heappop(servers)
            end = start + t.decode_s
            heapq.heappush(servers, end)
        decodes.append((clock, end))
        done.append(end)
    return Outcome(max(done), tuple(done), aco_steps)
