"""Flag groups and argument types that several commands share, and the EngineConfig they build."""

from __future__ import annotations

import argparse

from ..errors import UserInputError
from ..fields import FIELDS, GenerationField, config_fields


def integer(text: str) -> int:
    # Range checks belong to the request and config validation, which name what is allowed.
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got '{text}'") from None


def pipesp_chunk(text: str) -> int | str:
    if text in ("auto", "off"):
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, 'auto' or 'off', got '{text}'") from None


def decode_ranks(text: str) -> int | str:
    return text if text == "auto" else integer(text)


def add_engine_flags(p, seed_help: str) -> None:
    """Model, generation and parallel flags, shared by generate and render (see engine_config)."""
    p.add_argument("--model-path", help="checkpoint folder: diffusers layout, or the official Open-Sora-Plan "
                                        "v1.3 layout (default: the embedded demo model)")
    add_model_flags(p)
    p.add_argument("--config", help="YAML engine config (see configs/); flags override it")
    for spec in config_fields():
        add_field_flag(p, spec, help=seed_help if spec.name == "seed" else None)
    p.add_argument("--ulysses", type=integer, help="Ulysses sequence-parallel degree")
    p.add_argument("--ring", type=integer, help="Ring sequence-parallel degree")
    p.add_argument("--pipesp-chunk", type=pipesp_chunk, help="heads per PipeSP chunk: N, auto or off")
    p.add_argument("--cfg-parallel", action="store_true", default=None,
                   help="guidance's conditional and unconditional passes on two rank groups (models with CFG)")
    p.add_argument("--vae-tiling", choices=("auto", "on", "off"),
                   help="tiled VAE decode: auto (on CUDA when an untiled decode would not fit), on or off")
    add_compile_flag(p)
    add_speed_flags(p)
    add_pipeline_flags(p)
    add_address_flag(p)


def add_speed_flags(p) -> None:
    """--attention and --quantize (config model.attention, model.quantize), shared by generate,
    render and serve; the config checks the values (pipedit.config)."""
    p.add_argument("--attention", help="attention kernel: auto (the fastest exact one, measured at start), sdpa, "
                                       "sdpa-cudnn, sdpa-flash, sdpa-efficient, flash, flash3, xformers, or sage "
                                       "(8-bit, lossy; not with --ring > 1)")
    p.add_argument("--quantize", help="fp8: the DiT's linear layers in float8 (GPUs of compute capability >= 8.9); "
                                      "none (default): the serving dtype")


def add_address_flag(p) -> None:
    """--address: the Ray cluster to attach to (pipedit.runtime.ray_instance; main passes it on as RAY_ADDRESS)."""
    p.add_argument("--address", help="Ray cluster address (default: RAY_ADDRESS, else an instance of this "
                                     "command's own, on loopback; never another one left on this machine)")


def add_compile_flag(p, help: str | None = None) -> None:
    """--compile, shared by generate, render, serve and bench sp (config model.compile)."""
    p.add_argument("--compile", action="store_true", default=None,
                   help=help or "torch.compile the transformer's repeated blocks on the denoise ranks (regional; "
                                "the first step of each new shape pays the compile time)")


def add_field_flag(p, spec: GenerationField, help: str | None = None, *, flag: str | None = None,
                   default=None) -> None:
    """`--<name>` (or `flag`) of a generation field (pipedit.fields), parsed by its type; its value
    is checked where the config or the request takes it, so that the words are every interface's.
    Fields with a canonical form (cache) are checked here already: argparse names the flag."""
    if spec.canonical is not None:
        def parse(text: str):
            try:
                return spec.check(text)
            except UserInputError as error:
                raise argparse.ArgumentTypeError(str(error)) from None
    else:
        parse = {int: integer, float: float, str: str}[spec.kind]
    p.add_argument(flag or spec.flag, type=parse, default=default, help=help or spec.description)


SHAPE = ("height", "width", "num_frames", "steps")


def add_shape_flags(p, defaults: dict | None = None, *, names: tuple[str, ...] = SHAPE, frames_flag: str | None = None,
                    helps: dict | None = None) -> None:
    """A tool command's `--height/--width/--num-frames/--steps` (those of `names`), from their
    fields: `defaults` the command's own by field name (left out: None, which the command reads as
    the config's), `frames_flag` the frame count's flag where the command calls it otherwise
    (`--frames`), `helps` a field's help where the command says more than its description."""
    defaults, helps = defaults or {}, helps or {}
    for name in names:
        spec, default = FIELDS[name], defaults.get(name)
        shown = f"default {default}" if default is not None else f"default: the config's generation.{name}"
        add_field_flag(p, spec, helps.get(name) or f"{spec.label.lower()} ({shown})", default=default,
                       flag=frames_flag if name == "num_frames" else None)


def request_only_flags() -> list[GenerationField]:
    """Fields with a flag and no config default (`generate --negative-prompt`): one request's."""
    return [spec for spec in FIELDS.values() if spec.cli and not spec.in_config]


def add_cache_flag(p) -> None:
    """--cache, shared by generate, render, serve and the benches (config generation.cache)."""
    add_field_flag(p, FIELDS["cache"])


def add_model_flags(p) -> None:
    from ..families import accepting, family_names

    p.add_argument("--model", choices=family_names(),
                   help="model family (default: model_index.json decides, else the official layout found)")
    p.add_argument("--text-encoder-path",
                   help=f"{', '.join(accepting('text_encoder_path'))}: the text encoder + tokenizer folder as its "
                        "release publishes it (default: MODEL_PATH/text_encoder)")
    add_idle_expert_flag(p)
    add_lora_flags(p)


def lora(text: str):
    from ..lora.spec import parse_lora

    try:
        return parse_lora(text)
    except UserInputError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def add_lora_flags(p) -> None:
    """--lora (repeatable; config model.run_loras) and --fuse-loras (model.fuse_loras), shared by
    generate, render, serve and the benches that run a model."""
    p.add_argument("--lora", type=lora, action="append",
                   help="LoRA adapter on the DiT for the whole run: PATH[:SCALE[:EXPERTS]] (scale default 1.0; "
                        "experts transformer (default), transformer_2 or both for Wan2.2 A14B); repeatable; "
                        "replaces the config's model.run_loras")
    p.add_argument("--fuse-loras", action="store_true", default=None,
                   help="merge the --lora adapters into the DiT's weights at load (no per-step cost)")


def lora_overrides(args) -> dict:
    """The model section's values of add_lora_flags' flags (None: not given)."""
    return {"run_loras": tuple(args.lora) if args.lora else None, "fuse_loras": args.fuse_loras}


def add_idle_expert_flag(p) -> None:
    """--idle-expert (config model.idle_expert), shared by generate, render, serve and bench sp."""
    p.add_argument("--idle-expert", choices=("resident", "offload"),
                   help="two-expert models (Wan2.2 A14B): keep both experts on each denoise GPU (resident, default) "
                        "or the idle one on the host, swapped once per request (offload; nothing moves on CPU)")


def add_pipeline_flags(p) -> None:
    """DeDiVAE and Aco flags, shared by generate, render and bench pipeline."""
    p.add_argument("--decode-ranks", type=decode_ranks,
                   help="VAE decode ranks beside the denoise ranks (DeDiVAE): N, or auto (balance rule; needs --ranks)")
    p.add_argument("--ranks", type=integer, help="total ranks (denoise + decode); with --decode-ranks auto")
    p.add_argument("--aco", choices=("off", "on", "auto"), help="idle decode ranks compute attention heads")
    p.add_argument("--text-encoder", choices=("auto", "dit", "vae"), help="which group holds the text encoders")
    p.add_argument("--handoff", choices=("object_store", "p2p"), help="latent handoff from denoise to decode ranks (default p2p)")
    p.add_argument("--split-decode", choices=("auto", "off"),
                   help="auto: all idle decode ranks share one video's decode; off: one video per decode rank")
    add_nodes_flag(p)


def add_nodes_flag(p) -> None:
    """--nodes, shared by generate, render, serve and bench pipeline (config parallel.nodes)."""
    p.add_argument("--nodes", type=integer,
                   help="nodes one rank group spans: ranks split evenly over them, Ulysses inside a node, Ring "
                        "across nodes (a Ray cluster of that many nodes: --address)")


def base_config(args):
    """The --config file's EngineConfig, else the defaults."""
    from ..config import EngineConfig, load_config

    return load_config(args.config) if args.config else EngineConfig()


def engine_config(args):
    """The EngineConfig of add_engine_flags' flags: the --config file, flags override it."""
    config = base_config(args)
    config = config.with_overrides("model", path=args.model_path, vae_tiling=args.vae_tiling, name=args.model,
                                   text_encoder_path=args.text_encoder_path, compile=args.compile,
                                   idle_expert=args.idle_expert, attention=args.attention, quantize=args.quantize,
                                   **lora_overrides(args))
    config = config.with_overrides("parallel", ulysses=args.ulysses, ring=args.ring, pipesp_chunk=args.pipesp_chunk,
                                   cfg_parallel=args.cfg_parallel)
    config = pipeline_overrides(config, args)
    return config.with_overrides("generation", **{spec.name: getattr(args, spec.name) for spec in config_fields()})


def pipeline_overrides(config, args):
    return config.with_overrides(
        "parallel", decode_ranks=args.decode_ranks, ranks=args.ranks, aco=args.aco,
        text_encoder=args.text_encoder, handoff=args.handoff, split_decode=args.split_decode, nodes=args.nodes,
    )
