"""One video decoded by the whole decode group, end to end on 3 spawned gloo ranks (one world for
every case): denoise rank 0 runs the real DenoiseWorker and hands the latents point-to-point to
the lead decode rank, which broadcasts them; both decode ranks (DecodeWorker.decode_split) decode
their share; the lead assembles the video. Its frames are compared with the same latents decoded
on one rank, in the same process, by the adapter's own decode in the same mode.

Tolerances:
- HunyuanVideo: the split runs diffusers' own units (temporal chunks, and spatial tiles when
  tiled) through the same decoder and blends them with the same arithmetic in the same order, so
  the only possible difference is a unit decoded by another process: the same kernels on the same
  CPU, but each process may choose its own thread split. 1e-6 (frames in [0, 1]); measured: 0.
- OpenSoraPlan WFVAE: row bands with a halo (see integrations/opensora_plan/split_decode.py) run
  the decoder's convolutions on smaller tensors, whose CPU kernels may sum in another order: the
  raw decoder output is within 1e-4, as the issue's contract says. The adapter's frames are
  floored to 1/255 levels (the official pipeline's truncation), where a 1e-6 difference can flip
  one level: frames within one level plus 1e-4.
"""

import pytest

from pipedit.distributed.spawn import run_on_gloo_ranks

HUNYUAN_TOLERANCE = 1e-6
WFVAE_TOLERANCE = 1e-4
WFVAE_FRAME_TOLERANCE = 1 / 255 + WFVAE_TOLERANCE


def _workers(rank, model_path, vae_tiling):
    from pipedit.config import EngineConfig, ModelConfig, ParallelConfig
    from pipedit.runtime.decode_worker import DecodeWorker
    from pipedit.runtime.layout import WorldLayout
    from pipedit.runtime.worker import DenoiseWorker

    class Denoise(DenoiseWorker):
        def _init_process_group(self, rendezvous):  # the spawn helper joined the world already
            pass

    class Decode(DecodeWorker):
        def _init_process_group(self, rendezvous):
            pass

    config = EngineConfig(model=ModelConfig(path=str(model_path), vae_tiling=vae_tiling),
                          parallel=ParallelConfig(decode_ranks=2))
    layout = WorldLayout.from_config(config.parallel, "dit")
    worker = (Denoise if rank == 0 else Decode)(config, layout, rank)
    worker.setup(str(model_path))
    return worker


def _small_tiles(vae):
    """Tiles of 32 pixels, stride 24 (the demo's frames are smaller than diffusers' 256)."""
    vae.tile_sample_min_height = vae.tile_sample_min_width = 32
    vae.tile_sample_stride_height = vae.tile_sample_stride_width = 24


def _world(rank, world_size, cases):
    import torch

    from pipedit.request import VideoRequest

    results = []
    for model_path, vae_tiling, small_tiles, shape in cases:
        worker = _workers(rank, model_path, vae_tiling)
        if small_tiles and rank:
            _small_tiles(worker.adapter.vae)
        request = VideoRequest("a red fox in snow", steps=1, seed=3, **shape)
        if rank == 0:
            worker.begin(request, worker.encode_prompt(request))
            worker.step()
            worker.finish(decode_rank=1)
            worker._wait_send()
            results.append(None)
            continue
        units = worker.split_units(request)
        result = worker.decode_split(request, None)
        if rank == 1:
            with torch.no_grad():
                alone = worker.adapter.decode(result.latents)[0]
            results.append({"units": units, "diff": (result.frames - alone).abs().max().item(),
                            "frames": tuple(result.frames.shape)})
        else:
            results.append(None if result is None else "not None")
    return results


@pytest.fixture(scope="module")
def world(demo_checkpoint, osp_demo):
    cases = [
        (demo_checkpoint, "off", False, dict(height=64, width=96, num_frames=17)),
        (demo_checkpoint, "on", True, dict(height=64, width=96, num_frames=17)),
        (osp_demo, "off", False, dict(height=128, width=64, num_frames=9)),
        (osp_demo, "on", False, dict(height=128, width=64, num_frames=9)),
    ]
    return run_on_gloo_ranks(_world, 3, cases, timeout_s=300)


def test_hunyuan_split_equals_one_rank_untiled_and_tiled(world):
    lead, other = world[1], world[2]
    untiled, tiled = lead[:2]
    assert other == [None] * 4  # only the lead returns the video
    assert untiled["units"] == 2  # 5 latent frames: diffusers' two temporal chunks
    assert tiled["units"] == 2 * 3 * 4  # and 3 x 4 tiles of 4 latent pixels, stride 3, per chunk
    for case in (untiled, tiled):
        assert case["frames"] == (17, 64, 96, 3)
        assert case["diff"] <= HUNYUAN_TOLERANCE


def test_opensora_plan_bands_equal_one_rank_untiled_and_temporally_tiled(world):
    for case in world[1][2:]:
        assert case["units"] == 2  # 16 latent rows: two bands of 8, each with a halo of 7
        assert case["frames"] == (9, 128, 64, 3)
        assert case["diff"] <= WFVAE_FRAME_TOLERANCE
