"""LTX-2's released configs (no weights) in the diffusers layout of the released repos (Lightricks/LTX-2,
rootonchair/LTX-2-19b-distilled, diffusers/LTX-2.3-Diffusers): model_index.json and each component's
config, for `pipedit dry-run` without --model-path and for the planner. The dims are .release's,
so the dry run and the planner describe the same models (a test compares parameter counts).

Not the release's: the tokenizer, its config only (the dry run's stub tokenizer fills every prompt to
the 1024 tokens LTX2Pipeline pads to)."""

from __future__ import annotations

from pathlib import Path

from pipedit.dryrun.released import write_config

from . import release

def model_index(name: str) -> dict:
    """model_index.json of release `name`: the connectors' and vocoder's library is "ltx2" (diffusers'
    name for its pipelines.ltx2 module), as in the released repos."""
    index = {"_class_name": "LTX2Pipeline", "scheduler": ["diffusers", "FlowMatchEulerDiscreteScheduler"],
             "tokenizer": ["transformers", "GemmaTokenizerFast"],
             "text_encoder": ["transformers", "Gemma3ForConditionalGeneration"]}
    for folder, config in release.COMPONENTS[name].items():
        if folder != "text_encoder":
            class_name = config["_class_name"]
            index[folder] = [release.LIBRARY.get(class_name, "diffusers"), class_name]
    return index


def write_release(name: str, root: Path) -> Path:
    """`name` is one of release.RELEASES."""
    root = Path(root)
    write_config(root, "model_index.json", model_index(name))
    for folder, config in release.COMPONENTS[name].items():
        write_config(root / folder, "config.json", config)
    write_config(root / "tokenizer", "tokenizer_config.json",
                 {"tokenizer_class": "GemmaTokenizer", "padding_side": "left", "model_max_length": release.TEXT_TOKENS})
    scheduler = release.DISTILLED_SCHEDULER if name in release.DISTILLED else release.SCHEDULER
    write_config(root / "scheduler", "scheduler_config.json", scheduler)
    return root
