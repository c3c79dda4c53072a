"""A served model that makes sound (no model runs: an engine loop whose results carry a sound
track): the content download (/v1/videos/{id}/content, what the page plays and the openai SDK's
download_content fetches) is the stored mp4 with its AAC track; the options say the model makes
sound, and the page plays the video unmuted with a mute button. One server for the module."""

import math
from pathlib import Path

import pytest
import torch

from job_engines import InstantEngine, service_on
from openai_sdk import run_client
from page_driver import VIDEO_LOADED, generate, job_item, open_page, status, wait
from pipedit.capabilities import Capabilities
from pipedit.request import VideoResult
from pipedit.serve.contract.schemas import VideoCreateParams
from pipedit.serve.http.app import build_app
from pipedit.sound import Soundtrack, probe_audio, read_sound
from serve_helpers import Running, call, serve_in_thread, wait_for

RATE, SECONDS = 24000, 0.625  # the video's 5 frames at 8 fps
SDK_CLIENT = Path(__file__).resolve().parent.parent / "serve" / "sdk_sound_client.py"


class SoundingEngine(InstantEngine):
    """InstantEngine whose videos come with a stereo tone of the video's length."""

    def wait(self, request_id, timeout=None):
        plain = super().wait(request_id, timeout)
        t = torch.arange(int(RATE * SECONDS)) / RATE
        sound = Soundtrack(0.3 * torch.stack([torch.sin(2 * math.pi * 330 * t), torch.sin(2 * math.pi * 660 * t)]),
                           RATE)
        return VideoResult(plain.request_id, plain.frames, plain.latents, sound=sound)


class SoundingModel:
    """What the options route reads of the served adapter: its capabilities (and its shape check)."""

    capabilities = Capabilities(has_sound=True)

    def validate(self, shape, steps):
        return None


@pytest.fixture(scope="module")
def sounding(tmp_path_factory):
    engine = SoundingEngine()
    service = service_on(engine, tmp_path_factory.mktemp("data"), validate=SoundingModel().validate)
    url, stop = serve_in_thread(build_app(service))
    running = Running(engine, service, url, stop)
    try:
        yield running
    finally:
        running.close()


def _has_the_track(path: Path) -> None:
    stream = probe_audio(path)
    assert (stream.codec, stream.sample_rate, stream.channels) == ("aac", RATE, 2)
    assert abs(read_sound(path).duration_s - SECONDS) < 1024 / RATE  # within one AAC frame


def test_the_content_download_and_the_sdk_carry_the_sound(sounding, tmp_path):
    service, url = sounding.service, sounding.url
    assert call("GET", f"{url}/v1/pipedit/options").json()["has_sound"] is True
    job = service.create(VideoCreateParams(prompt="a fox", fps=8))
    wait_for(lambda: service.get(job.id).status == "completed", timeout=60)
    _has_the_track(service.content_path(job.id))  # what the store keeps
    reply = call("GET", f"{url}/v1/videos/{job.id}/content")
    assert reply.status == 200
    (tmp_path / "download.mp4").write_bytes(reply.body)
    _has_the_track(tmp_path / "download.mp4")
    files = run_client("openai-3", url, tmp_path, client=SDK_CLIENT, args=(job.id,))["files"]
    assert Path(files[0]).read_bytes() == reply.body


def test_the_page_plays_the_sound_with_a_mute_button(sounding, browser):
    open_page(browser, sounding.url)
    generate(browser, "a bell ringing", 64, 64, 5, 2, 0)
    item = job_item(browser, "a bell ringing")
    wait(browser, lambda d: status(item) == "completed", 30, "the job to complete")
    wait(browser, lambda d: d.execute_script(VIDEO_LOADED, item.get_attribute("data-id")), 30, "the video")
    video, button = item.find_element("css selector", "video"), item.find_element("css selector", "button.mute")
    assert browser.execute_script("return arguments[0].muted", video) is False
    assert (button.text, button.get_attribute("aria-pressed")) == ("Mute", "false")
    button.click()
    wait(browser, lambda d: d.execute_script("return arguments[0].muted", video), 5, "the video muted")
    # The button follows the video's volumechange event, which the browser dispatches after the mute.
    wait(browser, lambda d: (button.text, button.get_attribute("aria-pressed")) == ("Unmute", "true"), 5,
         "the button to say Unmute")
