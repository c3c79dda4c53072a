"""One render run: which lines still need a video, progress, the manifest, the summary.

Runners (local.py, remote.py) do the rendering and report back through `step` and `finished`,
always from the thread that called `run` (the manifest and the bar are not shared across threads).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from tqdm import tqdm

from . import manifest
from .prompts import RenderLine

Runner = Callable[[list[RenderLine], Path, "Batch"], None]


class Batch:
    def __init__(self, lines: list[RenderLine], out_dir: Path, quiet: bool = False):
        self.lines, self.out_dir = lines, out_dir
        previous = manifest.load(out_dir)
        self.entries: dict[str, dict] = {}
        self.outcome: dict[str, str] = {}  # name -> done, skipped or failed, for this run's summary
        self.pending: list[RenderLine] = []
        for line in lines:
            old = previous.get(line.name)
            if line.error:
                self._record(line, manifest.entry_for(line, "failed", error=line.error), "failed")
            elif manifest.is_complete(old, line, out_dir):
                self._record(line, dict(old, line=line.number), "skipped")
            else:
                self.entries[line.name] = manifest.entry_for(line, "pending")
                self.pending.append(line)
        self.bar = tqdm(total=len(lines), initial=len(lines) - len(self.pending), unit="video",
                        desc="rendering", file=sys.stderr, disable=quiet)

    def run(self, runner: Runner) -> int:
        """Renders what is pending; returns the exit code (0 only when every line has its video)."""
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self._save()
        try:
            if self.pending:
                runner(self.pending, self.out_dir, self)
        finally:
            self.bar.close()
        for line in self.pending:  # a runner that returned without reporting a line
            if line.name not in self.outcome:
                self.finished(line, error="the renderer stopped before this line finished")
        print(self.summary())
        return 0 if all(status != "failed" for status in self.outcome.values()) else 1

    # -- what runners call ------------------------------------------------------------------
    def step(self, line: RenderLine, step: int, total: int) -> None:
        self.bar.set_postfix_str(f"{line.name} step {step}/{total}", refresh=True)

    def finished(self, line: RenderLine, error: str | None = None, timings: dict | None = None,
                 latency_s: float = 0.0) -> None:
        if error is None:
            entry = manifest.done_entry(line, self.out_dir, timings or {}, latency_s)
            self._record(line, entry, "done")
        else:
            self._record(line, manifest.entry_for(line, "failed", error=error), "failed")
        self._save()
        self.bar.set_postfix_str(f"{line.name} {self.outcome[line.name]}", refresh=False)
        self.bar.update(1)

    # -- internals --------------------------------------------------------------------------
    def _record(self, line: RenderLine, entry: dict, outcome: str) -> None:
        self.entries[line.name] = entry
        self.outcome[line.name] = outcome

    def _save(self) -> None:
        manifest.write(self.out_dir, [self.entries[line.name] for line in self.lines])

    def summary(self) -> str:
        rows = [("line", "name", "status", "latency", "file / error")]
        for line in self.lines:
            entry, status = self.entries[line.name], self.outcome.get(line.name, "pending")
            latency = f"{entry['latency_s']:.2f} s" if status == "done" else "-"
            detail = entry.get("error", "") if status == "failed" else entry.get("file", "")
            rows.append((str(line.number), line.name, status, latency, detail))
        widths = [max(len(row[i]) for row in rows) for i in range(4)]
        table = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)) + "  " + row[4] for row in rows]
        counts = {s: sum(1 for v in self.outcome.values() if v == s) for s in ("done", "skipped", "failed")}
        table.append(f"{counts['done']} rendered, {counts['skipped']} skipped (already complete), "
                     f"{counts['failed']} failed; manifest: {self.out_dir / manifest.MANIFEST}")
        return "\n".join(table)
