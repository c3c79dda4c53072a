"""DeDiVAE and Aco end to end on the demo model (Ray actors, gloo).

Every request's latents and frames must equal the single-device run. The decode rank runs the
same VAE on the same latents, and Aco moves heads between ranks without changing their math, so
differences come only from thread-count-dependent float reordering in CPU kernels: 1e-4. Frames
from a rank actor travel as 8-bit levels (pipedit.request.VideoResult), so they are within half a
level of the in-process frames, plus that reordering.
"""

from dataclasses import replace

import pytest

from pipedit.config import EngineConfig, GenerationDefaults, ModelConfig, ParallelConfig
from pipedit.request import RequestFailure, VideoRequest
from pipedit.runtime.engine import Engine

pytestmark = pytest.mark.slow  # rank groups on Ray, end to end
PROMPTS = ["a red fox in snow", "a lighthouse at dusk", "rain on a window", "a paper boat on a river"]
TOLERANCE = 1e-4
FRAME_TOLERANCE = 0.5 / 255 + TOLERANCE


def _requests():
    return [VideoRequest(p, height=64, width=96, num_frames=9, steps=2, seed=i) for i, p in enumerate(PROMPTS)]


def _config(path, **parallel):
    return EngineConfig(model=ModelConfig(path=str(path)), parallel=ParallelConfig(**parallel))


@pytest.fixture(scope="module")
def reference(demo_checkpoint):
    with Engine(_config(demo_checkpoint)) as engine:
        return {r.request_id: engine.generate(r) for r in _requests()}


def _by_prompt(outcomes, requests):
    ids = {r.request_id: r.prompt for r in requests}
    return {ids[o.request_id]: o for o in outcomes}


def _assert_equal_to_reference(outcomes, requests, reference):
    expected = {r.prompt: reference[ref_id] for ref_id, r in zip(reference, _requests())}
    got = _by_prompt(outcomes, requests)
    assert sorted(got) == sorted(PROMPTS)
    for prompt, result in got.items():
        assert not isinstance(result, RequestFailure), result.message
        assert (result.latents - expected[prompt].latents).abs().max().item() <= TOLERANCE
        assert (result.frames - expected[prompt].frames).abs().max().item() <= FRAME_TOLERANCE


@pytest.mark.parametrize("ulysses", [1, 2], ids=["denoise1-decode1", "denoise2-decode1"])
def test_pipelined_requests_equal_single_device_with_and_without_aco(ray_session, demo_checkpoint, reference, ulysses):
    with Engine(_config(demo_checkpoint, ulysses=ulysses, decode_ranks=1)) as engine:
        for aco in ("off", "on"):
            requests = _requests()
            outcomes = list(engine.generate_many(requests, aco=aco))
            _assert_equal_to_reference(outcomes, requests, reference)
            aco_steps = sum(o.timings["aco_steps"] for o in outcomes)
            assert (aco_steps > 0) == (aco == "on")  # on: used whenever the decode rank is idle
        parameters = [engine.executor.call_rank(r, "loaded_parameters") for r in range(ulysses + 1)]
    for rank in range(ulysses):
        assert parameters[rank]["transformer"] > 0 and "vae" not in parameters[rank]
    assert parameters[ulysses]["vae"] > 0 and "transformer" not in parameters[ulysses]
    assert "text_encoder" in parameters[ulysses]  # HunyuanVideo keeps its text encoder with the VAE


def test_object_store_handoff_and_text_encoder_with_the_dit(ray_session, demo_checkpoint, reference):
    with Engine(_config(demo_checkpoint, decode_ranks=1, handoff="object_store", text_encoder="dit", aco="off")) as engine:
        requests = _requests()
        _assert_equal_to_reference(list(engine.generate_many(requests)), requests, reference)
        # Every call was collected: no `finish` ref (rank 0's latents, here in the object store)
        # stays pinned in the executor's bookkeeping after its decode.
        assert sorted(method for _, method in engine.executor._calls.values()) == []
        assert "text_encoder" in engine.executor.call_rank(0, "loaded_parameters")


def test_decode_ranks_auto_uses_the_balance_rule(ray_session, demo_checkpoint, tmp_path, monkeypatch):
    monkeypatch.setenv("PIPEDIT_CACHE", str(tmp_path))
    # The calibration measures the config's default request: the shape this module's requests have.
    config = replace(_config(demo_checkpoint, decode_ranks="auto", ranks=3),
                     generation=GenerationDefaults(height=64, width=96, num_frames=9, steps=2))
    with Engine(config) as engine:
        layout = engine.layout
        result = engine.generate(_requests()[0])
    assert layout.world_size == 3 and 1 <= layout.decode <= 2
    assert result.latents.shape == (1, 16, 3, 8, 12)
    assert (tmp_path / "calibration.json").is_file()  # measured once, cached for next time


# One engine for both phases' failures (the engine reads PIPEDIT_FAULTS when it starts, and hands
# it to every rank group it builds): each case's batch holds the one prompt its fault fires on.
# Hazard: it holds its 2 ranks' CPUs until the module ends (the session Ray has 4), so these
# tests come last: a test after them starting 3 ranks would wait for CPUs that never free.
FAILING = {"denoise": "a lighthouse at dusk", "decode": "a lantern at dusk"}


@pytest.fixture(scope="module")
def failing_engine(ray_session, demo_checkpoint):
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PIPEDIT_FAULTS", "fail:phase=denoise:prompt=lighthouse,fail:phase=decode:prompt=lantern")
        engine = Engine(_config(demo_checkpoint, decode_ranks=1, aco="off"))
    with engine:
        yield engine


@pytest.mark.parametrize("phase", ["denoise", "decode"])
def test_a_failing_request_fails_alone(failing_engine, phase):
    requests = [VideoRequest(FAILING[phase] if p == "a lighthouse at dusk" else p, height=64, width=96, num_frames=9,
                             steps=2, seed=i) for i, p in enumerate(PROMPTS)]
    outcomes = _by_prompt(failing_engine.generate_many(requests), requests)
    failed = outcomes.pop(FAILING[phase])
    assert isinstance(failed, RequestFailure)
    assert failed.phase == phase and "injected" in failed.message
    assert all(not isinstance(o, RequestFailure) for o in outcomes.values())
    assert len(outcomes) == 3
