"""The official openai SDK (3.x sends multipart, 2.x JSON) against a live server on the demo model."""

import pytest

from openai_sdk import run_client
from pipedit.video import read_mp4


@pytest.mark.parametrize("sdk", ["openai-3", "openai-2"])
def test_sdk_creates_polls_downloads_lists_and_deletes(server, sdk, tmp_path):
    seen = run_client(sdk, server.url, tmp_path)
    assert seen["version"].startswith(sdk[-1] + ".")
    assert all(v["status"] == "queued" and v["object"] == "video" for v in seen["created"])
    assert [v["status"] for v in seen["videos"]] == ["completed"] * 3
    assert all(v["progress"] == 100 and v["size"] == "64x64" for v in seen["videos"])
    for video, path, frames in zip(seen["videos"], seen["files"], (5, 9, 5)):
        assert video["pipedit"]["num_frames"] == frames
        assert read_mp4(path).shape == (frames, 64, 64, 3)
    ids = [v["id"] for v in seen["videos"]]
    page = seen["first_page"]
    assert len(page["ids"]) == 2 and page["has_more"] and page["last_id"] == page["ids"][-1]
    assert set(ids) <= set(seen["every_id"]) and len(seen["every_id"]) == len(set(seen["every_id"]))
    assert seen["missing"] == {"status": 404, "code": "video_not_found"}
    assert seen["deleted"] == {"id": ids[-1], "object": "video.deleted", "deleted": True}
    assert seen["oversized"] == {"status": 413, "code": "body_too_large"}
    assert seen["adapter"] == {"status": 400, "code": "lora_not_found", "param": "loras"}
