"""The data folder every replica must share (its videos; the job store too when it is SQLite).

A replica writes the videos of the jobs it runs into the data folder and any replica serves their
downloads, so on a cluster the folder must be one shared folder mounted at the same path on
every node. A node without the mount would silently get a local folder of its own: its videos
would be missing everywhere else. So `pipedit serve` leaves a mark in the folder and hands it to
the replicas (an environment variable of the replicas' own, never of the server's process), and
each replica checks at start that its folder holds that mark.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from pipedit.errors import UserInputError

MARK_FILE = ".pipedit-data-folder"
ENV = "PIPEDIT_DATA_FOLDER_MARK"  # in the replicas' runtime_env (ray_app/deployment.py)


def mark(folder: str | Path) -> str:
    """The folder's mark, written the first time (kept afterwards, so replicas of an earlier
    start that Serve restarts still find theirs)."""
    path = Path(folder) / MARK_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with path.open("x") as file:
            file.write(secrets.token_hex(16))
    except FileExistsError:
        pass
    return path.read_text().strip()


def check(folder: str | Path, node: str) -> None:
    """Raises UserInputError, naming the node and the path, unless `folder` holds the mark
    `pipedit serve` handed to this replica (no mark handed: nothing to check)."""
    wanted = os.environ.get(ENV)
    if not wanted:
        return
    path = Path(folder) / MARK_FILE
    try:
        found = path.read_text().strip()
    except OSError:
        found = None
    if found != wanted:
        raise UserInputError(f"the replica on node {node} does not see the server's data folder at {folder} "
                             f"({'no ' + MARK_FILE if found is None else 'another server' + chr(39) + 's ' + MARK_FILE}"
                             f" there): mount one shared folder at {folder} on every node (serve.data_dir)")
