"""One job through the official openai SDK, its mp4 downloaded; prints the file's path as JSON.

Usage: python sdk_sound_client.py BASE_URL OUT_DIR VIDEO_ID (run with PYTHONPATH at one SDK version)."""

import json
import sys
from pathlib import Path

import openai

from sdk_client import download, until_done


def main(base_url, out_dir, video_id):
    client = openai.OpenAI(base_url=f"{base_url}/v1", api_key="unused", max_retries=0)
    print(json.dumps({"files": download(client, [until_done(client, video_id)], Path(out_dir))}))


if __name__ == "__main__":
    main(*sys.argv[1:])
