"""Drives a pipedit server with the official openai SDK; prints one JSON line of what it saw.

Usage: python sdk_client.py BASE_URL OUT_DIR (run with PYTHONPATH at one SDK version)."""

import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import openai

JOBS = [("a red fox in the snow", 5), ("a boat at dawn", 9), ("rain on a window", 5)]


def create(client, prompt, frames):
    return client.videos.create(prompt=prompt, size="64x64",
                                extra_body={"num_frames": frames, "num_inference_steps": 2})


def until_done(client, video_id, timeout=120):
    deadline = time.monotonic() + timeout
    video = client.videos.retrieve(video_id)
    while video.status not in ("completed", "failed", "cancelled"):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{video_id} still {video.status}")
        time.sleep(0.2)
        video = client.videos.retrieve(video_id)
    return video


def download(client, videos, out_dir) -> list[str]:
    """Each video's mp4 into out_dir; the paths."""
    files = []
    for video in videos:
        path = Path(out_dir) / f"{video.id}.mp4"
        path.write_bytes(client.videos.download_content(video.id).content)
        files.append(str(path))
    return files


def main(base_url, out_dir):
    client = openai.OpenAI(base_url=f"{base_url}/v1", api_key="unused", max_retries=0)
    with ThreadPoolExecutor(len(JOBS)) as pool:  # three jobs at once
        created = list(pool.map(lambda job: create(client, *job), JOBS))
    videos = [until_done(client, v.id) for v in created]
    files = download(client, videos, out_dir)
    first_page = client.videos.list(limit=2, order="asc")
    every_id = [v.id for v in client.videos.list(limit=2, order="asc")]  # follows has_more / last_id
    try:
        client.videos.retrieve("video_unknown")
        missing = None
    except openai.NotFoundError as error:
        missing = {"status": error.status_code, "code": error.code}
    deleted = client.videos.delete(videos[-1].id)
    try:  # a body over the server's cap while the SDK is still sending it: the 413, not a reset
        client.videos.create(prompt="a" * (21 << 20), size="64x64")
        oversized = None
    except openai.APIStatusError as error:
        oversized = {"status": error.status_code, "code": error.code}
    except openai.APIConnectionError as error:
        oversized = {"connection_error": repr(error.__cause__)}
    try:  # this server offers no LoRA adapters: the name reaches the check (3.x: as bracket form fields)
        client.videos.create(prompt="a fox", size="64x64", extra_body={"loras": [{"name": "anime", "scale": 0.5}]})
        adapter = None
    except openai.BadRequestError as error:
        adapter = {"status": error.status_code, "code": error.code, "param": error.param}
    print(json.dumps({
        "adapter": adapter,
        "oversized": oversized,
        "version": openai.__version__,
        "created": [v.model_dump() for v in created],
        "videos": [v.model_dump() for v in videos],
        "files": files,
        "first_page": {"ids": [v.id for v in first_page.data], "has_more": first_page.has_more,
                       "last_id": first_page.last_id},
        "every_id": every_id,
        "missing": missing,
        "deleted": deleted.model_dump(),
    }))


if __name__ == "__main__":
    main(*sys.argv[1:3])
