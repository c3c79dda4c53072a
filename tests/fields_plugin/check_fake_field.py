"""What each interface makes of a field registered from outside pipedit (fake_sharpness.py), printed
as one JSON object. tests/test_fields.py runs it in a fresh interpreter with
PIPEDIT_FIELD_MODULES=fake_sharpness, so that every class built from the fields at import has it."""

from __future__ import annotations

import json
import pickle
import sys
import tempfile
import time
from pathlib import Path

import torch

from idle_app import asgi_request
from pipedit.adapter import UnsupportedInputError, check_inputs
from pipedit.capabilities import Capabilities
from pipedit.cli import build_parser
from pipedit.cli.flags import engine_config
from pipedit.config import GenerationDefaults, load_config
from pipedit.errors import UserInputError
from pipedit.render.prompts import read_lines
from pipedit.render.single import request_from_config
from pipedit.request import VideoRequest
from pipedit.runtime.denoise import DenoiseJob
from pipedit.serve.http.app import build_app
from pipedit.serve.jobs.service import JobService
from pipedit.serve.contract.params import ServiceLimits
from pipedit.serve.jobs.store import JobStore
from serve_helpers import IdleEngine


class SharpModel:
    """A served model that takes sharpness; what its scheduler and its hooks are given is kept."""

    family = "sharp-test"
    capabilities = Capabilities(sharpness=True)

    def __init__(self):
        self.sampling = None

    def validate(self, shape, steps) -> None:
        pass

    def make_scheduler(self, sampling):
        self.sampling = sampling
        return None, torch.zeros(sampling.steps)

    def prepare_latents(self, shape, generator):
        return torch.zeros(1)

    def predict_noise(self, latents, timestep, cond, guidance_scale):
        return latents


class KeepingEngine(IdleEngine):
    def __init__(self):
        super().__init__()
        self.requests = []

    def submit(self, request):
        self.requests.append(request)
        return super().submit(request)


def _refusal(call) -> str | None:
    try:
        call()
    except UserInputError as error:
        return str(error)
    return None


def _cli(folder: Path) -> dict:
    parser = build_parser()
    generate = parser.parse_args(["generate", "--prompt", "a", "--output", "a.mp4", "--sharpness", "0.3"])
    render = parser.parse_args(["render", "p.txt", "--out-dir", str(folder), "--sharpness", "0.4"])
    return {"generate": engine_config(generate).generation.sharpness,
            "render": engine_config(render).generation.sharpness}


def _config(folder: Path) -> dict:
    good, bad = folder / "good.yaml", folder / "bad.yaml"
    good.write_text("generation:\n  sharpness: 0.25\n")
    bad.write_text("generation:\n  sharpness: 2\n")
    config = load_config(good)
    return {"loaded": config.generation.sharpness, "default": GenerationDefaults().sharpness,
            "refused": _refusal(lambda: load_config(bad)),
            "request_from_config": request_from_config(config, "a fox").sharpness}


def _request() -> dict:
    request = VideoRequest("a fox", sharpness=0.5, steps=3)
    model = SharpModel()
    job = DenoiseJob.start(model, pickle.loads(pickle.dumps(request)), cond={})
    return {"value": request.sharpness, "default": VideoRequest("a fox").sharpness,
            "refused": _refusal(lambda: VideoRequest("a fox", sharpness=-1)),
            "pickled": pickle.loads(pickle.dumps(request)) == request,
            "field_values": request.field_values()["sharpness"],
            "scheduler_got": model.sampling.sharpness, "job_request": job.request.sharpness,
            "capability_refusal": _refusal(lambda: check_inputs(object(), **request.field_values())),
            "rule_refusal": _refusal(lambda: check_inputs(model, **dict(request.field_values(), steps=1)))}


def _render(folder: Path) -> dict:
    prompts = folder / "p.jsonl"
    prompts.write_text('{"prompt": "a fox"}\n{"prompt": "a fox", "sharpness": 0.5}\n{"prompt": "a fox", '
                       '"sharpness": 7}\n')
    plain, sharp, bad = read_lines(prompts, GenerationDefaults(), "m")
    return {"plain_key": plain.key, "sharp_key": sharp.key, "sharp_setting": sharp.settings.get("sharpness"),
            "error": bad.error}


def _api(folder: Path) -> dict:
    engine, model = KeepingEngine(), SharpModel()
    service = JobService(engine, JobStore.in_folder(folder), folder, "m", GenerationDefaults(64, 64, 5, 2),
                         ServiceLimits(), validate=model.validate)
    try:
        app = build_app(service)
        body = json.loads(asgi_request(app, "GET", "/openapi.json")[2])["paths"]["/v1/videos"]["post"]["requestBody"]
        options = json.loads(asgi_request(app, "GET", "/v1/pipedit/options")[2])
        headers = {"content-type": "application/json"}
        created = asgi_request(app, "POST", "/v1/videos", headers, b'{"prompt": "a fox", "sharpness": 0.75}')
        ruled = asgi_request(app, "POST", "/v1/videos", headers,
                             b'{"prompt": "a fox", "sharpness": 0.75, "num_inference_steps": 1}')
        deadline = time.monotonic() + 30
        while not engine.requests and time.monotonic() < deadline:
            time.sleep(0.05)
        return {"schema": {kind: content["schema"]["properties"].get("sharpness")
                           for kind, content in body["content"].items()},
                "option": next((f for f in options["fields"] if f["name"] == "sharpness"), None),
                "takes": options.get("takes_sharpness"),
                "created": created[0], "echo": json.loads(created[2])["pipedit"].get("sharpness"),
                "ruled": [ruled[0], json.loads(ruled[2])["error"]],
                "engine_got": [r.sharpness for r in engine.requests]}
    finally:
        service.close()
        service.store.close()


def main() -> None:
    with tempfile.TemporaryDirectory() as temporary:
        folder = Path(temporary)
        observed = {"cli": _cli(folder), "config": _config(folder), "request": _request(),
                    "render": _render(folder), "api": _api(folder / "serve")}
    json.dump(observed, sys.stdout)


if __name__ == "__main__":
    main()
