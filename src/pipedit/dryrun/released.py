"""The released models' configs (no weights), written in the layouts their adapters read, for a dry
run without --model-path: each family writes its own releases (its pipedit.families entry's
dry_run.released), with the widths and depths of its planner's full-size specs."""

from __future__ import annotations

import json
from pathlib import Path

from pipedit import families
from pipedit.errors import UserInputError


def write_config(folder: Path, name: str, config: dict) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(json.dumps(config, indent=1))


def released_checkpoint(model: str, folder: str | Path) -> Path:
    """Writes `model`'s released configs into `folder` (no weights); returns the folder."""
    root = Path(folder)
    sizes = families.full_size_models()
    if model not in sizes:
        entry = families.find(model)
        if entry is not None:
            raise UserInputError(f"dry-run needs the {model} release to model without --model-path: --model "
                                 f"{' | '.join(families.load(entry.planner.full_size))}")
        raise UserInputError(f"dry-run has no released configs for {model!r}: use --model {', '.join(sizes)}, "
                             f"or give --model-path")
    entry = families.family_for_release(model)
    return families.load(entry.dry_run.released)(model, root)
