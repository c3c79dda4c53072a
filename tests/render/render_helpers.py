"""Helpers for the render tests: prompts files, manifests, counting engine submits."""

import json
from pathlib import Path


def write_jsonl(path: Path, lines: list) -> Path:
    """Objects become JSON lines; strings are written as they are (to make broken lines)."""
    path.write_text("".join((item if isinstance(item, str) else json.dumps(item)) + "\n" for item in lines))
    return path


def read_manifest(out_dir: Path) -> list[dict]:
    return [json.loads(text) for text in (out_dir / "manifest.jsonl").read_text().splitlines()]


class SubmitCounter:
    def __init__(self):
        self.prompts: list[str] = []

