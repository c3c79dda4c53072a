"""One video created through the official openai SDK (size, frames and fps given), waited for and its
mp4 downloaded; prints the video and the file's path as JSON.

Usage: python sdk_one_video_client.py BASE_URL OUT_DIR SIZE FRAMES FPS (run with PYTHONPATH at one SDK version)."""

import json
import sys
from pathlib import Path

import openai

from sdk_client import download, until_done


def main(base_url, out_dir, size, frames, fps):
    client = openai.OpenAI(base_url=f"{base_url}/v1", api_key="unused", max_retries=0)
    created = client.videos.create(prompt="a bell in the snow", size=size,
                                   extra_body={"num_frames": int(frames), "fps": int(fps)})
    video = until_done(client, created.id)
    print(json.dumps({"video": video.model_dump(), "files": download(client, [video], Path(out_dir))}))


if __name__ == "__main__":
    main(*sys.argv[1:])
