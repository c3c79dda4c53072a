"""With API keys configured, the page and the options stay open while the job routes need a key."""

import pytest

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
