"""`pipedit bench vae`: one VAE decode of random latents for a video shape, untiled and tiled:
seconds, peak memory, the predicted untiled peak, and how far the tiled frames are from the
untiled ones. Only the checkpoint's VAE is loaded (plus its scheduler config).

Each mode runs in a fresh process, so that one mode's allocations never hide in the other's
peak. Peak memory is what the decode adds above what was in use just before it: on CUDA
torch.cuda.max_memory_allocated after reset_peak_memory_stats; on CPU the process's peak
resident memory (VmHWM, reset through /proc/self/clear_refs), which also counts the memory
that oneDNN and the allocator keep outside tensors.
"""

from __future__ import annotations

import re
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path

import torch

from .. import device_time
from ..adapter import VideoShape, load_adapter
from ..config import EngineConfig

MODES = {"both": ("off", "on"), "off": ("off",), "on": ("on",)}
MIB = 2**20


@dataclass(frozen=True)
class DecodeRun:
    mode: str
    seconds: float
    peak_bytes: int | None  # None where the platform cannot reset its peak (no /proc)
    predicted_bytes: int  # the untiled prediction, whatever the mode
    decoder_calls: int  # decoder forwards: temporal passes x spatial tiles
    frames: torch.Tensor


def _status_bytes(field: str) -> int:
    text = Path("/proc/self/status").read_text()
    return int(re.search(rf"^{field}:\s+(\d+) kB", text, re.MULTILINE).group(1)) * 1024


class _PeakMeter:
    """Peak bytes the enclosed code added above what was in use when it started."""

    def __init__(self, device: torch.device):
        self.device, self.peak = device, None

    def __enter__(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self.base = torch.cuda.memory_allocated(self.device)
            return self
        try:
            self.base = _status_bytes("VmRSS")
            Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS
        except OSError:
            self.base = None
        return self

    def __exit__(self, *exc):
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            self.peak = torch.cuda.max_memory_allocated(self.device) - self.base
        elif self.base is not None:
            self.peak = _status_bytes("VmHWM") - self.base
        return False


def measure_decode(path: str, device: str, dtype: torch.dtype | None, shape: VideoShape, mode: str,
                   seed: int = 0) -> DecodeRun:
    """Loads the VAE and decodes seeded random latents of `shape` with vae_tiling `mode`."""
    adapter = load_adapter(path, parts={"vae"}, device=device, dtype=dtype, vae_tiling=mode)
    adapter.validate(shape, 1)
    latents = adapter.prepare_latents(shape, torch.Generator("cpu").manual_seed(seed))
    predicted = _predictor(adapter.family)(adapter.vae_config, latents.shape, adapter.vae.dtype)
    calls = []
    hook = adapter.vae.decoder.register_forward_pre_hook(lambda *_: calls.append(1))
    with _PeakMeter(adapter.device) as meter, device_time.timed(adapter.device) as watch:
        frames = adapter.decode(latents)
    hook.remove()
    return DecodeRun(mode, watch.seconds, meter.peak, predicted, len(calls), frames[0].cpu())


def _predictor(name: str):
    """The family's untiled decode-peak predictor (the default family's for a family without one)."""
    from .. import families

    entry = families.family(name)
    if entry.vae_predictor is None:
        entry = families.family(families.default_name())
    return families.load(entry.vae_predictor)


def measure_in_fresh_process(*args) -> DecodeRun:
    with ProcessPoolExecutor(max_workers=1, mp_context=get_context("spawn")) as pool:
        return pool.submit(measure_decode, *args).result()


def bench_vae(config: EngineConfig, shape: VideoShape, tiling: str = "both", seed: int = 0) -> str:
    from ..families import demo_model

    path = config.model.path or str(demo_model())
    from ..distributed.devices import resolve_rank_device

    device, dtype = resolve_rank_device(config.model.device), config.model.torch_dtype()
    load_adapter(path, parts=(), device=device, dtype=dtype).validate(shape, 1)  # configs only: cheap
    runs = [measure_in_fresh_process(path, str(device), dtype, shape, mode, seed) for mode in MODES[tiling]]
    return format_table(runs, shape, device)


def _mib(value: int | None) -> str:
    return "n/a" if value is None else f"{value / MIB:.1f}"


def format_table(runs: list[DecodeRun], shape: VideoShape, device: torch.device) -> str:
    untiled = next((run.frames for run in runs if run.mode == "off"), None)
    how = ("torch.cuda.max_memory_allocated" if device.type == "cuda"
           else "peak resident memory (VmHWM) of a fresh process")
    lines = [
        f"VAE decode of {shape.height}x{shape.width}x{shape.num_frames} random latents on {device}",
        f"peak: {how}, above the memory in use before the decode",
        f"{'mode':<6}{'seconds':>10}{'decoder calls':>15}{'peak MiB':>12}{'predicted untiled MiB':>23}"
        f"{'max |tiled - untiled|':>23}",
    ]
    for run in runs:
        diff = "-" if untiled is None or run.mode == "off" else f"{(run.frames - untiled).abs().max().item():.3g}"
        lines.append(f"{run.mode:<6}{run.seconds:>10.2f}{run.decoder_calls:>15}{_mib(run.peak_bytes):>12}"
                     f"{_mib(run.predicted_bytes):>23}{diff:>23}")
    lines.append("frames are floats in [0, 1]; a mode whose frames fit one tile decodes untiled (as many decoder calls)")
    return "\n".join(lines)
