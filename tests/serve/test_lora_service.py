"""Named LoRA adapters (model.offered_loras) chosen per request through the API: requests alternating
adapter sets A, none, B, A on a DeDiVAE layout (Ulysses 2 + a decode rank, the decode of one
request overlapping the next one's denoising with another set) each get the video of their own
one-shot run (one rank, the same adapters for the whole run as `pipedit generate --lora` gives
them), so no adapter leaks across a switch; the response echoes each adapter's scale; the options
route lists the names; names the server does not offer, file paths and bad scales get 400.

Tolerance: the latents of the two layouts agree to ~1e-6 relative (tests/runtime/test_wan_parallel_e2e.py
holds them to 1e-4 against diffusers); both videos go through the same 8-bit levels and the same
lossy mp4 encoder, which turns a level's difference where a value sits on a rounding edge into a
few levels nearby (seen: at most 6). So a served video must be within 0.5 levels of its own run on
average (seen: 0.15 at most) and more than 2 from every other set's (seen: 4.2 at least).
"""

import json

import numpy as np
import pytest

from pipedit.adapter import shape_validator
from pipedit.config import EngineConfig, GenerationDefaults, ModelConfig, ParallelConfig
from pipedit.lora.spec import LoraOffer, LoraSpec
from pipedit.render import multipart
from pipedit.request import VideoRequest
from pipedit.runtime.engine import Engine
from pipedit.runtime.engine_loop import EngineLoop
from pipedit.serve.http.app import build_app
from pipedit.serve.jobs.service import JobService
from pipedit.serve.contract.params import ServiceLimits
from pipedit.serve.jobs.store import JobStore
from pipedit.video import read_mp4, write_mp4
from serve_helpers import call, serve_in_thread, wait_status

PROMPT = "a red kite over the dunes"
DEFAULTS = GenerationDefaults(height=48, width=80, num_frames=9, steps=3, seed=11, guidance_scale=5.0)
A = [{"name": "style"}, {"name": "distill", "scale": 1.3}]  # style at its configured 0.7
B = [{"name": "distill", "scale": 0.6}]


@pytest.fixture(scope="module")
def checkpoint(wan_three_heads):
    return wan_three_heads


@pytest.fixture(scope="module")
def adapters(wan_three_heads_adapters):
    return wan_three_heads_adapters


def _one_shot(checkpoint, tmp_path, name, lora=()):
    """The video `pipedit generate --lora PATH:SCALE ...` makes of the request on one rank."""
    config = EngineConfig(model=ModelConfig(path=str(checkpoint), run_loras=lora))
    request = VideoRequest(PROMPT, **{f: getattr(DEFAULTS, f) for f in
                                      ("height", "width", "num_frames", "steps", "seed", "guidance_scale")})
    with Engine(config) as engine:
        frames = engine.generate(request).frames
    return read_mp4(write_mp4(frames, tmp_path / f"{name}.mp4", fps=DEFAULTS.fps))


def _mean_levels(video, other) -> float:
    return float(np.abs(video.astype(int) - other.astype(int)).mean())


def _create(url, loras=None, form=False):
    body = {"prompt": PROMPT, **({"loras": loras} if loras is not None else {})}
    if not form:
        return call("POST", f"{url}/v1/videos", body)
    # The official openai SDK's multipart form of extra_body={"loras": [...]}: bracket fields.
    fields = {"prompt": PROMPT, "loras[][name]": [e["name"] for e in loras],
              "loras[][scale]": [str(e["scale"]) for e in loras]}
    data, media = _bracket_form(fields)
    return call("POST", f"{url}/v1/videos", data=data, headers={"Content-Type": media})


def _form_create(url, fields):
    data, media = multipart.encode(dict(prompt=PROMPT, **fields), {})
    return call("POST", f"{url}/v1/videos", data=data, headers={"Content-Type": media})


def _bracket_form(fields):
    """multipart.encode writes one part per key; the SDK repeats a key for each list entry."""
    boundary = "pipedit-test-boundary"
    parts = [f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'
             for name, values in fields.items() for value in (values if isinstance(values, list) else [values])]
    return ("".join(parts) + f"--{boundary}--\r\n").encode(), f"multipart/form-data; boundary={boundary}"


@pytest.mark.slow
def test_requests_alternating_adapters_get_the_videos_of_their_own_runs(ray_session, checkpoint, adapters,
                                                                        tmp_path):
    loras = {"style": {"path": str(adapters[0]), "scale": 0.7}, "distill": str(adapters[1])}
    config = EngineConfig(model=ModelConfig(path=str(checkpoint), offered_loras=loras, max_gpu_loras=2),
                          parallel=ParallelConfig(ulysses=2, decode_ranks=1))
    engine = EngineLoop.from_config(config)
    store = JobStore.in_folder(tmp_path / "data")
    service = JobService(engine, store, tmp_path / "data", "wan", DEFAULTS, ServiceLimits(),
                         validate=shape_validator(str(checkpoint)), loras=LoraOffer.of(config.model))
    url, stop = serve_in_thread(build_app(service))
    try:
        options = call("GET", f"{url}/v1/pipedit/options").json()
        assert options["loras"] == [{"name": "style", "scale": 0.7}, {"name": "distill", "scale": 1.0}]
        # All four queued at once: request k decodes on the decode rank while k+1 denoises with another set.
        replies = [_create(url, A), _create(url), _create(url, B, form=True), _create(url, A)]
        assert [r.status for r in replies] == [200] * 4, [r.body for r in replies]
        ids = [r.json()["id"] for r in replies]
        done = [wait_status(url, video_id, timeout=300) for video_id in ids]
        assert [service.adapters_of(i) for i in ids] == [["style", "distill"], [], ["distill"], ["style", "distill"]]
        served = []
        for video_id in ids:
            (tmp_path / f"{video_id}.mp4").write_bytes(call("GET", f"{url}/v1/videos/{video_id}/content").body)
            served.append(read_mp4(tmp_path / f"{video_id}.mp4"))
    finally:
        stop()
        service.close()
        engine.close()
        store.close()
    a_scales = [{"name": "style", "scale": 0.7}, {"name": "distill", "scale": 1.3}]
    assert [d["pipedit"]["loras"] for d in done] == [a_scales, [], [{"name": "distill", "scale": 0.6}], a_scales]
    runs = {"a": _one_shot(checkpoint, tmp_path, "a", (f"{adapters[0]}:0.7", f"{adapters[1]}:1.3")),
            "none": _one_shot(checkpoint, tmp_path, "none"),
            "b": _one_shot(checkpoint, tmp_path, "b", (f"{adapters[1]}:0.6",))}
    for video, name in zip(served, ["a", "none", "b", "a"]):
        assert video.shape == runs[name].shape == (9, 48, 80, 3)
        apart = {other: _mean_levels(video, run) for other, run in runs.items()}
        assert apart[name] < 0.5 and all(apart[other] > 2 for other in runs if other != name), (name, apart)


def test_names_the_server_does_not_offer_paths_and_bad_scales_get_400(tmp_path):
    from serve_helpers import IdleEngine

    offer = LoraOffer((("style", LoraSpec("style.safetensors", 0.7)), ("ink", LoraSpec("ink.safetensors"))), 1)
    engine, store = IdleEngine(), JobStore.in_folder(tmp_path)
    service = JobService(engine, store, tmp_path, "wan", DEFAULTS, ServiceLimits(), loras=offer)
    url, stop = serve_in_thread(build_app(service))
    try:
        def refusal(loras):
            reply = _create(url, loras) if not isinstance(loras, str) else _form_create(url, {"loras": loras})
            assert reply.status == 400, reply.body
            return reply.json()["error"]

        unknown = refusal([{"name": "anime"}])
        assert unknown["code"] == "lora_not_found" and unknown["param"] == "loras"
        assert "'anime' is not an adapter this server offers; offered: style, ink" in unknown["message"]
        assert refusal([{"name": "/models/style.safetensors"}])["code"] == "lora_not_found"  # names, never files
        assert refusal([{"path": "style.safetensors"}])["param"].startswith("loras")
        assert "must be a number" in refusal([{"name": "style", "scale": "inf"}])["message"]  # JSON has no inf
        assert refusal([{"name": "style", "scale": "strong"}])["param"].startswith("loras")
        assert "named twice" in refusal([{"name": "style"}, {"name": "style", "scale": 2}])["message"]
        assert "more than this server keeps" in refusal([{"name": "style"}, {"name": "ink"}])["message"]
        assert "JSON list" in refusal("style")["message"]  # one multipart field that is not JSON
        # Accepted in every form: JSON, multipart JSON field, multipart brackets (scales default per name).
        assert _create(url, [{"name": "style"}]).json()["pipedit"]["loras"] == [{"name": "style", "scale": 0.7}]
        reply = _form_create(url, {"loras": [{"name": "style", "scale": 0.5}]})  # a list: one JSON part
        assert reply.json()["pipedit"]["loras"] == [{"name": "style", "scale": 0.5}]
        assert _create(url).json()["pipedit"]["loras"] == []
        options = json.loads(call("GET", f"{url}/v1/pipedit/options").body)
        assert options["loras"] == [{"name": "style", "scale": 0.7}, {"name": "ink", "scale": 1.0}]
        assert options["max_loras"] == 1
    finally:
        stop()
        service.close()
        store.close()
