"""The official openai SDK in several versions side by side, each in its own folder under the
repository's ignored .cache, installed on first use and run in a subprocess (PYTHONPATH)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# The 3.x line always sends create as multipart/form-data; 2.x sends JSON: both must work.
VERSIONS = {"openai-3": "openai==3.51.0", "openai-2": "openai==2.26.0"}
CLIENT = Path(__file__).with_name("sdk_client.py")


def sdk_folder(name: str) -> Path:
    """The folder holding that SDK version, installed with pip on first use (skips offline)."""
    folder = ROOT / ".cache" / name
    if (folder / "openai" / "__init__.py").is_file():
        return folder
    command = [sys.executable, "-m", "pip", "install", "-q", "--target", str(folder), VERSIONS[name]]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        pytest.skip(f"could not install {VERSIONS[name]} (is PyPI reachable?): {result.stderr.strip()[-300:]}")
    return folder


def run_client(name: str, base_url: str, out_dir: Path, timeout: float = 150, client: Path = CLIENT,
               args: tuple = ()) -> dict:
    """Runs `client` (sdk_client.py) against the server with that SDK, with BASE_URL OUT_DIR and
    `args`; returns the JSON it prints."""
    env = dict(os.environ, PYTHONPATH=str(sdk_folder(name)))
    result = subprocess.run([sys.executable, str(client), base_url, str(out_dir), *map(str, args)], env=env,
                            capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"{name} client failed:\n{result.stdout}\n{result.stderr}"
    return json.loads(result.stdout.strip().splitlines()[-1])
