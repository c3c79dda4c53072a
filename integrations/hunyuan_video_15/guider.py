"""The checkpoint's guider (guider/guider_config.json, diffusers' ClassifierFreeGuidance), as
pipedit runs it: the request's guidance_scale replaces the guider's (which is diffusers' default
for the checkpoint); `enabled` false marks a checkpoint that runs without guidance (a
guidance-distilled release): the conditional pass alone, whatever the request's scale. The
guider's other options are refused at load, naming what runs."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from pipedit.errors import ModelPathError

_RUNS = {"guidance_rescale": 0.0, "use_original_formulation": False, "start": 0.0, "stop": 1.0}


@dataclass(frozen=True)
class Guider:
    enabled: bool = True
    guidance_scale: float = 6.0  # diffusers' scale for this checkpoint (pipedit's requests set their own)

    @classmethod
    def read(cls, root: str | Path, index: dict) -> "Guider":
        entry = index.get("guider")
        if not entry or entry[1] is None:
            return cls()
        if entry[1] != "ClassifierFreeGuidance":
            raise ModelPathError(f"{root}: guider {entry[1]} is not supported; pipedit runs ClassifierFreeGuidance")
        file = Path(root) / "guider" / "guider_config.json"
        try:
            config = json.loads(file.read_text())
        except (OSError, ValueError) as error:
            raise ModelPathError(f"{file} is missing or not valid JSON ({error})") from error
        unsupported = {key: config[key] for key, value in _RUNS.items() if key in config and config[key] != value}
        if unsupported:
            runs = ", ".join(f"{key} {value}" for key, value in _RUNS.items())
            raise ModelPathError(f"{file}: {unsupported} is not supported; pipedit runs classifier-free guidance "
                                 f"with {runs}")
        return cls(enabled=bool(config.get("enabled", True)), guidance_scale=float(config.get("guidance_scale", 6.0)))
