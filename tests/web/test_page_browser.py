"""The page in headless Chromium against a real server on the demo model: generate a video and
watch it progress and play, cancel a long one, and find both again after a reload. Skips without
chromium and chromedriver. Set PIPEDIT_PAGE_SCREENSHOT=path.png to keep a screenshot of the page
with both jobs."""

from __future__ import annotations

import os
import shutil

from page_driver import VIDEO_LOADED, WATCH, generate, job_item, open_page, status, wait
from serve_helpers import call


def test_generate_watch_play_then_cancel_and_reload(server, browser, tmp_path):
    open_page(browser, server.url)
    assert browser.find_element("id", "model-name").text == "hunyuan-demo"
    assert "5 · 0.21 s" in browser.find_element("id", "num_frames").text
    # HunyuanVideo takes neither a start image nor a negative prompt: the page offers neither.
    assert browser.find_element("id", "mode").text == "Text"
    assert not any(browser.find_element("id", name).is_displayed() for name in ("image", "negative_prompt"))
    # The generation fields without an input of their own come from the options' fields, as the
    # model takes them: HunyuanVideo has no second expert, so no guidance_scale_2.
    assert all(browser.find_element("id", name).is_displayed() for name in ("guidance_scale", "fps", "cache"))
    assert not browser.find_elements("id", "guidance_scale_2")
    assert not browser.find_element("id", "loras-field").is_displayed()  # this server offers no adapters
    guidance = browser.find_element("id", "guidance_scale")
    assert guidance.get_attribute("value") == "6"
    guidance.clear()
    guidance.send_keys("4.5")
    browser.execute_script(WATCH)

    generate(browser, "a lighthouse at dusk", 64, 64, 5, 12, 7)
    done = job_item(browser, "a lighthouse at dusk")
    wait(browser, lambda d: status(done) == "completed", 90, "the first job to complete")
    video_id = done.get_attribute("data-id")
    progress = [float(v) for v in browser.execute_script("return window.seenProgress")]
    stages = list(dict.fromkeys(browser.execute_script("return window.seenStages")))
    assert any(s.startswith("Denoising: step") for s in stages), stages
    assert stages[-1] == "Completed" and len(stages) >= 3, stages
    assert max(progress) > min(progress) and progress == sorted(progress), progress
    wait(browser, lambda d: d.execute_script(VIDEO_LOADED, video_id), 30, "the <video> to load the mp4")
    link = done.find_element("css selector", "a.download")
    assert link.get_attribute("href").endswith(f"/v1/videos/{video_id}/content") and link.text == "Download mp4"
    assert "64x64 · 5 frames · 12 steps · seed 7" in done.find_element("css selector", ".job-meta").text
    assert call("GET", f"{server.url}/v1/videos/{video_id}").json()["pipedit"]["guidance_scale"] == 4.5
    urls = browser.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
    assert f"{server.url}/v1/videos/{video_id}/events" in urls, urls  # followed by server-sent events

    # 100 steps of 128x128x17 run for seconds on the demo model: long enough to cancel mid-way.
    generate(browser, "a very long render", 128, 128, 17, 100, 1)
    long_job = job_item(browser, "a very long render")
    wait(browser, lambda d: long_job.find_element("css selector", ".job-stage").text.startswith("Denoising: step"),
         60, "the long job to run")
    long_id = long_job.get_attribute("data-id")
    cancel = long_job.find_element("css selector", "button.cancel")
    assert cancel.is_displayed() and cancel.get_attribute("aria-label") == 'Cancel "a very long render"'
    cancel.click()
    wait(browser, lambda d: status(long_job) == "cancelled", 30, "the job shown cancelled")
    assert long_job.find_element("css selector", ".badge").text.lower() == "cancelled"
    assert not long_job.find_element("css selector", "button.cancel").is_displayed()
    assert call("GET", f"{server.url}/v1/videos/{long_id}").status == 404
    assert server.service.store.get(long_id) is None
    assert call("GET", f"{server.url}/v1/videos/{video_id}").json()["status"] == "completed"

    _screenshot(browser, tmp_path)

    browser.refresh()  # the list comes back from localStorage, checked against the server
    open_page(browser, server.url)
    again = {item.get_attribute("data-id"): item for item in browser.find_elements("css selector", "li.job")}
    assert set(again) == {video_id, long_id}
    assert status(again[long_id]) == "cancelled"
    wait(browser, lambda d: status(again[video_id]) == "completed", 20, "the completed job after reload")
    wait(browser, lambda d: d.execute_script(VIDEO_LOADED, video_id), 30, "the video after reload")


def test_a_rejected_request_shows_the_servers_message(server, browser):
    open_page(browser, server.url)
    before = len(browser.find_elements("css selector", "li.job"))
    browser.execute_script("document.getElementById('width').step = 'any'")  # let 70 past the form's own check
    generate(browser, "an odd size", 70, 64, 5, 2, 0)
    message = wait(browser, lambda d: d.find_element("id", "form-error").text, 20, "the error message")
    assert "multiples of 16" in message
    assert len(browser.find_elements("css selector", "li.job")) == before


def _screenshot(driver, tmp_path):
    path = tmp_path / "page.png"
    assert driver.save_screenshot(str(path))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    wanted = os.environ.get("PIPEDIT_PAGE_SCREENSHOT")
    if wanted:
        shutil.copyfile(path, wanted)


def test_a_failed_job_shows_its_error(browser, tmp_path):
    from pipedit.config import GenerationDefaults
    from pipedit.serve.http.app import build_app
    from pipedit.serve.jobs.service import JobService
    from pipedit.serve.jobs.store import JobStore
    from serve_helpers import serve_in_thread
    from test_job_service import FailingEngine  # every request fails while denoising: "out of memory"

    service = JobService(FailingEngine(), JobStore.in_folder(tmp_path), tmp_path, "demo",
                         GenerationDefaults(height=64, width=64, num_frames=5, steps=2))
    url, stop = serve_in_thread(build_app(service))
    try:
        open_page(browser, url)
        generate(browser, "too big to fit", 64, 64, 5, 2, 0)
        item = job_item(browser, "too big to fit")
        wait(browser, lambda d: status(item) == "failed", 30, "the job shown failed")
        shown = item.find_element("css selector", ".job-error")
        assert shown.is_displayed() and shown.text.startswith("Error: ") and shown.text.endswith("out of memory")
        assert shown.text == "Error: " + call("GET", f"{url}/v1/videos/{item.get_attribute('data-id')}").json()[
            "error"]["message"]
        assert not item.find_element("css selector", "button.cancel").is_displayed()
        assert item.find_elements("css selector", "video") == []
    finally:
        stop()
        service.close()


def test_the_page_reopens_an_event_stream_at_its_lifetime_instead_of_polling(browser, tmp_path):
    # A stream ends after serve.event_stream_max_s (here 1 s); the page used to poll from then on.
    from pipedit.config import GenerationDefaults
    from pipedit.serve.http.app import build_app
    from pipedit.serve.jobs.service import JobService
    from pipedit.serve.contract.params import ServiceLimits
    from pipedit.serve.jobs.store import JobStore
    from serve_helpers import IdleEngine, serve_in_thread

    service = JobService(IdleEngine(), JobStore.in_folder(tmp_path), tmp_path, "demo",  # jobs stay queued
                         GenerationDefaults(height=64, width=64, num_frames=5, steps=2),
                         ServiceLimits(event_stream_max_s=1.0))
    url, stop = serve_in_thread(build_app(service))
    try:
        open_page(browser, url)
        generate(browser, "waits in the queue", 64, 64, 5, 2, 0)
        video_id = job_item(browser, "waits in the queue").get_attribute("data-id")
        entries = "return performance.getEntriesByType('resource').map(e => e.name)"
        events = f"{url}/v1/videos/{video_id}/events"
        wait(browser, lambda d: d.execute_script(entries).count(events) >= 3, 20, "three streams, one after another")
        assert f"{url}/v1/videos/{video_id}" not in browser.execute_script(entries)  # never polled
    finally:
        stop()
        service.close()


def test_the_adapter_picker_sends_the_ticked_adapters_at_their_scales(browser, tmp_path):
    from pipedit.config import GenerationDefaults
    from pipedit.lora.spec import LoraOffer, LoraSpec
    from pipedit.serve.http.app import build_app
    from pipedit.serve.jobs.service import JobService
    from pipedit.serve.jobs.store import JobStore
    from serve_helpers import IdleEngine, serve_in_thread

    offer = LoraOffer((("style", LoraSpec("style.safetensors", 0.7)), ("ink", LoraSpec("ink.safetensors"))), 2)
    service = JobService(IdleEngine(), JobStore.in_folder(tmp_path), tmp_path, "demo",  # jobs stay queued
                         GenerationDefaults(height=64, width=64, num_frames=5, steps=2), loras=offer)
    url, stop = serve_in_thread(build_app(service))
    try:
        open_page(browser, url)
        assert browser.find_element("id", "loras-field").is_displayed()
        assert browser.find_element("id", "lora-0-scale").get_attribute("value") == "0.7"  # the name's default
        browser.find_element("id", "lora-1").click()  # ink, at 0.25 instead of its default 1
        scale = browser.find_element("id", "lora-1-scale")
        scale.clear()
        scale.send_keys("0.25")
        generate(browser, "ink wash mountains", 64, 64, 5, 2, 0)
        video_id = job_item(browser, "ink wash mountains").get_attribute("data-id")
        assert call("GET", f"{url}/v1/videos/{video_id}").json()["pipedit"]["loras"] == [{"name": "ink", "scale": 0.25}]
    finally:
        stop()
        service.close()
