"""Every configuration pipedit can run on a node, each predicted by the cost model and the
schedule simulation, ranked by batch time (per-request latency breaks ties).

Two-expert models (Wan2.2 A14B) are planned with both experts resident and with the idle one in
host memory (`model.idle_expert: offload`): then each request swaps experts twice on every
denoise rank (at the boundary, and back before the next request's first step). A swap copies the
wanted expert in from its memory-mapped checkpoint files; the idle one is only re-pointed at its
mapping, nothing is copied out (pipedit.mapped_weights): one host-to-device copy per swap."""

from __future__ import annotations

from dataclasses import dataclass

from .cost import (Layout, Shape, decode_seconds, handoff_seconds, physical_limit_seconds, step_seconds,
                   text_seconds)
from .hardware import Node
from .memory import (IDLE_EXPERT, RANK_HOST_BYTES, decode_rank_bytes, denoise_rank_bytes, expert_file_bytes,
                     idle_expert_host_bytes)
from .models import ModelSpec
from .simulate import Timings, simulate
from .split_decode import split_seconds, units

SWAPS_PER_REQUEST = 2
# A swap's copy is pageable (mapped file pages, not pinned memory): at most this rate per GPU,
# whatever the link. A full-size A14B expert (26.6 GiB bf16) took 3.8 to 5.1 s to bring back on
# one H100 (docs/gpu-nodes.md): about 6.4 GB/s at the middle of that range. Measured on one node,
# assumed for every GPU kind; with many ranks the node's host copy rate binds first.
SWAP_COPY_RATE = 26.6 * 1024 ** 3 / 4.45


@dataclass(frozen=True)
class Candidate:
    decode_ranks: int
    ulysses: int
    ring: int
    chunk: int | None  # PipeSP heads per chunk; None: off (synchronous Ulysses)
    aco: bool
    tiled: bool
    offload: bool = False  # the paper's baseline: modules moved to and from host memory
    split_decode: bool = True  # an idle decode group splits one video (parallel.split_decode auto)
    idle_expert: str = "resident"  # two-expert models: "resident" or "offload" (model.idle_expert)

    def describe(self) -> str:
        chunk = "off" if self.chunk is None else str(self.chunk)
        return (f"decode {self.decode_ranks} | u{self.ulysses} x r{self.ring} | pipesp {chunk} | "
                f"aco {'on' if self.aco else 'off'} | tiling {'on' if self.tiled else 'off'}"
                f"{' | idle expert ' + self.idle_expert if self.idle_expert != 'resident' else ''}")


@dataclass(frozen=True)
class Prediction:
    candidate: Candidate
    latency_s: float  # one request alone, end to end
    batch_s: float  # K consecutive requests
    peak_bytes: float  # the fullest GPU
    fits: bool
    timings: Timings
    host_bytes: float = 0.0  # the node's ranks together, serving (host_bytes)


@dataclass(frozen=True)
class Problem:
    model: ModelSpec
    node: Node
    shape: Shape
    steps: int
    prompts: int = 1

    def limit_s(self) -> float:
        return physical_limit_seconds(self.model, self.shape, self.node, self.steps)


def text_on_vae(model: ModelSpec, decode_ranks: int) -> bool:
    """The model's preference (PipeDiT §2): HunyuanVideo's and Wan's text encoders beside the VAE."""
    return decode_ranks > 0 and model.text_beside_vae


def swap_seconds(p: Problem, c: Candidate) -> float:
    """Expert swaps of one request on every denoise rank at once (0 with both experts resident)."""
    if p.model.experts < 2 or c.idle_expert == "resident":
        return 0.0
    expert = expert_file_bytes(p.model)  # copied in the files' dtype, cast on the device
    one_copy = max(p.node.offload_s(expert, c.ulysses * c.ring), expert / SWAP_COPY_RATE)
    return SWAPS_PER_REQUEST * one_copy


def timings(p: Problem, c: Candidate) -> Timings:
    m, n, s = p.model, p.node, p.shape
    layout = Layout(c.ulysses, c.ring, c.chunk)
    step = step_seconds(m, s, n, layout)
    aco_step = None
    if c.aco:
        aco_step = step_seconds(m, s, n, Layout(c.ulysses, c.ring, c.chunk, helpers=c.decode_ranks))
    offload = (0.0, 0.0, 0.0)
    if c.offload:
        gpus = c.ulysses * c.ring
        moved = (m.text_params * 2, m.dit_params * m.dit_bytes_per_param, m.vae_params * 2)
        offload = tuple(2 * n.offload_s(size, gpus) for size in moved)  # onto the GPUs and back
    decode = decode_seconds(m, s, n, c.tiled)
    split = None
    if c.split_decode and c.decode_ranks >= 2 and units(m, s, c.tiled) >= 2:
        split = split_seconds(decode, m, s, n, c.tiled, c.decode_ranks)
    return Timings(steps=p.steps, step_s=step, decode_s=decode, split_decode_s=split,
                   text_s=text_seconds(m, n), step_aco_s=aco_step,
                   handoff_s=handoff_seconds(m, s, n) if c.decode_ranks else 0.0,
                   decode_ranks=c.decode_ranks, text_on_vae=text_on_vae(m, c.decode_ranks), offload_s=offload,
                   swap_s=swap_seconds(p, c))


def _rank_bytes(p: Problem, c: Candidate, idle_expert: str) -> tuple[float, float]:
    """(a denoise rank's peak, a decode rank's peak; 0 without decode ranks)."""
    m, s = p.model, p.shape
    on_vae = text_on_vae(m, c.decode_ranks)
    denoise = denoise_rank_bytes(m, s, c.ulysses, c.ring, with_text=not on_vae,
                                 with_vae=c.decode_ranks == 0, tiled=c.tiled, idle_expert=idle_expert)
    split = c.decode_ranks if c.split_decode else 1
    decode = decode_rank_bytes(m, s, on_vae, c.tiled, c.aco, split) if c.decode_ranks else 0.0
    return denoise, decode


def peak_bytes(p: Problem, c: Candidate) -> float:
    m, s = p.model, p.shape
    if c.offload:  # one module at a time on every GPU
        return max(denoise_rank_bytes(m, s, c.ulysses, c.ring, False, False, c.tiled),
                   decode_rank_bytes(m, s, True, c.tiled, False))
    return max(_rank_bytes(p, c, c.idle_expert))


def host_bytes(p: Problem, c: Candidate) -> float:
    """Host memory of every rank of the node together while serving (pipedit.planner.memory)."""
    m = p.model
    denoise = c.ulysses * c.ring
    if p.node.gpu.host_cores:  # CPU ranks: a rank's whole memory is host memory; experts never move there
        rank, decode = _rank_bytes(p, c, "resident")
        return denoise * rank + c.decode_ranks * decode
    total = (denoise + c.decode_ranks) * RANK_HOST_BYTES + idle_expert_host_bytes(m, c.idle_expert)
    if c.offload:  # the paper's baseline: every GPU's rank keeps its own host copy of each module
        total += denoise * (2 * (m.text_params + m.vae_params) + m.dit_params * m.dit_bytes_per_param)
    return total


def predict(p: Problem, c: Candidate) -> Prediction:
    t = timings(p, c)
    peak = peak_bytes(p, c)
    return Prediction(c, simulate(t, 1).batch_s, simulate(t, p.prompts).batch_s, peak,
                      peak <= p.node.gpu.memory, t, host_bytes(p, c))


def _local_heads(heads: int, ulysses: int) -> int:
    return -(-heads // ulysses)


def fits_nodes(denoise: int, decode: int, ulysses: int, per_node: int) -> bool:
    """Whether the runtime can place this layout over nodes of `per_node` ranks (pipedit.runtime.layout:
    every Ulysses group inside one node, the decode ranks on the last node)."""
    inside = all(start // per_node == (start + ulysses - 1) // per_node for start in range(0, denoise, ulysses))
    return inside and decode <= per_node


def candidates(model: ModelSpec, gpus: int, idle_experts: tuple[str, ...] = IDLE_EXPERT,
               per_node: int | None = None) -> list[Candidate]:
    """`idle_experts`: the choices tried for a two-expert model (one-expert models: resident).
    `per_node`: GPUs per node when `gpus` span several nodes (only layouts that fit them)."""
    found = []
    experts = idle_experts if model.experts > 1 else ("resident",)
    per_node = per_node or gpus
    for decode in range(0, gpus):
        denoise = gpus - decode
        for ulysses in (u for u in range(1, min(denoise, model.heads) + 1)
                        if denoise % u == 0 and fits_nodes(denoise, decode, u, per_node)):
            ring = denoise // ulysses
            chunks = [None] + ([c for c in (1, 2, 4, 8) if c < _local_heads(model.heads, ulysses)]
                               if ulysses > 1 else [])
            for chunk in chunks:
                # Aco on one node only: across nodes its helpers (the last node's) would receive
                # Q/K/V over the network on every attention call.
                for aco in (False, True) if decode and ring == 1 and per_node >= gpus else (False,):
                    for tiled in (False, True) if model.vae_tiling else (False,):
                        found += [Candidate(decode, ulysses, ring, chunk, aco, tiled, idle_expert=idle)
                                  for idle in experts]
    return found


def rank(p: Problem, cands: list[Candidate] | None = None) -> tuple[list[Prediction], list[Prediction]]:
    """(fitting configurations best first, configurations that do not fit in GPU memory)."""
    predictions = [predict(p, c) for c in (cands if cands is not None else
                                          candidates(p.model, p.node.gpus, per_node=p.node.gpus_per_node))]
    fitting = sorted((x for x in predictions if x.fits), key=lambda x: (x.batch_s, x.latency_s, x.peak_bytes, x.candidate.tiled))
    too_big = sorted((x for x in predictions if not x.fits), key=lambda x: x.batch_s)
    return fitting, too_big


def best_decode_ranks(p: Problem) -> int:
    """Decode ranks of the best fitting configuration (what `decode_ranks: auto` may use)."""
    fitting, _ = rank(p)
    if not fitting:
        return max(0, min(1, p.node.gpus - 1))
    return fitting[0].candidate.decode_ranks
