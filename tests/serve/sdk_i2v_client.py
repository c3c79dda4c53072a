"""Image-to-video with the official openai SDK: `input_reference=open(path, "rb")` (a multipart
file part, in 2.x and 3.x), and OpenAI's object form {"image_url": <data URL>} through extra_body
(3.x sends it as the multipart field input_reference[image_url], 2.x as JSON; 3.51's own
input_reference= refuses the object it is typed to take). Prints one JSON line of what it saw.

Usage: python sdk_i2v_client.py BASE_URL OUT_DIR IMAGE_A IMAGE_B (PYTHONPATH at one SDK version)."""

import base64
import json
import sys
from pathlib import Path

import openai
from sdk_client import download, until_done  # run as a script: its folder is on sys.path

SETTINGS = {"num_frames": 5, "num_inference_steps": 2, "seed": 11, "negative_prompt": "blurry"}


def main(base_url, out_dir, image_a, image_b):
    client = openai.OpenAI(base_url=f"{base_url}/v1", api_key="unused", max_retries=0)
    with open(image_a, "rb") as file:
        created = [client.videos.create(prompt="a fox turns its head", size="64x48", input_reference=file,
                                        extra_body=SETTINGS)]
    url = "data:image/webp;base64," + base64.b64encode(Path(image_b).read_bytes()).decode()
    created.append(client.videos.create(prompt="a fox turns its head", size="64x48",
                                        extra_body=dict(SETTINGS, input_reference={"image_url": url})))
    videos = [until_done(client, v.id) for v in created]
    files = download(client, videos, out_dir)
    print(json.dumps({"version": openai.__version__, "videos": [v.model_dump() for v in videos], "files": files}))


if __name__ == "__main__":
    main(*sys.argv[1:5])
