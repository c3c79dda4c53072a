"""`pipedit generate --prompt TEXT --output FILE.mp4`: one video (pipedit.render.single)."""

from __future__ import annotations

from pathlib import Path

from .flags import add_engine_flags, add_field_flag, engine_config, request_only_flags


def add_parser(sub) -> None:
    from ..families import takers

    p = sub.add_parser("generate", help="generate one video from a prompt")
    p.add_argument("--prompt", required=True, help="text describing the video")
    p.add_argument("--output", required=True, help="path of the mp4 to write")
    p.add_argument("--image", help="image-to-video: the first frame's image (png, jpeg or webp), for models that "
                                   f"take one ({', '.join(takers('image'))})")
    for spec in request_only_flags():  # --negative-prompt
        add_field_flag(p, spec)
    p.add_argument("--save-latents", help="also save the final latents (torch.save) to this path; for a model "
                                           "with sound a dict of the video's latents and audio_latents")
    add_engine_flags(p, seed_help="seed of the CPU torch.Generator that draws the initial noise")
    p.set_defaults(run=run)


def run(args) -> int:
    from ..render.single import generate_to_file

    output = generate_to_file(engine_config(args), args.prompt, Path(args.output), args.save_latents,
                              image_path=Path(args.image) if args.image else None,
                              **{spec.name: getattr(args, spec.name) for spec in request_only_flags()})
    print(output.resolve())
    return 0
