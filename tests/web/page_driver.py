"""Driving the page in headless Chromium with Selenium, pointed at the system's chromium and
chromedriver (Debian: `apt-get install chromium chromium-driver`) so that nothing is downloaded."""

from __future__ import annotations

import shutil
import time

import pytest

INSTALL = "install them with `apt-get install chromium chromium-driver`"
# Records every progress value and stage text the job list shows, in order.
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


def launch():
    """A headless Chromium session; skips the test when selenium, chromium or chromedriver is missing."""
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (requirements-cpu.txt)")
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    chromedriver = shutil.which("chromedriver")
    if chromium is None or chromedriver is None:
        pytest.skip(f"chromium or chromedriver is missing: {INSTALL}")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1000,1500",
                     "--mute-audio", "--disable-gpu"):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=webdriver.ChromeService(executable_path=chromedriver), options=options)
    driver.set_script_timeout(30)
    return driver


def wait(driver, condition, timeout=60.0, what="condition"):
    deadline = time.monotonic() + timeout
    while True:
        value = condition(driver)
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def open_page(driver, url):
    driver.get(url + "/")
    wait(driver, lambda d: d.find_element("tag name", "body").get_attribute("data-ready") == "true", 20, "the page")


def job_item(driver, prompt):
    """The list item of the job with this prompt, once it exists."""
    def find(d):
        for item in d.find_elements("css selector", "li.job"):
            if item.find_element("css selector", ".job-prompt").text == prompt:
                return item
        return None
    return wait(driver, find, 30, f"the job '{prompt}' in the list")


def generate(driver, prompt, width, height, frames, steps, seed):
    from selenium.webdriver.support.ui import Select

    for name, value in {"prompt": prompt, "width": width, "height": height, "steps": steps, "seed": seed}.items():
        element = driver.find_element("id", name)
        element.clear()
        element.send_keys(str(value))
    Select(driver.find_element("id", "num_frames")).select_by_value(str(frames))
    driver.find_element("id", "generate").click()


def status(item):
    return item.get_attribute("data-status")
