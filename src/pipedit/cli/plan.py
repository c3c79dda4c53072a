"""`pipedit plan`: predict, rank and pick configurations (pipedit.planner).

The planner never imports the runtime: for `--gpu this --model-path DIR` this command measures the
checkpoint with the runtime's calibration and hands the figures to the planner."""

from __future__ import annotations

from pathlib import Path


def add_parser(sub) -> None:
    from ..families import DEFAULT
    from ..planner.hardware import DEFAULT_INTER_NODE_GBPS, GPUS, INTERCONNECTS
    from ..planner.models import model_names
    from .flags import add_shape_flags

    p = sub.add_parser("plan", help="predict and rank configurations (decode ranks, ulysses x ring, PipeSP, Aco, "
                                    "VAE tiling) for a model on a node")
    p.add_argument("--model", choices=model_names(),
                   help=f"full-size model to plan, dims from its released config (default {DEFAULT}; with "
                        "--model-path: the checkpoint's pipeline)")
    p.add_argument("--model-path", help="read the model's dims from this checkpoint's configs instead (e.g. the demo)")
    p.add_argument("--idle-expert", choices=("resident", "offload"),
                   help="two-expert models (Wan2.2 A14B): plan only this model.idle_expert (default: both)")
    p.add_argument("--gpus", type=int, default=8, help="GPUs (ranks) on each node")
    p.add_argument("--nodes", type=int, default=1,
                   help="nodes of --gpus GPUs each: one rank group over all of them (parallel.nodes; Ulysses "
                        "inside a node, Ring and the decode handoff across the network)")
    p.add_argument("--inter-node", type=float, default=DEFAULT_INTER_NODE_GBPS, metavar="GBPS",
                   help=f"the network between nodes, Gb/s per node each way, shared by a node's GPUs (default "
                        f"{DEFAULT_INTER_NODE_GBPS:g})")
    p.add_argument("--gpu", choices=GPUS, default="h100",
                   help="hardware profile; 'this': this machine, measured once (CPU ranks) and cached")
    p.add_argument("--calibration", metavar="FILE",
                   help="plan with the matmul and attention efficiencies measured by `pipedit bench kernels "
                        "--write-calibration FILE` on this --gpu's kind (default: the profile's assumptions)")
    p.add_argument("--interconnect", choices=INTERCONNECTS,
                   help="GPU links (default: nvlink where the GPU has it, else pcie)")
    p.add_argument("--guidance-scale", type=float,
                   help="the requests' guidance: at or below 1 no classifier-free guidance, one forward per step "
                        "(few-step distilled models); default: the model's guidance (two branches for Wan, OpenSoraPlan)")
    p.add_argument("--quantize", choices=("none", "fp8"), default="none",
                   help="fp8: the DiT's block linears in float8 (weight memory; config model.quantize)")
    p.add_argument("--lora-rank", type=int, default=0,
                   help="unfused LoRA adapters of this rank on each denoise GPU (memory; default 0: none)")
    p.add_argument("--loras", type=int, default=1,
                   help="with --lora-rank: adapters kept on each denoise GPU (model.max_gpu_loras; default 1)")
    add_shape_flags(p, {"height": 544, "width": 960, "num_frames": 129, "steps": 50}, frames_flag="--frames")
    p.add_argument("--prompts", type=int, default=10, help="consecutive prompts in the batch (K)")
    p.add_argument("--top", type=int, default=10, help="ranked rows to print")
    p.add_argument("--write", help="write the best configuration as a YAML engine config to this file")
    p.add_argument("--validate-paper", action="store_true",
                   help="the paper's 16 headline cells: paper vs predicted base, PipeDiT and speedup")
    p.add_argument("--validate-published", action="store_true",
                   help="published multi-GPU runs (xDiT's HunyuanVideo table, LightX2V's Wan table): published vs "
                        "predicted per cell, with its source")
    p.add_argument("--compare", metavar="LATENCY_JSON",
                   help="predicted vs measured batch time for every cell of a `pipedit bench latency` report")
    p.set_defaults(run=_run_plan)


def _check(args) -> None:
    from ..errors import UserInputError

    if args.inter_node <= 0:
        raise UserInputError(f"--inter-node must be a positive bandwidth in Gb/s, got {args.inter_node:g}")
    for name in ("gpus", "nodes", "height", "width", "frames", "steps", "prompts", "top"):
        if getattr(args, name) < 1:
            raise UserInputError(f"--{name} must be at least 1, got {getattr(args, name)}")
    if (args.frames - 1) % 4:
        raise UserInputError(f"--frames must be 4k+1 (1, 5, ..., 129), got {args.frames}")
    if args.height % 16 or args.width % 16:
        raise UserInputError(f"--height and --width must be multiples of 16, got {args.height}x{args.width}")


def _model(args):
    from ..errors import UserInputError
    from ..families import DEFAULT, family_for_release
    from ..planner.models import family_of, from_checkpoint, full_size

    if not args.model_path:
        model = full_size(args.model or DEFAULT)
    else:
        family = family_for_release(args.model).name if args.model else family_of(args.model_path)
        model = from_checkpoint(args.model_path, family)
    multiple = model.compression[1] * model.patch[1]
    if args.height % multiple or args.width % multiple:
        raise UserInputError(f"--height and --width must be multiples of {multiple} for {model.name}, "
                             f"got {args.height}x{args.width}")
    if args.idle_expert and model.experts < 2:
        raise UserInputError(f"--idle-expert applies to two-expert models (Wan2.2 A14B); {model.name} has one")
    return _with_requests(args, model)


def _guidance_applies(scale: float) -> bool:
    from ..guidance import guidance_applies  # imports torch: only when a scale is given

    return guidance_applies(scale)


def _with_requests(args, model):
    """What the requests add to the model: one forward per step at guidance <= 1, and the unfused
    LoRA adapters each denoise GPU holds."""
    from dataclasses import replace

    from ..errors import UserInputError
    from ..planner.memory import adapter_bytes, with_quantize

    if args.guidance_scale is not None and args.guidance_scale < 0:
        raise UserInputError(f"--guidance-scale must be >= 0, got {args.guidance_scale}")
    if args.lora_rank < 0 or args.loras < 1:
        raise UserInputError(f"--lora-rank must be 0 or more and --loras at least 1, got {args.lora_rank} and "
                             f"{args.loras}")
    if args.guidance_scale is not None and not _guidance_applies(args.guidance_scale):
        model = replace(model, cfg_batch=1)  # the conditional pass alone (the negative prompt is not encoded)
    model = with_quantize(model, args.quantize)
    if args.lora_rank:
        model = replace(model, lora_bytes=args.loras * adapter_bytes(model, args.lora_rank))
    return model


def _profile(args, model, shape, steps: int):
    """The GPU profile; for `--gpu this --model-path DIR`, scaled to a measured one-rank request of
    that checkpoint at `shape` (pipedit.runtime.calibration: a rank actor, cached per shape), with
    the per-collective latency of a measured 2-rank Ulysses step (pipedit.runtime.sp_calibration)."""
    from ..planner.calibrate import resolve_profile

    prof = resolve_profile(args.gpu)
    if getattr(args, "calibration", None):
        from ..planner.kernel_calibration import calibrated, check_profile, read_calibration

        measured = read_calibration(args.calibration)
        check_profile(measured, args.gpu)
        return calibrated(prof, measured)
    if args.gpu != "this" or not args.model_path:
        return prof
    import sys

    from ..config import EngineConfig, ModelConfig
    from ..planner.calibrate import scaled_to_model, with_step_collectives
    from ..request import VideoRequest
    from ..runtime.calibration import request_times
    from ..runtime.sp_calibration import SP_RANKS, sp_step_seconds

    config = EngineConfig(model=ModelConfig(path=args.model_path, device="cpu", dtype="float32"))
    request = VideoRequest("calibration: a red fox running through snow", height=shape.height, width=shape.width,
                           num_frames=shape.frames, steps=steps)
    print(f"pipedit plan: one-rank request of {args.model_path} at {shape.width}x{shape.height}x{shape.frames} "
          f"(measured once, cached) ...", file=sys.stderr, flush=True)
    t_denoise, t_decode = request_times(config, args.model_path, request)
    scaled = scaled_to_model(prof, model, shape, steps, t_denoise, t_decode)
    if model.heads < SP_RANKS:
        return scaled
    print(f"pipedit plan: {SP_RANKS}-rank Ulysses steps of the same request (measured once, cached) ...",
          file=sys.stderr, flush=True)
    return with_step_collectives(scaled, model, shape, SP_RANKS, sp_step_seconds(config, args.model_path, request))


def _node(args, prof, gpus: int):
    """`gpus` on one node (a --compare cell), or with --nodes M, M nodes of `gpus` each."""
    from dataclasses import replace

    from ..planner.hardware import make_node, node

    interconnect = args.interconnect or ("nvlink" if prof.nvlink_bandwidth else "pcie")
    if args.gpu != "this":
        node(args.gpu, gpus, interconnect)  # checks the flags
    one = make_node(prof, gpus, interconnect)
    nodes = getattr(args, "nodes", 1)
    if nodes == 1:
        return one
    return replace(one, gpus=gpus * nodes, nodes=nodes, inter_node_bandwidth=args.inter_node * 1e9 / 8)


def _compare(args, model) -> int:
    from ..errors import UserInputError
    from ..planner.compare import compare, format_compared, read_cells
    from ..planner.cost import Shape

    cells = read_cells(args.compare)
    if not cells:
        raise UserInputError(f"--compare {args.compare}: no measured cells without failures")
    first = cells[0]
    prof = _profile(args, model, Shape(first["height"], first["width"], first["frames"]), first["steps"])
    print(format_compared(compare(cells, model, lambda ranks: _node(args, prof, ranks))))
    return 0


def _run_plan(args) -> int:
    if args.validate_paper:
        from ..planner.paper import format_rows, validate

        print(format_rows(validate()))
        return 0
    if args.validate_published:
        from ..planner import published

        print(published.format_rows(published.validate(), published.validate(sp_overhead=0.0)))
        return 0
    _check(args)
    model = _model(args)
    if args.compare:
        return _compare(args, model)
    from ..planner.cost import Shape
    from ..planner.report import engine_config_yaml, plan_table
    from ..planner.search import Problem, candidates, rank

    shape = Shape(args.height, args.width, args.frames)
    prof = _profile(args, model, shape, args.steps)
    problem = Problem(model, _node(args, prof, args.gpus), shape, args.steps, args.prompts)
    idle = (args.idle_expert,) if args.idle_expert else ("resident", "offload")
    fitting, too_big = rank(problem, candidates(model, problem.node.gpus, idle, per_node=args.gpus))
    print(plan_table(problem, fitting, too_big, args.top))
    if args.write:
        from ..errors import UserInputError

        if not fitting:
            raise UserInputError("no configuration fits in GPU memory: nothing to write")
        device = "cpu" if args.gpu == "this" else "cuda"
        Path(args.write).write_text(engine_config_yaml(problem, fitting[0], args.model_path, device))
        print(f"wrote the best configuration to {args.write}")
    return 0
