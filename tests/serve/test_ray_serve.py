"""The real Ray Serve application on loopback: the deployment owns its engine, the API answers."""

import time

import pytest

from pipedit.config import EngineConfig, ModelConfig, ServeConfig
from pipedit.distributed.spawn import free_tcp_port
from pipedit.video import read_mp4
from serve_helpers import call, wait_status


@pytest.mark.slow
def test_serve_application_renders_a_video(ray_session, demo_checkpoint, tmp_path):
    from ray import serve

    from pipedit.serve.ray_app.deployment import APP_NAME, build_application
    from pipedit.serve.ray_app.launch import start_serve

    port = free_tcp_port()
    config = EngineConfig(model=ModelConfig(path=str(demo_checkpoint)),
                          serve=ServeConfig(port=port, data_dir=str(tmp_path)))
    start_serve(http_options={"host": "127.0.0.1", "port": port})
    try:
        serve.run(build_application(config), name=APP_NAME, route_prefix="/", blocking=False)
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while not _healthy(url):
            assert time.monotonic() < deadline, "the Serve application did not become healthy"
            time.sleep(0.5)
        created = call("POST", f"{url}/v1/videos", {"prompt": "a red fox", "size": "64x64", "num_frames": 5,
                                                    "num_inference_steps": 2})
        assert created.status == 200 and created.json()["status"] == "queued"
        video = wait_status(url, created.json()["id"])
        assert video["progress"] == 100
        frames = read_mp4(tmp_path / "videos" / f"{video['id']}.mp4")
        assert frames.shape == (5, 64, 64, 3)
    finally:
        serve.shutdown()


def _healthy(url: str) -> bool:
    try:
        return call("GET", f"{url}/healthz").status == 200
    except OSError:  # the proxy is not listening yet
        return False
