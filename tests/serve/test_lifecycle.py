"""Delete cancels queued and running jobs; a restart keeps finished videos and runs what was left."""

import json
import time
import urllib.request

from serve_helpers import SMALL, call, start, wait_for, wait_status
from pipedit.video import read_mp4


def _create(url, prompt, **fields):
    reply = call("POST", f"{url}/v1/videos", {"prompt": prompt, **SMALL, **fields})
    assert reply.status == 200, reply.body
    return reply.json()["id"]


def test_delete_cancels_a_queued_and_a_running_job_and_the_next_runs(server):
    url, videos = server.url, server.service.videos_dir
    running = _create(url, "a long render", num_inference_steps=100)
    queued = _create(url, "never starts")
    after = _create(url, "runs after the deletes")
    wait_for(lambda: call("GET", f"{url}/v1/videos/{running}").json()["pipedit"]["step"] >= 2)
    assert call("GET", f"{url}/v1/videos/{queued}").json()["pipedit"]["queue_position"] == 0
    assert call("GET", f"{url}/v1/videos/{after}").json()["pipedit"]["queue_position"] == 1
    for video_id in (queued, running):
        assert call("DELETE", f"{url}/v1/videos/{video_id}").json() == {
            "id": video_id, "object": "video.deleted", "deleted": True}
        assert call("GET", f"{url}/v1/videos/{video_id}").status == 404
    done = wait_status(url, after, timeout=60)
    assert done["status"] == "completed"
    assert sorted(p.name for p in videos.iterdir()) == [f"{after}.mp4"]  # nothing left of the deleted ones
    assert server.service.store.get(running) is None and server.service.store.get(queued) is None


def test_restart_serves_finished_videos_and_completes_a_job_left_queued(demo_checkpoint, tmp_path):
    first = start(demo_checkpoint, tmp_path)
    finished = _create(first.url, "finished before the restart", num_frames=9)
    wait_status(first.url, finished)
    blocker = _create(first.url, "still running at shutdown", num_inference_steps=30)
    left = _create(first.url, "left in the queue")
    wait_status(first.url, blocker, ("in_progress",))
    first.close()  # the service stops listening before the engine cancels its queue
    second = start(demo_checkpoint, tmp_path, recover=True)
    try:
        assert call("GET", f"{second.url}/v1/videos/{finished}").json()["status"] == "completed"
        content = call("GET", f"{second.url}/v1/videos/{finished}/content")
        (tmp_path / "again.mp4").write_bytes(content.body)
        assert read_mp4(tmp_path / "again.mp4").shape == (9, 64, 64, 3)
        for video_id in (blocker, left):
            assert wait_status(second.url, video_id, timeout=90)["progress"] == 100
        listed = call("GET", f"{second.url}/v1/videos?order=asc").json()
        assert [v["id"] for v in listed["data"]] == [finished, blocker, left]
    finally:
        second.close()


def test_events_stream_increasing_progress_until_completed(server, monkeypatch):
    """The stream samples the job row; the demo model's steps are a few ms, so each step is slowed
    to 0.2 s (the engine runs in this process) for the samples to catch denoising on a busy machine."""
    from pipedit.runtime.denoise import DenoiseJob

    step = DenoiseJob.step

    def slow_step(self, *args, **kwargs):
        time.sleep(0.2)
        return step(self, *args, **kwargs)

    monkeypatch.setattr(DenoiseJob, "step", slow_step)
    video_id = _create(server.url, "a lighthouse at dusk", num_inference_steps=12)
    request = urllib.request.Request(f"{server.url}/v1/videos/{video_id}/events")
    seen = []
    with urllib.request.urlopen(request, timeout=60) as stream:
        assert stream.headers["content-type"].startswith("text/event-stream")
        for line in stream:
            if line.startswith(b"data: "):
                seen.append(json.loads(line[6:]))
    progress = [v["progress"] for v in seen]
    assert seen[-1]["status"] == "completed" and progress[-1] == 100
    assert progress == sorted(progress) and len(set(progress)) >= 3
    steps = [v["pipedit"]["step"] for v in seen if v["pipedit"]["stage"] == "denoising"]
    assert steps and steps == sorted(steps)
