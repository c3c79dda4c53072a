"""A hub cache laid out as huggingface_hub lays it out, built from the tiny checkpoints tests
write: <cache>/models--ORG--NAME/blobs/<sha256>, snapshots/<commit>/<file> (links to the blobs)
and refs/<branch> naming a commit. The library reads it offline (HF_HUB_OFFLINE=1) as a cache it
filled itself; no network is involved."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path


def add_snapshot(cache: Path, repo: str, folder: Path, commit: str, ref: str | None = "main") -> Path:
    """Every file under `folder` as the snapshot `commit` of `repo` (a 40-hex commit); `ref`, when
    given, names it. Returns the snapshot folder."""
    root = cache / ("models--" + repo.replace("/", "--"))
    blobs = root / "blobs"
    blobs.mkdir(parents=True, exist_ok=True)
    snapshot = root / "snapshots" / commit
    for file in sorted(p for p in folder.rglob("*") if p.is_file()):
        data = file.read_bytes()
        blob = blobs / hashlib.sha256(data).hexdigest()
        if not blob.exists():
            blob.write_bytes(data)
        link = snapshot / file.relative_to(folder)
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    if ref is not None:
        (root / "refs").mkdir(exist_ok=True)
        (root / "refs" / ref).write_text(commit)
    return snapshot
