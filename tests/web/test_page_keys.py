"""With API keys configured, the page and the options stay open while the job routes need a key."""

import pytest

from page_driver import VIDEO_LOADED, generate, job_item, open_page, status, wait
from serve_helpers import call, start


@pytest.fixture(scope="module")
def keyed(demo_checkpoint, tmp_path_factory):
    running = start(demo_checkpoint, tmp_path_factory.mktemp("data"), api_keys=("sesame",))
    yield running
    running.close()


def test_page_and_options_open_jobs_need_the_key(keyed):
    assert call("GET", f"{keyed.url}/").status == 200
    assert call("GET", f"{keyed.url}/static/app.js").status == 200
    options = call("GET", f"{keyed.url}/v1/pipedit/options")
    assert options.status == 200 and options.json()["api_key_required"] is True
    assert call("GET", f"{keyed.url}/v1/videos").status == 401
    assert call("GET", f"{keyed.url}/v1/videos", headers={"Authorization": "Bearer sesame"}).status == 200


def test_the_page_sends_the_key_polls_and_plays_the_video_fetched_with_it(keyed, browser):
    from selenium.webdriver.common.keys import Keys

    open_page(browser, keyed.url)
    key = browser.find_element("id", "api-key")
    assert key.is_displayed()
    generate(browser, "no key yet", 64, 64, 5, 2, 0)
    assert "API key missing" in wait(browser, lambda d: d.find_element("id", "form-error").text, 20, "the 401")

    key.send_keys("sesame", Keys.TAB)  # stored on change
    assert browser.execute_script("return localStorage.getItem('pipedit.apiKey')") == "sesame"
    generate(browser, "a video behind a key", 64, 64, 5, 6, 3)
    item = job_item(browser, "a video behind a key")
    wait(browser, lambda d: status(item) == "completed", 90, "the job to complete")
    video_id = item.get_attribute("data-id")
    wait(browser, lambda d: d.execute_script(VIDEO_LOADED, video_id), 30, "the <video> to play the fetched mp4")
    assert item.find_element("css selector", "a.download").get_attribute("href").startswith("blob:")

    generate(browser, "a long one behind a key", 128, 128, 17, 100, 1)
    long_job = job_item(browser, "a long one behind a key")
    wait(browser, lambda d: long_job.find_element("css selector", ".job-stage").text.startswith("Denoising"),
         60, "the long job to run")
    long_job.find_element("css selector", "button.cancel").click()
    wait(browser, lambda d: status(long_job) == "cancelled", 30, "the job shown cancelled")
    long_id = long_job.get_attribute("data-id")
    assert call("GET", f"{keyed.url}/v1/videos/{long_id}", headers={"Authorization": "Bearer sesame"}).status == 404

    urls = browser.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
    assert any(f"/v1/videos/{video_id}" in url for url in urls), urls
    assert not any("sesame" in url or url.endswith("/events") for url in urls), urls  # polled, key in headers only
