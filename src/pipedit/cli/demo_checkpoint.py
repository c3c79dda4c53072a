"""`pipedit demo-checkpoint DIR`: write an offline synthetic checkpoint in a release layout."""

from __future__ import annotations

from ..errors import UserInputError


def add_parser(sub) -> None:
    from ..families import DEFAULT, families, load

    p = sub.add_parser("demo-checkpoint", help="write an offline synthetic checkpoint (default: the tiny HunyuanVideo demo)")
    p.add_argument("directory", help="folder to create (the model's release layout)")
    p.add_argument("--model", choices=tuple(entry.name for entry in families()), default=DEFAULT,
                   help="; ".join(f"{entry.name}: {entry.demo.about}" for entry in families() if entry.demo.about))
    presets = []
    for entry in families():
        if entry.demo.presets:
            default, described = load(entry.demo.presets)()
            listed = "; ".join(f"{name}: {about}" for name, about in described.items())
            presets.append(f"{entry.name} (default {default}): {listed}")
    p.add_argument("--preset", default=None, help=". ".join(presets))
    p.set_defaults(run=run)


def run(args) -> int:
    from ..families import families, family, load

    entry = family(args.model)
    write = load(entry.demo.write)
    if not entry.demo.presets:
        if args.preset is not None:
            with_presets = [other.name for other in families() if other.demo.presets]
            raise UserInputError(f"--preset applies to {' and '.join(with_presets)} only")
        return _write_and_print(write, args.directory)
    default, described = load(entry.demo.presets)()
    return _write_and_print(write, args.directory, args.preset or default)


def _write_and_print(write, directory, *options) -> int:
    try:
        path = write(directory, *options)
    except FileExistsError as error:
        raise UserInputError(str(error)) from None
    print(path)
    return 0
