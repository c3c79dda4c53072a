"""The page's start-image picker and negative prompt in headless Chromium, against a server whose
model takes both (a stand-in adapter over an engine that runs nothing: the page's side only; a
served image-to-video run is tests/serve/test_wan_i2v_service.py). Skips without chromium."""

from __future__ import annotations

import pytest

from image_inputs import ImageModel, image_bytes
from page_driver import generate, job_item, open_page, wait
from pipedit.config import GenerationDefaults
from pipedit.serve.http.app import build_app
from pipedit.serve.jobs.service import JobService
from pipedit.serve.contract.params import ServiceLimits
from pipedit.serve.jobs.store import JobStore
from serve_helpers import IdleEngine, Running, serve_in_thread

PREVIEW_LOADED = """
const img = document.getElementById('image-preview');
return img.complete && img.naturalWidth > 0 && !img.hidden ? [img.naturalWidth, img.naturalHeight] : null;
"""


@pytest.fixture(scope="module")
def i2v_server(tmp_path_factory):
    folder = tmp_path_factory.mktemp("page-i2v")
    engine = IdleEngine()
    service = JobService(engine, JobStore.in_folder(folder), folder, "wan-i2v-demo", GenerationDefaults(64, 64, 5, 2),
                         ServiceLimits(max_queued=100), validate=ImageModel().validate)
    url, stop = serve_in_thread(build_app(service))
    running = Running(engine, service, url, stop)
    yield running
    running.close()


def test_pick_an_image_see_it_and_the_job_carries_it(i2v_server, browser, tmp_path):
    png = image_bytes("png", (40, 24))
    (tmp_path / "start.png").write_bytes(png)
    (tmp_path / "anim.gif").write_bytes(image_bytes("gif"))
    open_page(browser, i2v_server.url)
    assert browser.find_element("id", "mode").text == "Text or image"
    picker = browser.find_element("id", "image")
    assert picker.is_displayed() and picker.get_attribute("accept") == "image/png,image/jpeg,image/webp"
    assert not browser.find_element("id", "image-preview").is_displayed()

    picker.send_keys(str(tmp_path / "anim.gif"))  # refused in the page, before anything is sent
    assert "must be png, jpeg, webp" in wait(browser, lambda d: d.find_element("id", "form-error").text, 10, "refusal")
    assert not browser.find_element("id", "image-preview").is_displayed()

    picker.send_keys(str(tmp_path / "start.png"))
    assert wait(browser, lambda d: d.execute_script(PREVIEW_LOADED), 10, "the preview") == [40, 24]
    assert browser.find_element("id", "form-error").text == ""
    negative = browser.find_element("id", "negative_prompt")
    assert negative.is_displayed()
    negative.send_keys("blurry")
    generate(browser, "a fox from a photo", 64, 64, 5, 2, 3)
    item = job_item(browser, "a fox from a photo")
    video_id = item.get_attribute("data-id")
    assert "from a 40x24 png image" in item.find_element("css selector", ".job-meta").text
    store = i2v_server.service.store
    assert store.image(video_id) == png  # the bytes of the chosen file, as uploaded
    assert store.get(video_id).params["negative_prompt"] == "blurry"

    browser.find_element("id", "clear-image").click()  # without an image the page sends JSON again
    assert not browser.find_element("id", "image-preview").is_displayed()
    generate(browser, "a fox from words", 64, 64, 5, 2, 3)
    plain = job_item(browser, "a fox from words").get_attribute("data-id")
    assert store.image(plain) is None and store.get(plain).params["image"] is None
