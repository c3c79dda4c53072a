"""manifest.jsonl beside the videos: one JSON object per prompt line, rewritten after every
finished line.

Invariants: the manifest is written aside and renamed, so a crash leaves either the old or the
new one, never half of one. A video counts as done only if its entry says done with the line's
current settings key and the file on disk has the recorded size and sha256 (a file a crash cut
short, or one edited by hand, renders again).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from ..video import fsync_dir
from .prompts import RenderLine

MANIFEST = "manifest.jsonl"


def load(out_dir: Path) -> dict[str, dict]:
    """The previous run's entries by name; unreadable lines are ignored (those lines render again)."""
    path = out_dir / MANIFEST
    entries: dict[str, dict] = {}
    if not path.is_file():
        return entries
    for text in path.read_text(encoding="utf-8").splitlines():
        try:
            entry = json.loads(text)
        except json.JSONDecodeError:
            continue
        if isinstance(entry, dict) and isinstance(entry.get("name"), str):
            entries[entry["name"]] = entry
    return entries


def write(out_dir: Path, entries: list[dict]) -> Path:
    """Writes aside, fsyncs, renames. OSError (e.g. ENOSPC) leaves the previous manifest and no
    partial file behind."""
    path = out_dir / MANIFEST
    partial = out_dir / f".{MANIFEST}.partial"
    try:
        with open(partial, "w", encoding="utf-8") as file:
            for entry in entries:
                file.write(json.dumps(entry, sort_keys=False) + "\n")
            file.flush()
            os.fsync(file.fileno())
        os.replace(partial, path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    fsync_dir(out_dir)
    return path


def file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def is_complete(entry: dict | None, line: RenderLine, out_dir: Path) -> bool:
    if not entry or entry.get("status") != "done" or entry.get("key") != line.key:
        return False
    video = out_dir / line.file_name
    if entry.get("file") != line.file_name or not video.is_file():
        return False
    return video.stat().st_size == entry.get("bytes") and file_digest(video) == entry.get("sha256")


def entry_for(line: RenderLine, status: str, **extra) -> dict:
    """A manifest line: where the prompt came from, every setting, and what happened to it."""
    entry = {"line": line.number, "name": line.name, "status": status, "key": line.key if line.settings else None}
    entry.update(line.settings)
    entry.update(extra)
    return entry


def done_entry(line: RenderLine, out_dir: Path, timings: dict, latency_s: float) -> dict:
    video = out_dir / line.file_name
    return entry_for(line, "done", file=line.file_name, bytes=video.stat().st_size, sha256=file_digest(video),
                     latency_s=round(latency_s, 3), timings={k: round(v, 4) for k, v in timings.items()})
