"""The planner: a cost model of the DiT, VAE and text encoders from their configs, hardware
profiles, a discrete-event simulation of the schedules, and the search behind `pipedit plan`.

It imports configs and model configs, never the runtime: measurements are handed to it.
"""

from .rules import balance_decode_ranks, split_denoise_ranks

__all__ = ["balance_decode_ranks", "split_denoise_ranks"]
