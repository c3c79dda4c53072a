"""Which attention kernels actually run on this machine, found by running them.

Each kernel of the kernel table (pipedit.attention.kernels.attention_kernels), and torch SDPA
forced to each of its own backends,
attends one tiny [1, 64, 2, 64] input ([B, S, H, D]; bfloat16 on CUDA, float32 on CPU) and
its result is compared with float32 reference math. A status is "ok", "not installed",
"needs CUDA", or "error: " plus the first line of what went wrong.
"""

from __future__ import annotations

import importlib.util
import warnings
from collections.abc import Callable

import torch
import torch.nn.functional as F

from pipedit.attention.kernels import KernelEntry, attention_kernels, kernel_entry

SHAPE = (1, 64, 2, 64)
# bfloat16 against float32 math on unit-variance inputs: well above rounding, far below a wrong result.
TOLERANCE = 3e-2
OK, NOT_INSTALLED, NEEDS_CUDA = "ok", "not installed", "needs CUDA"

Attend = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]  # [B, S, H, D] each


def _sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
    return out.transpose(1, 2)


# torch SDPA backend -> (torch.nn.attention.SDPBackend member, its torch.backends.cuda switch, CUDA only)
SDPA_BACKENDS: dict[str, tuple[str, str, bool]] = {
    "flash": ("FLASH_ATTENTION", "flash_sdp_enabled", False),
    "efficient": ("EFFICIENT_ATTENTION", "mem_efficient_sdp_enabled", True),
    "cudnn": ("CUDNN_ATTENTION", "cudnn_sdp_enabled", True),
    "math": ("MATH", "math_sdp_enabled", False),
}


def probe_device() -> torch.device:
    return torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")


def probe_dtype(device: torch.device) -> torch.dtype:
    return torch.bfloat16 if device.type == "cuda" else torch.float32


def _inputs(device: torch.device) -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(0)
    tensors = (torch.randn(SHAPE, generator=generator) for _ in range(3))
    return tuple(t.to(device=device, dtype=probe_dtype(device)) for t in tensors)


def _reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    q, k, v = (t.float().transpose(1, 2) for t in (q, k, v))
    scores = torch.matmul(q, k.transpose(-1, -2)) * q.shape[-1] ** -0.5
    return torch.matmul(torch.softmax(scores, dim=-1), v).transpose(1, 2)


def run_probe(attend: Attend, device: torch.device) -> str:
    """Runs `attend` on the probe input; any failure becomes a status, never an exception."""
    try:
        q, k, v = _inputs(device)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # SDPA explains each backend it skips, as warnings
            out = attend(q, k, v)
        if device.type == "cuda":
            torch.cuda.synchronize(device)  # kernel failures surface here, not at launch
        error = (out.float() - _reference(q, k, v)).abs().max().item()
    except Exception as exc:  # noqa: BLE001 - the point is to report every failure
        return error_status(exc)
    return OK if error <= TOLERANCE else f"error: wrong result (max abs diff {error:.3g})"


def error_status(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"error: {lines[0] if lines else type(exc).__name__}"


def probe_kernel(name: str, device: torch.device) -> str:
    """The status of kernel `name` of the kernel table (pipedit.attention.kernels) on `device`."""
    return probe_entry(kernel_entry(name), device)


def probe_entry(entry: KernelEntry, device: torch.device) -> str:
    if entry.cuda_only and device.type != "cuda":
        return NEEDS_CUDA
    if importlib.util.find_spec(entry.module) is None:
        return NOT_INSTALLED
    try:
        attend = entry.plain()
    except Exception as exc:  # noqa: BLE001 - a broken install, reported as such
        return error_status(exc)
    return run_probe(attend, device)


def probe_sdpa_backend(name: str, device: torch.device) -> dict[str, bool | str]:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    member, switch, cuda_only = SDPA_BACKENDS[name]
    # The switch says whether SDPA's default dispatch may pick the backend; the probe forces it.
    enabled = getattr(torch.backends.cuda, switch)()
    if cuda_only and device.type != "cuda":
        return {"enabled": enabled, "status": NEEDS_CUDA}
    backend = getattr(SDPBackend, member)

    def attend(q, k, v):
        with sdpa_kernel(backend):
            return _sdpa(q, k, v)

    return {"enabled": enabled, "status": run_probe(attend, device)}


def probe_attention() -> dict:
    """Statuses of every kernel and SDPA backend on the first CUDA device, else on the CPU.

    Hazard: a kernel that hits a sticky CUDA error (e.g. an illegal memory access) poisons the
    process's CUDA context, so every later probe reports that same error too."""
    device = probe_device()
    return {
        "device": str(device),
        "dtype": str(probe_dtype(device)).removeprefix("torch."),
        "shape": list(SHAPE),
        "kernels": {entry.name: probe_entry(entry, device) for entry in attention_kernels()},
        "sdpa_backends": {name: probe_sdpa_backend(name, device) for name in SDPA_BACKENDS},
        "choice": choice_report(device),
    }


def choice_report(device: torch.device) -> dict:
    """What model.attention auto would run on `device` in its serving dtype, and the measured ms
    per candidate it was chosen by (pipedit.attention.kernel_choice; one rank, nothing agreed)."""
    from pipedit.attention.kernel_choice import choose_kernels, describe
    from pipedit.distributed.context import ParallelContext

    return describe(choose_kernels(ParallelContext.single(device), probe_dtype(device)))


def kernel_drift(name: str, device: torch.device, dtype: torch.dtype = torch.bfloat16,
                 shape: tuple[int, int, int, int] = (1, 4096, 8, 128), seed: int = 0) -> dict[str, float]:
    """How far kernel `name` (pipedit.attention.kernels) lands from exact attention on one random
    [B, S, H, D] call: the relative L2 error and max abs error against float32 math, beside the
    same figures for torch SDPA in `dtype` (the rounding any exact kernel in that dtype shows).
    Prints one line; `pipedit bench kernels` and tests/gpu call it."""
    generator = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(shape, generator=generator).to(device, dtype) for _ in range(3))
    exact = _reference(q, k, v)

    def errors(out: torch.Tensor) -> tuple[float, float]:
        diff = out.float() - exact
        return (diff.norm() / exact.norm()).item(), diff.abs().max().item()

    rel, worst = errors(kernel_entry(name).plain()(q, k, v))
    base_rel, base_worst = errors(_sdpa(q, k, v))
    print(f"attention drift {name} vs exact ({str(dtype).removeprefix('torch.')}, {list(shape)}): relative L2 "
          f"{rel:.3e}, max abs {worst:.3e} (sdpa in {str(dtype).removeprefix('torch.')}: {base_rel:.3e}, {base_worst:.3e})")
    return {"relative_l2": rel, "max_abs": worst, "sdpa_relative_l2": base_rel, "sdpa_max_abs": base_worst}
