"""Which rank does what: denoise ranks 0..D-1 (the DiT, sequence parallel), decode ranks
D..D+V-1 (the VAE decoder, one request each), and where the text encoders live.

With CFG parallel the denoise ranks form `cfg` SP groups of ulysses*ring consecutive ranks, one
per guidance branch; denoise rank 0 (first group) stays the one that decodes or hands off.

On several nodes (parallel.nodes M) the world splits evenly, in rank order: node n holds ranks
n*K .. n*K+K-1 (K = world_size / M). Ulysses groups (consecutive ranks, an all-to-all per layer)
must each stay inside a node, so the Ring (one neighbour exchange per block, overlapped with
compute) is what crosses the network; decode ranks (the last ones) sit on the last node."""

from __future__ import annotations

from dataclasses import dataclass

from ..config import ParallelConfig
from ..errors import UserInputError


@dataclass(frozen=True)
class WorldLayout:
    ulysses: int = 1
    ring: int = 1
    decode: int = 0
    text_on: str = "dit"  # "dit": denoise rank 0; "vae": the first decode rank
    aco: bool = False  # denoise attention can hand heads to idle decode ranks
    handoff: str = "p2p"
    cfg: int = 1  # SP groups side by side, one per guidance branch (2 with --cfg-parallel)
    split_decode: bool = False  # one video's decode may be split over the decode group (>= 2 decode ranks)
    nodes: int = 1  # nodes the world spans, ranks_per_node consecutive ranks on each

    def __post_init__(self):
        if self.nodes > 1:
            _check_node_split(self)

    @classmethod
    def from_config(cls, parallel: ParallelConfig, preferred_text_on: str) -> "WorldLayout":
        if not isinstance(parallel.decode_ranks, int):
            raise ValueError("resolve decode_ranks 'auto' (pipedit.planner) before building a layout")
        decode = parallel.decode_ranks
        text_on = preferred_text_on if parallel.text_encoder == "auto" else parallel.text_encoder
        return cls(
            ulysses=parallel.ulysses, ring=parallel.ring, decode=decode,
            text_on=text_on if decode else "dit",
            # Not across nodes: the helpers sit on the last node, the attention on the others.
            aco=(decode > 0 and parallel.ring == 1 and parallel.aco != "off" and not parallel.cfg_parallel
                 and parallel.nodes == 1),
            handoff=parallel.handoff, cfg=2 if parallel.cfg_parallel else 1,
            split_decode=decode >= 2 and parallel.split_decode != "off", nodes=parallel.nodes,
        )

    @property
    def denoise(self) -> int:
        return self.cfg * self.ulysses * self.ring

    @property
    def world_size(self) -> int:
        return self.denoise + self.decode

    @property
    def denoise_ranks(self) -> tuple[int, ...]:
        return tuple(range(self.denoise))

    @property
    def decode_ranks(self) -> tuple[int, ...]:
        return tuple(range(self.denoise, self.world_size))

    @property
    def ranks_per_node(self) -> int:
        return self.world_size // self.nodes

    def node_of(self, rank: int) -> int:
        """The node (0 .. nodes-1) that holds `rank`."""
        return rank // self.ranks_per_node

    def ulysses_groups(self) -> list[tuple[int, ...]]:
        """Every Ulysses group's ranks (see pipedit.distributed.context: consecutive runs of
        `ulysses` ranks in each CFG branch's SP group)."""
        return [tuple(range(start, start + self.ulysses)) for start in range(0, self.denoise, self.ulysses)]

    @property
    def text_rank(self) -> int:
        return self.denoise if self.text_on == "vae" else 0

    def parts(self, rank: int) -> set[str]:
        """Model parts a rank loads: decode ranks never load the DiT, denoise ranks never the VAE
        (unless there are no decode ranks: then denoise rank 0 decodes)."""
        parts = {"vae"} if rank >= self.denoise else {"dit"}
        if self.decode == 0 and rank == 0:
            parts.add("vae")
        if rank == self.text_rank:
            parts.add("text")
        return parts


def _check_node_split(layout: WorldLayout) -> None:
    """Refuses a layout whose ranks cannot split over `nodes` the way the network needs."""
    world, nodes = layout.world_size, layout.nodes
    shape = (f"{'2 CFG branches x ' if layout.cfg > 1 else ''}ulysses {layout.ulysses} x ring {layout.ring}"
             f"{f' + {layout.decode} decode rank(s)' if layout.decode else ''} = {world} ranks")
    if world % nodes:
        raise UserInputError(f"{shape} do not split evenly over {nodes} nodes: give a rank count that is a "
                             f"multiple of --nodes")
    per_node = world // nodes
    crossing = [group for group in layout.ulysses_groups() if layout.node_of(group[0]) != layout.node_of(group[-1])]
    if crossing:
        raise UserInputError(
            f"{shape} on {nodes} nodes put {per_node} ranks on each, so Ulysses group {list(crossing[0])} would "
            f"cross nodes (its all-to-all runs every layer); ranks per node must be a multiple of --ulysses: "
            f"use a smaller --ulysses and a larger --ring (Ring crosses nodes), or fewer --nodes")
    if layout.aco:
        raise UserInputError(f"{shape}: Aco cannot span {nodes} nodes (its helpers, the decode ranks, sit on the "
                             f"last node and Q/K/V would cross the network on every attention call)")
    if layout.decode > per_node:
        raise UserInputError(f"{shape}: the {layout.decode} decode ranks sit on the last node, which holds "
                             f"{per_node} ranks; use at most {per_node} decode ranks or fewer --nodes")
