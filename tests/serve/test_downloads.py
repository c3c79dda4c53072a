"""GET /v1/videos/{id}/content racing a DELETE or the retention sweep: the download is whole or
404, never a 500 or a body cut short (the review: 15 x 500 and 8 cut bodies of 10 GETs 4 ms apart
with a DELETE 10 ms in). The file is opened before the answer starts and sent from that descriptor.
At the app level (no socket), plus byte ranges, which a video element asks for when it seeks."""

import os
import time

import pytest

from pipedit.serve.http.app import build_app
from idle_app import asgi_request, start_idle

MP4 = b"\0\0\0\x18ftypmp42" + os.urandom(700_000)  # several chunks


@pytest.fixture(scope="module")
def idle(tmp_path_factory):
    running = start_idle(tmp_path_factory.mktemp("downloads"))
    yield running, build_app(running.service)
    running.close()


def _finished(service) -> str:
    """A completed job with an mp4 (the idle engine makes none)."""
    from pipedit.serve.contract.schemas import VideoCreateParams

    video_id = service.create(VideoCreateParams(prompt="a fox")).id
    (service.videos_dir / f"{video_id}.mp4").write_bytes(MP4)
    assert service.store.update(video_id, status="completed", progress=100, completed_at=time.time(),
                                video_file=f"{video_id}.mp4")
    return video_id


def test_a_delete_after_the_answer_began_leaves_the_download_whole(idle):
    running, app = idle
    for remove in (running.service.delete, lambda video_id: running.service.sweep(now=time.time() + 10 ** 9)):
        video_id = _finished(running.service)
        status, headers, body = asgi_request(app, "GET", f"/v1/videos/{video_id}/content",
                                             on_start=lambda: remove(video_id))
        assert status == 200 and body == MP4 and int(headers["content-length"]) == len(MP4)
        assert not (running.service.videos_dir / f"{video_id}.mp4").exists()  # it was unlinked meanwhile
        status, _, body = asgi_request(app, "GET", f"/v1/videos/{video_id}/content")
        assert status == 404 and b"video_not_found" in body


def test_a_file_gone_before_it_was_opened_is_404_not_500(idle):
    running, app = idle
    video_id = _finished(running.service)
    # The row still says completed, the file is gone (a delete between the row read and the open).
    original = running.service.content_path
    running.service.content_path = lambda vid: (original(vid), (running.service.videos_dir / f"{vid}.mp4").unlink())[0]
    try:
        status, _, body = asgi_request(app, "GET", f"/v1/videos/{video_id}/content")
    finally:
        running.service.content_path = original
    assert status == 404 and b"video_not_found" in body


@pytest.mark.parametrize("asked,status,span", [
    ("bytes=0-99", 206, (0, 99)), ("bytes=700000-", 206, (700000, len(MP4) - 1)),
    ("bytes=-12", 206, (len(MP4) - 12, len(MP4) - 1)), ("bytes=0-99999999", 206, (0, len(MP4) - 1)),
    ("bytes=0-1,5-6", 200, None), ("items=0-5", 200, None), ("bytes=999999999-", 416, None)])
def test_one_byte_range_is_answered_206(idle, asked, status, span):
    running, app = idle
    video_id = _finished(running.service)
    got, headers, body = asgi_request(app, "GET", f"/v1/videos/{video_id}/content", headers={"Range": asked})
    assert got == status and headers["accept-ranges"] == "bytes"
    if status == 206:
        assert body == MP4[span[0]:span[1] + 1] and headers["content-range"] == f"bytes {span[0]}-{span[1]}/{len(MP4)}"
    elif status == 200:
        assert body == MP4
    else:
        assert headers["content-range"] == f"bytes */{len(MP4)}"


def test_the_reviews_race_on_a_live_server_gives_whole_videos_or_404(idle):
    # 10 GETs 4 ms apart with a DELETE 10 ms in, on 4 finished jobs: every answer is the whole mp4
    # or 404 video_not_found, whichever way each race goes.
    from concurrent.futures import ThreadPoolExecutor

    from serve_helpers import call

    running, _ = idle
    ids = [_finished(running.service) for _ in range(4)]

    def download(video_id, delay):
        time.sleep(delay)
        return call("GET", f"{running.url}/v1/videos/{video_id}/content")

    with ThreadPoolExecutor(max_workers=44) as pool:
        gets = [pool.submit(download, video_id, 0.004 * i) for video_id in ids for i in range(10)]
        deletes = [pool.submit(lambda v: (time.sleep(0.010), call("DELETE", f"{running.url}/v1/videos/{v}"))[1], v)
                   for v in ids]
        replies = [get.result() for get in gets]
    assert all(d.result().status == 200 for d in deletes)
    for reply in replies:
        assert (reply.status, reply.body) == (200, MP4) or (reply.status == 404 and b"video_not_found" in reply.body), \
            (reply.status, len(reply.body))


HUGE = "9" * 5000  # more digits than Python's int() takes (4300)


@pytest.mark.parametrize("asked,status,span", [
    (f"bytes={HUGE}-", 416, None), (f"bytes=0-{HUGE}", 206, (0, len(MP4) - 1)),
    (f"bytes=-{HUGE}", 206, (0, len(MP4) - 1)), (f"bytes={'0' * 5000}7-9", 206, (7, 9)),
    (f"bytes=5-{'0' * 5000}4", 416, None)])
def test_a_range_of_thousands_of_digits_is_answered_and_the_file_closed(idle, monkeypatch, asked, status, span):
    # The review: 500 internal_error (int() on 5000 digits) and the opened file left open.
    from pipedit.serve.http import downloads

    opened = []
    monkeypatch.setattr(downloads, "open", lambda *a, **k: opened.append(open(*a, **k)) or opened[-1], raising=False)
    running, app = idle
    video_id = _finished(running.service)
    got, headers, body = asgi_request(app, "GET", f"/v1/videos/{video_id}/content", headers={"Range": asked})
    assert got == status
    if span:
        assert body == MP4[span[0]:span[1] + 1] and headers["content-range"] == f"bytes {span[0]}-{span[1]}/{len(MP4)}"
    else:
        assert headers["content-range"] == f"bytes */{len(MP4)}"
    assert len(opened) == 1 and opened[0].closed


def test_the_file_is_closed_when_reading_the_range_fails(tmp_path, monkeypatch):
    from pipedit.serve.http import downloads

    opened = []
    monkeypatch.setattr(downloads, "open", lambda *a, **k: opened.append(open(*a, **k)) or opened[-1], raising=False)
    monkeypatch.setattr(downloads, "byte_range", lambda header, size: 1 / 0)
    (tmp_path / "v.mp4").write_bytes(MP4)
    with pytest.raises(ZeroDivisionError):
        downloads.video_response(tmp_path / "v.mp4", "v", "bytes=0-1")
    assert opened[0].closed
