"""`pipedit demo-checkpoint DIR`: write an offline synthetic checkpoint in a release layout."""

from __future__ import annotations

from ..errors import UserInputError


def add_parser(sub) -> None:
    from ..integrations.hunyuan_video.presets import DEFAULT_PRESET, PRESETS
    from ..integrations.wan import presets as wan_presets

    p = sub.add_parser("demo-checkpoint", help="write an offline synthetic checkpoint (default: the tiny HunyuanVideo demo)")
    p.add_argument("directory", help="folder to create (the model's release layout)")
    p.add_argument("--model", choices=("hunyuan-video", "opensora-plan", "wan"), default="hunyuan-video",
                   help="opensora-plan: a tiny model in the official v1.3 layout (any93x640x640/, vae/, text_encoder/); "
                        "wan: a tiny Wan in the diffusers layout (the --preset names which)")
    hunyuan = "; ".join(f"{name}: {about}" for name, (_, _, about) in PRESETS.items())
    wan = "; ".join(f"{name}: {preset.about}" for name, preset in wan_presets.PRESETS.items())
    p.add_argument("--preset", default=None,
                   help=f"hunyuan-video (default {DEFAULT_PRESET}): {hunyuan}. wan (default {wan_presets.DEFAULT_PRESET}): {wan}")
    p.set_defaults(run=run)


def run(args) -> int:
    from ..integrations.hunyuan_video.presets import DEFAULT_PRESET, write_preset

    if args.model == "opensora-plan":
        from ..integrations.opensora_plan.demo_checkpoint import write_demo_cli

        if args.preset is not None:
            raise UserInputError("--preset applies to hunyuan-video and wan only")
        print(write_demo_cli(args.directory))
        return 0
    if args.model == "wan":
        from ..integrations.wan import presets as wan_presets
        from ..integrations.wan.demo_checkpoint import write_demo_checkpoint

        preset = args.preset or wan_presets.DEFAULT_PRESET
        wan_presets.check_preset(preset)
        return _write_and_print(lambda directory: write_demo_checkpoint(directory, preset=preset), args.directory)
    return _write_and_print(write_preset, args.directory, args.preset or DEFAULT_PRESET)


def _write_and_print(write, directory, *options) -> int:
    try:
        path = write(directory, *options)
    except FileExistsError as error:
        raise UserInputError(str(error)) from None
    print(path)
    return 0
