"""The page in headless Chromium against a real server on the demo model: generate a video and
watch it progress and play, cancel a long one, and find both again after a reload.

Needs Debian's chromium and chromium-driver (`apt-get install chromium chromium-driver`) and the
selenium package; skips without them. Selenium is pointed at those binaries explicitly, so it
never downloads a browser or a driver. Set PIPEDIT_PAGE_SCREENSHOT=path.png to keep a
screenshot of the page with both jobs."""

from __future__ import annotations

import os
import shutil
import time

import pytest

from serve_helpers import call

INSTALL = "install them with `apt-get install chromium chromium-driver`"
# Records every progress value and stage text the job list shows, in order (test-side only).
WATCH = """
window.seenProgress = []; window.seenStages = [];
new MutationObserver(() => {
  for (const bar of document.querySelectorAll('li.job .job-progress')) window.seenProgress.push(bar.value);
  for (const p of document.querySelectorAll('li.job .job-stage')) window.seenStages.push(p.textContent);
}).observe(document.getElementById('jobs'), {subtree: true, childList: true, attributes: true, characterData: true});
"""
VIDEO_LOADED = """
const v = document.querySelector(`li.job[data-id="${arguments[0]}"] video`);
return v !== null && v.readyState >= 1 && v.duration > 0 && !v.error;
"""


def _binary(*names: str) -> str | None:
    for name in names:
        found = shutil.which(name)
        if found:
            return found
    return None


@pytest.fixture(scope="module")
def browser():
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (requirements-cpu.txt)")
    chromium, chromedriver = _binary("chromium", "chromium-browser"), _binary("chromedriver")
    if chromium is None or chromedriver is None:
        pytest.skip(f"chromium or chromedriver is missing: {INSTALL}")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1000,1500",
                     "--mute-audio", "--disable-gpu"):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=webdriver.ChromeService(executable_path=chromedriver), options=options)
    driver.set_script_timeout(30)
    yield driver
    driver.quit()


def _wait(driver, condition, timeout=60.0, what="condition"):
    deadline = time.monotonic() + timeout
    while True:
        value = condition(driver)
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _job(driver, prompt):
    """The list item of the newest job with this prompt, once it exists."""
    def find(d):
        for item in d.find_elements("css selector", "li.job"):
            if item.find_element("css selector", ".job-prompt").text == prompt:
                return item
        return None
    return _wait(driver, find, 30, f"the job '{prompt}' in the list")


def _fill(driver, prompt, width, height, frames, steps, seed):
    from selenium.webdriver.support.ui import Select

    fields = {"prompt": prompt, "width": width, "height": height, "steps": steps, "seed": seed}
    for name, value in fields.items():
        element = driver.find_element("id", name)
        element.clear()
        element.send_keys(str(value))
    Select(driver.find_element("id", "num_frames")).select_by_value(str(frames))
    driver.find_element("id", "generate").click()


def _status(item):
    return item.get_attribute("data-status")


def test_generate_watch_play_then_cancel_and_reload(server, browser, tmp_path):
    browser.get(server.url + "/")
    _wait(browser, lambda d: d.find_element("tag name", "body").get_attribute("data-ready") == "true", 20, "the page")
    assert browser.find_element("id", "model-name").text == "hunyuan-demo"
    assert "5 (" in browser.find_element("id", "num_frames").text
    browser.execute_script(WATCH)

    _fill(browser, "a lighthouse at dusk", 64, 64, 5, 12, 7)
    done = _job(browser, "a lighthouse at dusk")
    _wait(browser, lambda d: _status(done) == "completed", 90, "the first job to complete")
    video_id = done.get_attribute("data-id")
    progress = [float(v) for v in browser.execute_script("return window.seenProgress")]
    stages = list(dict.fromkeys(browser.execute_script("return window.seenStages")))
    assert any(s.startswith("Denoising: step") for s in stages), stages
    assert stages[-1] == "Completed" and len(stages) >= 3, stages
    assert max(progress) > min(progress) and progress == sorted(progress), progress
    _wait(browser, lambda d: d.execute_script(VIDEO_LOADED, video_id), 30, "the <video> to load the mp4")
    link = done.find_element("css selector", "a.download")
    assert link.get_attribute("href").endswith(f"/v1/videos/{video_id}/content") and link.text == "Download mp4"
    assert "64x64 · 5 frames · 12 steps · seed 7" in done.find_element("css selector", ".job-meta").text

    # 100 steps of 128x128x17 run for seconds on the demo model: long enough to cancel mid-way.
    _fill(browser, "a very long render", 128, 128, 17, 100, 1)
    long_job = _job(browser, "a very long render")
    _wait(browser, lambda d: long_job.find_element("css selector", ".job-stage").text.startswith("Denoising: step"),
          60, "the long job to run")
    long_id = long_job.get_attribute("data-id")
    cancel = long_job.find_element("css selector", "button.cancel")
    assert cancel.is_displayed() and cancel.get_attribute("aria-label") == 'Cancel "a very long render"'
    cancel.click()
    _wait(browser, lambda d: _status(long_job) == "cancelled", 30, "the job shown cancelled")
    assert long_job.find_element("css selector", ".badge").text.lower() == "cancelled"
    assert not long_job.find_element("css selector", "button.cancel").is_displayed()
    assert call("GET", f"{server.url}/v1/videos/{long_id}").status == 404
    assert server.service.store.get(long_id) is None
    assert call("GET", f"{server.url}/v1/videos/{video_id}").json()["status"] == "completed"

    _screenshot(browser, tmp_path)

    browser.refresh()  # the list comes back from localStorage, checked against the server
    _wait(browser, lambda d: d.find_element("tag name", "body").get_attribute("data-ready") == "true", 20, "reload")
    again = {item.get_attribute("data-id"): item for item in browser.find_elements("css selector", "li.job")}
    assert set(again) == {video_id, long_id}
    assert _status(again[long_id]) == "cancelled"
    _wait(browser, lambda d: _status(again[video_id]) == "completed", 20, "the completed job after reload")
    _wait(browser, lambda d: d.execute_script(VIDEO_LOADED, video_id), 30, "the video after reload")


def test_a_rejected_request_shows_the_servers_message(server, browser):
    browser.get(server.url + "/")
    _wait(browser, lambda d: d.find_element("tag name", "body").get_attribute("data-ready") == "true", 20, "the page")
    before = len(browser.find_elements("css selector", "li.job"))
    browser.execute_script("document.getElementById('width').step = 'any'")  # let 70 past the form's own check
    _fill(browser, "an odd size", 70, 64, 5, 2, 0)
    message = _wait(browser, lambda d: d.find_element("id", "form-error").text, 20, "the error message")
    assert "multiples of 16" in message
    assert len(browser.find_elements("css selector", "li.job")) == before


def _screenshot(driver, tmp_path):
    path = tmp_path / "page.png"
    assert driver.save_screenshot(str(path))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    wanted = os.environ.get("PIPEDIT_PAGE_SCREENSHOT")
    if wanted:
        shutil.copyfile(path, wanted)
