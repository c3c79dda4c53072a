"""A family added from outside pipedit (tests/fake_family, named by PIPEDIT_FAMILIES only) is served,
planned and dry-run with no change to pipedit: one fresh process, since discovery reads the
environment once."""

import json
import os
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent

SCRIPT = r"""
import json, sys
from pathlib import Path
from pipedit import families
from pipedit.cli import main

out = Path(sys.argv[1])
assert "fake-video" in families.family_names()
demo = families.demo_model("fake-video")
assert families.family_of_checkpoint(demo).name == "fake-video"
config = out / "config.yaml"
config.write_text("model:\n  dtype: bfloat16\nparallel:\n  ulysses: 2\ngeneration:\n  height: 64\n  width: 64\n"
                  "  num_frames: 9\n")
results = {
    "plan": main(["plan", "--model", "fake-video", "--gpus", "2", "--top", "1"]),
    "dry-run": main(["dry-run", "--config", str(config), "--model-path", str(demo), "--json"]),
    "generate": main(["generate", "--model", "fake-video", "--prompt", "a fox", "--output", str(out / "fox.mp4"),
                      "--height", "64", "--width", "64", "--num-frames", "5", "--steps", "2"]),
}

# Served: the job service a replica runs, on the family's demo model, as `pipedit serve --model fake-video` builds it.
import time
from pipedit.config import EngineConfig, ModelConfig
from pipedit.serve.contract.schemas import VideoCreateParams
from pipedit.serve.jobs.from_config import open_service
from pipedit.video import read_mp4

service = open_service(EngineConfig(model=ModelConfig(name="fake-video")), out / "serve")
try:
    video = service.create(VideoCreateParams(prompt="a boat", size="64x48", num_frames=5, num_inference_steps=2))
    deadline = time.monotonic() + 300
    while service.get(video.id).status not in ("completed", "failed") and time.monotonic() < deadline:
        time.sleep(0.2)
    served = service.get(video.id)
    results["served"] = [video.model, served.status, served.error and str(served.error),
                         list(read_mp4(service.content_path(video.id)).shape) if served.status == "completed" else None]
finally:
    service.shutdown()
print("RESULTS " + json.dumps(results))
"""


def test_a_family_from_outside_is_served_planned_and_dry_run(tmp_path):
    env = {**os.environ, "PIPEDIT_FAMILIES": "fake_family.family", "PIPEDIT_CACHE": str(tmp_path / "cache"),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path)], env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout.rsplit("RESULTS ", 1)[1])
    assert results == {"plan": 0, "dry-run": 0, "generate": 0,
                       "served": ["fake-video-demo", "completed", None, [5, 48, 64, 3]]}, done.stdout[-3000:]
    assert "Fake video (13B)" in done.stdout  # the plan of the fake family's full-size model
    assert (tmp_path / "fox.mp4").stat().st_size > 0
