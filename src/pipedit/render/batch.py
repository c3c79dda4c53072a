"""One render run: which lines still need a video, progress, the manifest, the summary.

Runners (local.py, remote.py) do the rendering and report back through `step` and `finished`,
always from the thread that called `run` (the manifest and the bar are not shared across threads).

Exit codes of `run`: 0 every line has its video; 1 some line failed; EXIT_OUTPUT_ERROR (3) the
output folder could not be written (the manifest, or a video on a full disk): the run stops
with one line on stderr, and a rerun resumes once there is room.
"""

from __future__ import annotations

import errno
import sys
from collections.abc import Callable
from pathlib import Path

from tqdm import tqdm

from . import manifest
from .prompts import RenderLine

Runner = Callable[[list[RenderLine], Path, "Batch"], None]
EXIT_OUTPUT_ERROR = 3


class OutputError(Exception):
    """The output folder cannot be written (e.g. the disk is full): the run cannot go on."""


def stops_the_run(error: OSError) -> bool:
    """Write errors after which no later line could be written either."""
    return error.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS)


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
        """Renders what is pending; returns the exit code (0 only when every line has its video;
        1 when a line failed; EXIT_OUTPUT_ERROR when the output folder cannot be written)."""
        try:
            try:
                self.out_dir.mkdir(parents=True, exist_ok=True)
                self._remove_partials()
                self._save()
                if self.pending:
                    runner(self.pending, self.out_dir, self)
            finally:
                self.bar.close()
            for line in self.pending:  # a runner that returned without reporting a line
                if line.name not in self.outcome:
                    self.finished(line, error="the renderer stopped before this line finished")
        except OutputError as error:
            print(f"pipedit: error: {error}; free some space and rerun the same command to resume",
                  file=sys.stderr)
            return EXIT_OUTPUT_ERROR
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

    def write_failed(self, line: RenderLine, error: OSError) -> None:
        """A runner could not write `line`'s video: the line fails; on a full disk the run stops."""
        self.finished(line, error=str(error))
        if stops_the_run(error):
            raise OutputError(f"cannot write {self.out_dir / line.file_name}: {error}")

    def _save(self) -> None:
        path = self.out_dir / manifest.MANIFEST
        try:
            manifest.write(self.out_dir, [self.entries[line.name] for line in self.lines])
        except OSError as error:
            raise OutputError(f"cannot write {path}: {error.strerror or error}") from None

    def _remove_partials(self) -> None:
        """Temporary files a killed run left for the lines about to render."""
        from ..video import temp_name

        for line in self.pending:
            temp_name(self.out_dir / line.file_name).unlink(missing_ok=True)

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
