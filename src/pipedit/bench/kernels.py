"""`pipedit bench kernels`: one transformer block at each released model's widths, per attention
kernel and linear-layer precision the device has: ms per block and per self-attention call,
TFLOP/s and the fraction of the matmul rate measured in the same run, and the predicted seconds
per step of the whole model (pipedit.planner.cost.step_from_block: every layer, CFG as the planner
counts it).

The block is built from the planner's ModelSpec (each family's registry entry gives its
releases): norm and modulation, the Q/K/V/O projections, self-attention through the kernel
(joint over video + text tokens, or over the video with a cross-attention to the text), and the
MLP; its FLOPs are the cost model's block_work, which counts exactly these GEMMs and attention
products. Elementwise work (norms, modulation, gating) is real but not counted as FLOPs.

Kernels come from the attention kernel table (pipedit.attention.kernels.attention_kernels: torch
SDPA and each of its backends, flash-attn, xformers, SageAttention, ...), each kept only where its
probe passes on this device: a kernel added to that table is benched without a change here. Only
exact kernels can be the fastest that calibrates the planner; a lossy one (sage) is timed beside.
Linear precisions come from LINEAR_PRECISIONS (name ->
converter of a block's linear layers), likewise.

Timing: per row a warm-up, then `repeats` forwards back to back with one wait for the device at
the end (pipedit.device_time.timed: never between forwards), so figures are per forward. A row
that fails (out of memory, say: SDPA's math backend at 720p) reports why and the others go on.
`tokens` and `width_divisor` shrink the rows so that a CPU can run them in a test: such figures
are labelled as scaled, and a CPU's as a CPU's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, replace

import torch
import torch.nn.functional as F

from .. import device_time
from ..errors import UserInputError
from ..attention.kernel_probe import OK, probe_entry
from ..attention.kernels import attention_kernels as kernel_table
from ..planner.cost import block_work, step_from_block
from ..planner.models import ModelSpec, full_size, model_names
from .rates import achieved, matmul_report

Attend = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]  # [B, S, H, D] each
DEFAULT_SHAPES = ((832, 480, 81), (1280, 720, 81))  # (width, height, frames): 480p and 720p
SHAPE_NAMES = {480: "480p", 720: "720p"}


def _as_is(block: torch.nn.Module, device: torch.device) -> torch.nn.Module:
    return block


def _fp8(block: torch.nn.Module, device: torch.device) -> torch.nn.Module:
    """The block's GEMMs in float8 as `--quantize fp8` runs them (the modulation is a parameter,
    not a linear layer: it stays, as serving keeps modulation in high precision)."""
    from ..runtime.fp8 import check_fp8_device, replace_linears

    check_fp8_device(device)
    replace_linears(block, [n for n, m in block.named_modules() if isinstance(m, torch.nn.Linear)])
    return block


# Linear-layer precision -> converter of a block (raises UserInputError where the device lacks it).
# "native": the block in the bench's dtype (bf16 on CUDA), reported under that dtype's name.
LINEAR_PRECISIONS: dict[str, Callable[[torch.nn.Module, torch.device], torch.nn.Module]] = {
    "native": _as_is, "fp8": _fp8}


def attention_kernels(device: torch.device) -> dict[str, Attend]:
    """Every kernel of the kernel table whose probe passes on `device`, by name."""
    return {entry.name: entry.plain() for entry in kernel_table() if probe_entry(entry, device) == OK}


def _exact(kernel: str) -> bool:
    return any(entry.exact for entry in kernel_table() if entry.name == kernel)


class SpecBlock(torch.nn.Module):
    """One DiT block at a ModelSpec's widths (see the module docstring)."""

    def __init__(self, spec: ModelSpec, device: torch.device, dtype: torch.dtype):
        super().__init__()
        h, mlp = spec.hidden, round(spec.hidden * spec.mlp_ratio)
        self.heads, self.cross = spec.heads, spec.cross_attention
        make = dict(device=device, dtype=dtype)
        self.qkv, self.out = torch.nn.Linear(h, 3 * h, **make), torch.nn.Linear(h, h, **make)
        self.mlp_in, self.mlp_out = torch.nn.Linear(h, mlp, **make), torch.nn.Linear(mlp, h, **make)
        if self.cross:
            self.cross_q, self.cross_kv = torch.nn.Linear(h, h, **make), torch.nn.Linear(h, 2 * h, **make)
            self.cross_out = torch.nn.Linear(h, h, **make)
        self.modulation = torch.nn.Parameter(torch.randn(6, h, **make) * 0.1)
        self.attend: Attend | None = None  # the kernel under test, set per row

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        return x.unflatten(-1, (self.heads, -1))  # [B, N, H, D]

    def forward(self, x: torch.Tensor, text: torch.Tensor) -> torch.Tensor:
        shift, scale, gate, shift2, scale2, gate2 = self.modulation
        tokens = x if self.cross else torch.cat([x, text], dim=1)  # joint attention: video + text
        y = F.layer_norm(tokens, tokens.shape[-1:]) * (1 + scale) + shift
        q, k, v = (self._split(t) for t in self.qkv(y).chunk(3, dim=-1))
        tokens = tokens + gate * self.out(self.attend(q, k, v).flatten(-2))
        if self.cross:
            kv = self.cross_kv(text).chunk(2, dim=-1)
            attended = self.attend(self._split(self.cross_q(F.layer_norm(tokens, tokens.shape[-1:]))),
                                   self._split(kv[0]), self._split(kv[1]))
            tokens = tokens + self.cross_out(attended.flatten(-2))
        y = F.layer_norm(tokens, tokens.shape[-1:]) * (1 + scale2) + shift2
        return tokens + gate2 * self.mlp_out(F.gelu(self.mlp_in(y), approximate="tanh"))


@dataclass(frozen=True)
class KernelBenchSettings:
    models: tuple[str, ...] = ()  # release names (default: every full-size model, duplicates once)
    shapes: tuple[tuple[int, int, int], ...] = DEFAULT_SHAPES
    repeats: int = 3
    tokens: int | None = None  # every row at this many video tokens (scaled)
    width_divisor: int = 1  # heads divided by this (head_dim kept): a narrower block (scaled)
    kernels: tuple[str, ...] = ()  # only these of the available kernels (default: all)

    @property
    def scaled(self) -> bool:
        return self.tokens is not None or self.width_divisor > 1


def scaled_spec(spec: ModelSpec, width_divisor: int) -> ModelSpec:
    heads = max(1, spec.heads // width_divisor)
    return replace(spec, heads=heads, hidden=heads * spec.head_dim) if width_divisor > 1 else spec


def _models(settings: KernelBenchSettings) -> dict[str, tuple[ModelSpec, list[str]]]:
    """name -> (its spec, releases with the same block and tokens, benched once under it)."""
    found: dict[tuple, tuple[str, ModelSpec, list[str]]] = {}
    for name in settings.models or model_names():
        spec = full_size(name)
        key = (spec.hidden, spec.heads, spec.head_dim, spec.mlp_ratio, spec.cross_attention, spec.text_tokens,
               spec.patch, spec.compression, spec.layers, spec.sparse_layers, spec.cfg_batch)
        if key in found:
            found[key][2].append(name)
        else:
            found[key] = (name, spec, [])
    return {name: (scaled_spec(spec, settings.width_divisor), same) for name, spec, same in found.values()}


def _time(device: torch.device, call: Callable[[], object], repeats: int) -> float:
    call()  # warm-up
    with device_time.timed(device) as watch:
        for _ in range(repeats):
            call()
    return watch.seconds / repeats


def _row(name, spec, shape, kernel, attend, precision, block, device, dtype, settings, matmul) -> dict:
    width, height, frames = shape
    video = settings.tokens or spec.video_tokens(height, width, frames)
    work = block_work(spec, video)
    if precision == "native":
        precision = str(dtype).removeprefix("torch.")
    row = {"model": name, "shape": f"{width}x{height}x{frames}", "resolution": SHAPE_NAMES.get(height, f"{height}p"),
           "video_tokens": video, "text_tokens": spec.text_tokens, "kernel": kernel, "precision": precision,
           **asdict(work)}
    try:
        generator = torch.Generator().manual_seed(0)
        x = torch.randn(1, video, spec.hidden, generator=generator).to(device, dtype)
        text = torch.randn(1, spec.text_tokens, spec.hidden, generator=generator).to(device, dtype)
        n = video if spec.cross_attention else video + spec.text_tokens
        q, k, v = (torch.randn(1, n, spec.heads, spec.head_dim, generator=generator).to(device, dtype) for _ in range(3))
        block.attend = attend
        with torch.no_grad():
            row["block_s"] = _time(device, lambda: block(x, text), settings.repeats)
            row["attention_s"] = _time(device, lambda: attend(q, k, v), settings.repeats)
    except (RuntimeError, torch.OutOfMemoryError) as error:  # one row's failure is reported, the rest go on
        row["error"] = f"{type(error).__name__}: {(str(error).splitlines() or [''])[0][:160]}"
        if device.type == "cuda":
            torch.cuda.empty_cache()
        return row
    row["block"] = achieved(work.flops, row["block_s"], matmul).figures()
    row["attention"] = achieved(work.self_attention_flops, row["attention_s"], matmul).figures()
    row["predicted_step_s"] = step_from_block(spec, row["block_s"], row["attention_s"])
    return row


def bench_kernels(settings: KernelBenchSettings, device: torch.device, dtype: torch.dtype) -> dict:
    """Every row, the matmul rate measured first, and the fastest kernel/precision overall."""
    device = torch.device(device)
    matmul = device_time.measure_matmul_rate(device)
    kernels = attention_kernels(device)
    missing = [k for k in settings.kernels if k not in kernels]
    if missing:
        raise UserInputError(f"kernels {missing} do not run on {device}; available: {', '.join(kernels)}")
    kernels = {k: attend for k, attend in kernels.items() if not settings.kernels or k in settings.kernels}
    rows, same_as, skipped = [], {}, {}
    for name, (spec, duplicates) in _models(settings).items():
        same_as[name] = duplicates
        for precision, convert in LINEAR_PRECISIONS.items():
            try:
                block = convert(SpecBlock(spec, device, dtype), device)
            except UserInputError as refused:  # a precision this device lacks (fp8 below sm89, a CPU)
                skipped[precision] = str(refused)
                continue
            for shape in settings.shapes:
                for kernel, attend in kernels.items():
                    rows.append(_row(name, spec, shape, kernel, attend, precision, block, device, dtype, settings, matmul))
            del block
    gpu_name = torch.cuda.get_device_name(device) if device.type == "cuda" else None
    return {"device": str(device), "gpu_name": gpu_name, "dtype": str(dtype).removeprefix("torch."),
            "matmul": matmul_report(matmul), "repeats": settings.repeats,
            "scaled": {"tokens": settings.tokens, "width_divisor": settings.width_divisor} if settings.scaled else None,
            "same_as": same_as, "precisions_skipped": skipped, "rows": rows, "fastest": fastest(rows)}


def fastest(rows: list[dict]) -> dict | None:
    """The exact kernel, with native-precision linears, of least block time summed over the rows
    every one of them ran (None if none ran them all; a native row names its dtype, not a key of
    LINEAR_PRECISIONS): what the planner's bf16 predictions are
    calibrated by. Lossy kernels and fp8 rows are timed beside it, never chosen here."""
    pairs = {(r["kernel"], r["precision"]) for r in rows if _exact(r["kernel"]) and r["precision"] not in LINEAR_PRECISIONS}
    cells = {(r["model"], r["shape"]) for r in rows}
    totals = {}
    for pair in pairs:
        times = [r["block_s"] for r in rows if (r["kernel"], r["precision"]) == pair and "block_s" in r]
        if len(times) == len(cells):
            totals[pair] = sum(times)
    if not totals:
        return None
    kernel, precision = min(totals, key=totals.get)
    return {"kernel": kernel, "precision": precision}


def calibration(report: dict) -> dict:
    """The planner's calibration file (pipedit.planner.kernel_calibration) from the fastest pair's rows."""
    from ..planner.kernel_calibration import FORMAT, ROW_FIELDS

    best = report["fastest"]
    if best is None:
        raise UserInputError("no kernel ran every row, so there is no calibration to write (see the errors above)")
    if report["scaled"]:
        raise UserInputError("--write-calibration needs the released widths and token counts: drop --tokens and "
                             "--width-divisor")
    rows = [{f: r[f] for f in ("model", "shape", *ROW_FIELDS)} for r in report["rows"]
            if (r["kernel"], r["precision"]) == (best["kernel"], best["precision"])]
    return {"format": FORMAT, "gpu_name": report["gpu_name"], "device": report["device"], "dtype": report["dtype"],
            "matmul_flops_per_s": report["matmul"]["flops_per_s"], **best, "rows": rows}


def _rate(figures: dict) -> str:
    if "measurement_error" in figures:
        return "MEASUREMENT ERROR"
    return f"{figures['tflops']:8.2f} {figures['of_matmul']:>7.0%}"


def format_report(report: dict) -> str:
    where = report["gpu_name"] or f"a CPU ({report['dtype']}: CPU figures, not a GPU's)"
    lines = [f"bench kernels on {report['device']} ({where}), {report['dtype']} weights and activations, "
             f"mean of {report['repeats']} forwards after a warm-up", report["matmul"]["text"]]
    if report["scaled"]:
        lines.append(f"SCALED: {report['scaled']} (a test-sized run; not the released widths or token counts)")
    lines.append(f"{'model':<22}{'shape':>13}{'tokens':>8} {'kernel':<15}{'precision':<14}{'ms/block':>10}"
                 f"{'TFLOP/s':>9}{'of mm':>8}{'attn ms':>10}{'TFLOP/s':>9}{'of mm':>8}{'s/step':>9}")
    for r in report["rows"]:
        head = (f"{r['model']:<22}{r['shape']:>13}{r['video_tokens']:>8} {r['kernel']:<15}"
                f"{r['precision']:<14}")
        if "error" in r:
            lines.append(f"{head}{r['error']}")
            continue
        lines.append(f"{head}{r['block_s'] * 1e3:>10.2f} {_rate(r['block'])}{r['attention_s'] * 1e3:>10.2f} "
                     f"{_rate(r['attention'])}{r['predicted_step_s']:>9.3f}")
    flagged = [r for r in report["rows"] if "measurement_error" in r.get("block", {}) | r.get("attention", {})]
    for r in flagged:
        text = r["block"].get("measurement_error") or r["attention"]["measurement_error"]
        lines.append(f"{r['model']} {r['shape']} {r['kernel']}: {text}")
    for precision, reason in report["precisions_skipped"].items():
        lines.append(f"{precision} linears not timed: {reason}")
    for name, same in report["same_as"].items():
        if same:
            lines.append(f"{name}: also stands for {', '.join(same)} (same block and tokens)")
    best = report["fastest"]
    if best:
        lines.append(f"fastest exact kernel over every row: {best['kernel']} attention, {best['precision']} linears")
    lines.append("s/step: the whole model, every block at this row's time (self-attention of sparse layers at its "
                 "share), times the CFG forwards the planner counts")
    return "\n".join(lines)


def check_settings(settings: KernelBenchSettings) -> None:

    unknown = [m for m in settings.models if m not in model_names()]
    if unknown:
        raise UserInputError(f"unknown models {unknown}; models: {', '.join(model_names())}")
    if settings.repeats < 1 or settings.width_divisor < 1 or (settings.tokens is not None and settings.tokens < 1):
        raise UserInputError("--repeats, --width-divisor and --tokens must be at least 1")
    if not all(len(s) == 3 and min(s) > 0 for s in settings.shapes):
        raise UserInputError("--shapes takes WxHxF triples of positive integers, e.g. 832x480x81")
