"""Where a model's sound is decoded (DeDiVAE): beside the frames, on a second decode rank.

A model that makes sound (capabilities.has_sound) decodes it from the same final latents as the
frames (its adapter's decode_sound). Where a second decode rank is free when a request's latents
are handed off, that rank decodes the sound while the first decodes the frames: rank 0 hands the
latents to both, and the sound joins the frames' VideoResult when both are collected. With one
free decode rank (or none, or a model without sound) the frames' rank decodes the sound after the
frames. A split decode (every decode rank shares the frames) has its last decode rank decode the
sound once its share is sent (DecodeWorker.decode_split).

The sound's rank is freed with the frames' rank (one in-flight decode): it serves no other decode
meanwhile, so a decode that outlasts its sound keeps it idle for the difference.
"""

from __future__ import annotations

from collections import deque


def sound_rank(free: deque, sound: bool, split: tuple[int, ...]) -> tuple[int, ...]:
    """(the decode rank taken from `free` to decode the sound,), or () where there is none to take."""
    return (free.popleft(),) if sound and not split and free else ()


def submit(ex, request, rank: int, latents, beside: tuple[int, ...]):
    """(the frames' decode call on `rank`, the sound's on beside[0] or None): the frames' rank
    decodes the sound too where `beside` is empty."""
    if not beside:
        return ex.submit_rank(rank, "decode", request, latents), None
    return (ex.submit_rank(rank, "decode", request, latents, False),
            ex.submit_rank(beside[0], "decode_sound", request, latents))


def attach(ex, result, sound_call, timeout: float) -> None:
    """Puts the sound decoded beside the frames (`sound_call`'s result) into their `result`;
    nothing where the frames' rank decoded it (`sound_call` None)."""
    if sound_call is not None:
        result.sound = ex.get(sound_call, timeout)
