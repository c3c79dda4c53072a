"""`pipedit bench lora`: what LoRA adapters cost a denoising step, and what a switch costs.

Three engines on the config's layout run the same request (seed, shape, steps), each after one
warm-up, `repeats` rounds, medians reported:
- no adapters loaded: the baseline;
- both adapters offered by name (model.offered_loras, unfused: every adapted layer also runs its low-rank
  pair), rounds of requests with none, one (A) and both (A+B) active, so every request switches:
  its seconds per step (the switch taken out) and the switch itself (lora_switch_s: set_adapters,
  plus moves to the device when more adapters exist than model.max_gpu_loras);
- both fused into the weights at load (model.run_loras + model.fuse_loras): no per-step cost.
The adapters are the --lora files (at most two); missing ones are written with random weights at
`rank` over every attention projection of the transformer (time depends on the rank and the
layers an adapter touches, not on its values). Written as lora.json and lora.md.

Each row's `achieved` is the base model's DiT FLOPs of a step (the cost model's, at the request's
guidance branches; the adapters' low-rank products are not counted) over its seconds per step, per
denoise rank, against the matmul rate measured once on the first engine's rank 0.
"""

from __future__ import annotations

import json
import re
import statistics
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from ..config import EngineConfig
from ..lora.spec import LoraSpec
from ..request import VideoRequest
from .rates import StepRates, markdown_cells, model_spec, rank_matmul_rate

# The attention projections of the DiTs that take adapters (HunyuanVideo: attn.to_q ...,
# add_q_proj ...; Wan: attn1/attn2.to_q ..., to_out.0).
_ATTENTION = re.compile(r"attn\d?\.(to_q|to_k|to_v|to_out\.0|add_q_proj|add_k_proj|add_v_proj|to_add_out)$")


@dataclass(frozen=True)
class LoraBenchSettings:
    height: int
    width: int
    num_frames: int
    steps: int
    repeats: int
    rank: int  # of the random adapters written when fewer than two --lora files are given


def random_adapters(model_path: Path, family, count: int, rank: int, folder: Path) -> list[Path]:
    """`count` adapter files in the diffusers/PEFT form for the checkpoint's transformer: rank
    `rank` over every attention projection, seeded random weights (alpha = rank: scale 1)."""
    import diffusers
    from accelerate import init_empty_weights

    from ..lora.inject import lora_mixin

    config = json.loads((model_path / "transformer" / "config.json").read_text())
    with init_empty_weights():  # shapes only
        transformer = getattr(diffusers, config["_class_name"]).from_config(config)
    layers = {name: module for name, module in transformer.named_modules()
              if isinstance(module, torch.nn.Linear) and _ATTENTION.search(name)}
    mixin = lora_mixin(family)
    paths = []
    for index in range(count):
        generator = torch.Generator().manual_seed(index)
        tensors = {}
        for name, linear in layers.items():
            tensors[f"{name}.lora_A.weight"] = torch.randn(rank, linear.in_features, generator=generator) * 0.01
            tensors[f"{name}.lora_B.weight"] = torch.randn(linear.out_features, rank, generator=generator) * 0.01
        metadata = {"r": rank, "lora_alpha": rank, "target_modules": sorted(layers)}
        path = folder / f"random-{index}.safetensors"
        if mixin is None:  # no diffusers loader (pipedit reads the bare diffusers keys, alpha = rank)
            from safetensors.torch import save_file

            save_file(tensors, str(path))
        else:
            mixin.save_lora_weights(folder, transformer_lora_layers=tensors, weight_name=path.name,
                                    transformer_lora_adapter_metadata=metadata)
        paths.append(path)
    return paths


def _runs(config: EngineConfig, requests: dict[str, VideoRequest], repeats: int, measured: dict) -> dict[str, list]:
    """Every request once per round (a busy machine slows each alike), after a warm-up. The first
    engine measures the matmul rate on its rank 0 into `measured`; each engine's denoise ranks too."""
    from ..runtime.engine import Engine

    runs: dict[str, list] = {mode: [] for mode in requests}
    with Engine(config) as engine:
        if "matmul" not in measured:
            measured["matmul"] = rank_matmul_rate(engine.executor)
        measured["devices"] |= {mode: engine.layout.denoise for mode in requests}
        engine.generate(replace(next(iter(requests.values())), steps=1))
        for _ in range(repeats):
            for mode, request in requests.items():
                runs[mode].append(engine.generate(request))
    return runs


def bench_lora(config: EngineConfig, settings: LoraBenchSettings, out_dir: Path) -> dict:
    from ..families import family_of_checkpoint
    from ..lora.inject import lora_mixin
    from ..runtime.engine import resolve_model_path

    model_path = Path(resolve_model_path(config.model.path, config.model.name))
    family = family_of_checkpoint(model_path, config.model.name)
    lora_mixin(family)  # a family without adapters is refused before anything loads
    given = [spec.path for spec in config.model.run_loras][:2]
    request = VideoRequest("a benchmark prompt: a red fox running through snow", height=settings.height,
                           width=settings.width, num_frames=settings.num_frames, steps=settings.steps, seed=0)
    with tempfile.TemporaryDirectory(prefix="pipedit-bench-lora-") as scratch:
        made = random_adapters(model_path, family, 2 - len(given), settings.rank, Path(scratch))
        files = given + [str(path) for path in made]
        base = replace(config, model=replace(config.model, path=str(model_path), run_loras=(), offered_loras=(),
                                             fuse_loras=False))
        both = (LoraSpec(files[0]), LoraSpec(files[1]))
        offered = (("a", both[0]), ("b", both[1]))
        named = replace(base, model=replace(base.model, offered_loras=offered, max_gpu_loras=2))
        fused = replace(base, model=replace(base.model, run_loras=both, fuse_loras=True))
        measured = {"devices": {}}
        runs = _runs(base, {"no adapters loaded": request}, settings.repeats, measured)
        runs |= _runs(named, {"offered, none active": request, "1 unfused": replace(request, loras=({"name": "a"},)),
                              "2 unfused": replace(request, loras=({"name": "a"}, {"name": "b"}))}, settings.repeats,
                      measured)
        runs |= _runs(fused, {"2 fused": request}, settings.repeats, measured)
    rates = StepRates(model_spec(model_path, family.name), measured["matmul"])
    rows = [_row(mode, results, settings, rates, measured["devices"][mode]) for mode, results in runs.items()]
    none = rows[0]["step_s"]
    for row in rows:
        row["vs_none"] = row["step_s"] / none
    report = {"settings": settings.__dict__, "family": family.name, "device": config.model.device_type(),
              "adapters": [Path(f).name for f in files], "given": len(given), "rows": rows,
              "matmul": rates.report()}
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "lora.json").write_text(json.dumps(report, indent=1) + "\n")
    (out_dir / "lora.md").write_text(markdown(report))
    return report


def _row(mode: str, results: list, settings: LoraBenchSettings, rates: StepRates, devices: int) -> dict:
    """Seconds per step without the request's adapter switch; the switch's, where it took one; the
    step's base-model FLOPs and their rate over those seconds on `devices` denoise ranks."""
    row = {"mode": mode, "step_s": statistics.median(
        (r.timings["denoise_s"] - r.timings.get("lora_switch_s", 0.0)) / settings.steps for r in results),
        "cfg_branches": statistics.fmean(r.timings["cfg_branches"] for r in results)}
    row["flops_per_step"] = rates.step_flops(settings.height, settings.width, settings.num_frames, row["cfg_branches"])
    row["achieved"] = rates.figures(row["flops_per_step"], row["step_s"], devices)
    if any("lora_switch_s" in r.timings for r in results):
        row["switch_s"] = statistics.median(r.timings["lora_switch_s"] for r in results)
    return row


def markdown(report: dict) -> str:
    s = report["settings"]
    made = 2 - report["given"]
    source = (f"{', '.join(report['adapters'])}" + (f" ({made} written with random weights at rank {s['rank']} "
                                                    f"over the attention projections)" if made else ""))
    lines = [f"# bench lora: {report['family']}, {s['width']}x{s['height']}x{s['num_frames']}, {s['steps']} steps, "
             f"{report['device']}, median of {s['repeats']}", "", f"Adapters: {source}.", "",
             f"TFLOP/s: the base model's DiT FLOPs per step (adapters not counted) per denoise rank; "
             f"{report['matmul']['text']}.", "",
             "| mode | s per step | vs none | switch s | TFLOP/s | of matmul |", "|---|---:|---:|---:|---:|---:|"]
    for row in report["rows"]:
        switch = f"{row['switch_s']:.4f}" if "switch_s" in row else "-"
        lines.append(f"| {row['mode']} | {row['step_s']:.4f} | {row['vs_none']:.2f}x | {switch} | "
                     f"{markdown_cells(row['achieved'])} |")
    return "\n".join(lines) + "\n"
