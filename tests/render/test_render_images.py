"""`pipedit render` lines with `image` and `negative_prompt`: image paths are relative to the
prompts file, a line's key follows the image's content, lines the model cannot take fail alone
(before any model loads) naming their line and the models that take them, a negative prompt
reaches a Wan model's encode_prompt, and `--endpoint` sends the image as the API's
`input_reference` multipart file part (checked with the form parser the server uses)."""

import asyncio
import json
import shutil
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import torch
from render_helpers import read_manifest, write_jsonl

from pipedit.cli import main
from pipedit.config import GenerationDefaults
from pipedit.errors import UserInputError
from pipedit.render.local import request_for
from pipedit.render.prompts import read_lines
from pipedit.video import write_mp4

NEGATIVE = "blurry, static"
TINY = {"size": "48x48", "num_frames": 5, "steps": 2, "seed": 3}


def write_image(path, fmt="PNG", colour=(200, 40, 90)):
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (24, 16), colour).save(path, format=fmt)
    return path


def test_image_paths_are_relative_to_the_prompts_file_and_keys_follow_the_content(tmp_path, monkeypatch):
    folder = tmp_path / "job"
    first = write_image(folder / "frames" / "first.png")
    moved = shutil.copy(first, write_image(tmp_path / "elsewhere" / "x.png").parent / "same.png")
    write_image(folder / "frames" / "other.png", colour=(10, 200, 30))
    prompts = write_jsonl(folder / "p.jsonl", [
        {"prompt": "a", "image": "frames/first.png"}, {"prompt": "a", "image": str(moved)},
        {"prompt": "a", "image": "frames/other.png"}, {"prompt": "a", "negative_prompt": NEGATIVE}, {"prompt": "a"},
    ])
    monkeypatch.chdir(tmp_path)  # not the prompts file's folder
    relative, absolute, other, negative, plain = read_lines(prompts.relative_to(tmp_path), GenerationDefaults(), "m")
    assert all(line.error is None for line in (relative, absolute, other, negative, plain))
    assert relative.settings["image"] == str(first.resolve())
    assert relative.key == absolute.key  # the same picture elsewhere: the same video
    assert len({relative.key, other.key, negative.key, plain.key}) == 4
    assert "image" not in plain.settings and "negative_prompt" not in plain.settings
    assert request_for(relative).image == first.read_bytes() and request_for(plain).image is None
    assert request_for(negative).negative_prompt == NEGATIVE
    write_image(first, colour=(0, 0, 0))  # edited after the file was read: refused, not rendered as the old key
    with pytest.raises(UserInputError, match="changed during the run"):
        request_for(relative)


def test_lines_the_model_cannot_take_fail_alone_naming_their_line_and_the_models(tmp_path, demo_checkpoint,
                                                                                 capsys, monkeypatch):
    from pipedit.runtime.engine_loop import EngineLoop

    monkeypatch.setattr(EngineLoop, "from_config", lambda *a, **k: pytest.fail("a model was loaded"))
    write_image(tmp_path / "first.png")
    write_image(tmp_path / "anim.gif", "GIF")
    prompts = write_jsonl(tmp_path / "p.jsonl", [
        "# HunyuanVideo takes neither images nor negative prompts",
        {"prompt": "x", "image": "first.png"}, {"prompt": "y", "negative_prompt": NEGATIVE},
        {"prompt": "z", "image": "anim.gif"}, {"prompt": "w", "image": "none.png"},
    ])
    code = main(["render", str(prompts), "--out-dir", str(tmp_path / "out"), "--model-path", str(demo_checkpoint)])
    assert code == 1
    expected = {2: "WanImageToVideoPipeline", 3: "(wan, opensora-plan, ltx-2)", 4: "is a GIF image", 5: "does not exist"}
    entries = {entry["line"]: entry for entry in read_manifest(tmp_path / "out")}
    assert {n: e["status"] for n, e in entries.items()} == dict.fromkeys(expected, "failed")
    rows = capsys.readouterr().out.splitlines()
    for number, fragment in expected.items():
        assert fragment in entries[number]["error"]
        assert any(row.startswith(f"{number} ") and fragment in row for row in rows)  # the summary names the line


def test_wan_takes_a_negative_prompt_and_refuses_an_image(tmp_path, monkeypatch):
    from pipedit.integrations.wan.adapter import WanAdapter
    from pipedit.integrations.wan.demo_checkpoint import write_demo_checkpoint

    wan = write_demo_checkpoint(tmp_path / "wan-demo")
    seen, encode = [], WanAdapter.encode_prompt
    monkeypatch.setattr(WanAdapter, "encode_prompt",
                        lambda self, prompt, **inputs: seen.append((prompt, inputs)) or encode(self, prompt, **inputs))
    write_image(tmp_path / "first.png")
    prompts = write_jsonl(tmp_path / "p.jsonl", [{"prompt": "a cat", "negative_prompt": NEGATIVE, **TINY},
                                                 {"prompt": "a dog", "image": "first.png", **TINY}])
    assert main(["render", str(prompts), "--out-dir", str(tmp_path / "out"), "--model-path", str(wan)]) == 1
    done, refused = read_manifest(tmp_path / "out")
    assert done["status"] == "done" and done["negative_prompt"] == NEGATIVE
    assert refused["status"] == "failed" and "wan with this checkpoint takes no image" in refused["error"]
    assert seen == [("a cat", {"negative_prompt": NEGATIVE, "guided": True})]  # the run's guidance is above 1


class Recorder(BaseHTTPRequestHandler):
    """Accepts every create (recording its Content-Type and body); every job is completed at once."""

    posts: list = []
    mp4 = b""

    def log_message(self, *args):
        pass

    def _send(self, data, content_type="application/json"):
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.posts.append((self.headers["Content-Type"], body))
        self._send(json.dumps({"id": f"video_{len(self.posts)}", "status": "queued"}).encode())

    def do_GET(self):
        if self.path.endswith("/content"):
            return self._send(self.mp4, "video/mp4")
        self._send(json.dumps({"id": "x", "status": "completed", "pipedit": {"timings": {}}}).encode())


def parse_form(content_type: str, body: bytes) -> dict:
    """The fields and files of a body as the server's framework (Starlette) parses them."""
    from starlette.requests import Request

    async def parse():
        sent = []

        async def receive():
            sent.append(1)
            return {"type": "http.request", "body": body if len(sent) == 1 else b"", "more_body": False}

        scope = {"type": "http", "method": "POST", "headers": [(b"content-type", content_type.encode())]}
        form = await Request(scope, receive).form()
        return {key: value if isinstance(value, str) else (value.filename, value.content_type, await value.read())
                for key, value in form.items()}

    return asyncio.run(parse())


def test_endpoint_sends_the_image_as_input_reference_as_openais_sdk_does(tmp_path):
    Recorder.posts, Recorder.mp4 = [], write_mp4(torch.rand(5, 16, 16, 3), tmp_path / "v.mp4", fps=8).read_bytes()
    server = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    image = write_image(tmp_path / "in" / "first.webp", "WEBP").read_bytes()
    prompts = write_jsonl(tmp_path / "p.jsonl", [
        {"prompt": "a fox, ünïcode", "image": "in/first.webp", "negative_prompt": NEGATIVE, **TINY},
        {"prompt": "plain", **TINY}])
    try:
        code = main(["render", str(prompts), "--out-dir", str(tmp_path / "out"),
                     "--endpoint", f"http://127.0.0.1:{server.server_address[1]}", "--max-in-flight", "1"])
    finally:
        server.shutdown()
        server.server_close()
    assert code == 0
    (form_type, form_body), (json_type, json_body) = Recorder.posts
    assert form_type.startswith("multipart/form-data; boundary=")
    fields = parse_form(form_type, form_body)
    assert fields["input_reference"] == ("0001-a-fox-n-code.webp", "image/webp", image)
    assert {k: fields[k] for k in ("prompt", "negative_prompt", "size", "num_frames", "seed")} == \
        {"prompt": "a fox, ünïcode", "negative_prompt": NEGATIVE, "size": "48x48", "num_frames": "5", "seed": "3"}
    assert json_type == "application/json" and "input_reference" not in json.loads(json_body)


def test_image_lines_through_a_server_give_the_in_process_videos(tmp_path):
    """A tiny Wan2.1 I2V served for real: each image reaches the model as the local run's does.
    Tolerance: 2 of 255, as tests/render/test_render_remote.py (both decode the same latents; the mp4
    encoding is deterministic)."""
    import numpy as np
    from serve_helpers import start

    from pipedit.integrations.wan.demo_checkpoint import write_demo_checkpoint
    from pipedit.video import read_mp4

    i2v = write_demo_checkpoint(tmp_path / "wan-i2v", preset="i2v")
    write_image(tmp_path / "red.png")
    write_image(tmp_path / "green.jpg", "JPEG", colour=(20, 220, 60))
    prompts = write_jsonl(tmp_path / "p.jsonl", [
        {"name": "red", "prompt": "a cat", "image": "red.png", "negative_prompt": NEGATIVE, **TINY},
        {"name": "green", "prompt": "a cat", "image": "green.jpg", "negative_prompt": NEGATIVE, **TINY},
        {"name": "none", "prompt": "a cat", **TINY}])
    running = start(i2v, tmp_path / "data")
    try:
        assert main(["render", str(prompts), "--out-dir", str(tmp_path / "remote"), "--endpoint", running.url]) == 1
    finally:
        running.close()
    assert main(["render", str(prompts), "--out-dir", str(tmp_path / "local"), "--model-path", str(i2v)]) == 1
    for out in ("remote", "local"):
        statuses = {e["name"]: (e["status"], e.get("error", "")) for e in read_manifest(tmp_path / out)}
        assert [statuses[n][0] for n in ("red", "green", "none")] == ["done", "done", "failed"]
        assert "is image-to-video: send an image" in statuses["none"][1]
    for name in ("red.mp4", "green.mp4"):
        remote, local = read_mp4(tmp_path / "remote" / name), read_mp4(tmp_path / "local" / name)
        assert remote.shape == local.shape == (5, 48, 48, 3)
        assert np.abs(remote.astype(int) - local.astype(int)).max() <= 2, name
    red, green = read_mp4(tmp_path / "local" / "red.mp4"), read_mp4(tmp_path / "local" / "green.mp4")
    assert np.abs(red.astype(int) - green.astype(int)).max() > 2  # the image does change the video
