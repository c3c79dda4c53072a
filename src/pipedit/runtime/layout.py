"""Which rank does what: denoise ranks 0..D-1 (the DiT, sequence parallel), decode ranks
D..D+V-1 (the VAE decoder, one request each), and where the text encoders live.

With CFG parallel the denoise ranks form `cfg` SP groups of ulysses*ring consecutive ranks, one
per guidance branch; denoise rank 0 (first group) stays the one that decodes or hands off."""

from __future__ import annotations

from dataclasses import dataclass

from ..config import ParallelConfig


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

    @classmethod
    def from_config(cls, parallel: ParallelConfig, preferred_text_on: str) -> "WorldLayout":
        if not isinstance(parallel.decode_ranks, int):
            raise ValueError("resolve decode_ranks 'auto' (pipedit.planner) before building a layout")
        decode = parallel.decode_ranks
        text_on = preferred_text_on if parallel.text_encoder == "auto" else parallel.text_encoder
        return cls(
            ulysses=parallel.ulysses, ring=parallel.ring, decode=decode,
            text_on=text_on if decode else "dit",
            aco=decode > 0 and parallel.ring == 1 and parallel.aco != "off" and not parallel.cfg_parallel,
            handoff=parallel.handoff, cfg=2 if parallel.cfg_parallel else 1,
            split_decode=decode >= 2 and parallel.split_decode != "off",
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
