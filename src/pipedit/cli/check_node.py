"""`pipedit check-node`: the command a user runs on a GPU node to validate it (pipedit.machine.check)."""

from __future__ import annotations


def add_parser(sub) -> None:
    from .flags import add_address_flag, add_shape_flags

    p = sub.add_parser("check-node", help="run every parallel configuration against the single-device result",
                       epilog="Before you rent the GPUs, dry-run the config on any machine: "
                              "pipedit dry-run --config FILE (memory per rank, collective matching).")
    p.add_argument("--model-path", help="checkpoint folder (default: the full-width synthetic HunyuanVideo on "
                                        "CUDA, built once into the cache; the demo model on CPU)")
    p.add_argument("--config", help="YAML engine config for model and generation settings; flags override it")
    add_address_flag(p)
    p.add_argument("--ranks", type=int, help="ranks to use (default: every visible GPU; 2 on CPU)")
    p.add_argument("--cases", help="comma-separated case names to run (default: all that fit; see the output)")
    add_shape_flags(p, {"height": 256, "width": 256, "num_frames": 17, "steps": 4})
    p.add_argument("--tolerance", type=float, help="max relative latent difference (default: 1e-4 fp32, 3e-2 bf16)")
    p.set_defaults(run=run)


def _config(args):
    from .flags import base_config

    config = base_config(args)
    config = config.with_overrides("model", path=args.model_path or _default_model(config))
    return config.with_overrides("generation", height=args.height, width=args.width, num_frames=args.num_frames,
                                 steps=args.steps)


def _default_model(config) -> str | None:
    if config.model.path or config.model.device_type() != "cuda":
        return None  # the configured model, or the embedded demo model
    from ..families import check_node_model

    found = check_node_model()
    return None if found is None else str(found)


def _select(cases, names: str | None):
    from ..errors import UserInputError

    if not names:
        return cases
    wanted = [name.strip() for name in names.split(",") if name.strip()]
    known = {case.name: case for case in cases}
    unknown = [name for name in wanted if name not in known]
    if unknown:
        raise UserInputError(f"unknown cases {unknown}; this node can run: {', '.join(known)}")
    return [known[name] for name in wanted]


def run(args) -> int:
    import torch

    from ..adapter import attention_heads
    from ..machine.check import check_node, default_tolerance, node_cases, passed
    from ..errors import UserInputError
    from ..runtime.engine import resolve_model_path
    from ..runtime.ray_instance import ensure_ray, stop_ray

    config = _config(args)
    ranks = args.ranks or (torch.cuda.device_count() if config.model.device_type() == "cuda" else 2)
    if ranks < 2:
        raise UserInputError(f"check-node needs at least 2 ranks, got {ranks}")
    heads = attention_heads(resolve_model_path(config.model.path, config.model.name), config.model.name)
    cases = _select(node_cases(ranks, heads), args.cases)
    tolerance = args.tolerance if args.tolerance is not None else default_tolerance(config)
    print(f"check-node: {len(cases)} configurations on {ranks} ranks ({config.model.device_type()}), "
          f"{args.height}x{args.width}x{args.num_frames}, {args.steps} steps, tolerance {tolerance:g}")
    started = ensure_ray(ranks)  # one Ray instance for every configuration
    try:
        if config.model.attention == "auto":
            print(_kernel_choice(config.model.device_type() == "cuda"))
        outcomes = check_node(config, cases, tolerance)
    finally:
        stop_ray(started)
    bad = [o.case.name for o in outcomes if not passed(o, tolerance)]
    print(f"{len(outcomes) - len(bad)} passed, {len(bad)} failed" + (f": {', '.join(bad)}" if bad else ""))
    return 1 if bad else 0


def _choose_on_a_device() -> dict:
    from ..attention.kernel_probe import choice_report, probe_device

    return choice_report(probe_device())


def _kernel_choice(use_gpu: bool) -> str:
    """What model.attention auto measures and picks on one of the node's devices, printed before
    the cases run. Measured in a Ray task that holds a GPU and exits after (max_calls=1), never in
    this driver process: a CUDA context here would sit on GPU 0 beside rank 0 for the whole run."""
    import ray

    from ..machine.environment import choice_text

    task = ray.remote(num_cpus=1, num_gpus=1 if use_gpu else 0, max_calls=1)(_choose_on_a_device)
    return "\n".join(choice_text(ray.get(task.remote())))
