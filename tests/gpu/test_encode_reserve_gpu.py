"""The text rank among the decode ranks (DeDiVAE): an encode's peak, measured at group start, kept
out of the decode budget, and an encode beside a decode needing no more than the two peaks.

What it measures, and why a CPU cannot: on a CPU decodes never depend on memory, and peaks of
CUDA's caching allocator (on two streams at once) exist only on a GPU. Here the measured encode
peak lowers free_decode_bytes by itself, and a decode with an encode running beside it on the
encoding stream (as the decode actor's second thread runs it) peaks at most at the decode's own
peak plus that reserve: the budget's assumption."""

import threading

import pytest
import torch

from pipedit.adapter import load_adapter
from pipedit.request import VideoRequest
from pipedit.runtime.decode_worker import device_peak_bytes
from pipedit.runtime.rank import encode_request

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

REQUEST = VideoRequest("a red fox running through fresh snow", height=64, width=96, num_frames=17, steps=2)


def _encoding(stream: torch.cuda.Stream, run) -> threading.Thread:
    """A started thread that runs run() on `stream`, as the decode actor's second thread encodes. The
    thread's first matmul on that stream takes a cuBLAS workspace (per handle and stream; 32 MiB on
    Hopper): an encode's measured peak includes it, as the worker's reserve does (its first encode on
    the encoding stream)."""

    def target():
        with torch.cuda.stream(stream):
            run()
        stream.synchronize()

    thread = threading.Thread(target=target)
    thread.start()
    return thread


def test_the_encode_reserve_covers_an_encode_beside_a_decode(demo_checkpoint):
    device = torch.device("cuda")
    adapter = load_adapter(demo_checkpoint, parts={"text", "vae"}, device=device, dtype=torch.bfloat16)
    stream = torch.cuda.Stream(device)
    stream.wait_stream(torch.cuda.default_stream(device))  # the weights were written on the default stream

    def encode_to_host():
        return {k: v.cpu() for k, v in encode_request(adapter, REQUEST).items()}

    encode = device_peak_bytes(device, lambda: _encoding(stream, encode_to_host).join())
    assert encode > 0
    free = adapter.free_decode_bytes()
    adapter.reserve_for_encode(encode)
    assert abs(free - adapter.free_decode_bytes() - encode) < 2 ** 21  # free memory is read twice, 2 MiB apart at most
    latents = torch.randn(adapter.latent_shape(REQUEST.shape), device=device, dtype=torch.bfloat16)
    decode = device_peak_bytes(device, lambda: adapter.decode(latents))

    def both():
        thread = _encoding(stream, lambda: encode_request(adapter, REQUEST))
        adapter.decode(latents)
        thread.join()

    together = device_peak_bytes(device, both)
    print(f"encode {encode / 2 ** 20:.1f} MiB, decode {decode / 2 ** 20:.1f} MiB, together {together / 2 ** 20:.1f} MiB")
    assert together <= (decode + encode) * 1.05
