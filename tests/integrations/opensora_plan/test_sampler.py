"""The reproducibility convention (facts sheet section 7) through pipedit's denoising job:
one CPU generator per request draws the initial noise (x init_noise_sigma), then one
latent-shaped randn per step after the model call (the ancestral noise); CFG batches
[negative, positive]. Compared with the official loop written out here, in fp32 within 1e-5
(same operations; only batching of the two branches could change the rounding).

init_noise_sigma is sigma_max = sqrt(2**24 - 1) = 4095.99987793..., which the scheduler computes in
float32 and which lies a hair from the midpoint between the float32 neighbours 4095.99976 and 4096.0:
one CPU's kernels give one, another CPU's the other. The tests take the scheduler's own value and
check only that it is one of those two."""

import pytest
import torch
from diffusers import EulerAncestralDiscreteScheduler

from pipedit.adapter import VideoShape
from pipedit.request import VideoRequest
from pipedit.runtime.denoise import DenoiseJob

SHAPE = dict(height=32, width=32, num_frames=5)
SIGMA_MAX_CANDIDATES = (float(torch.tensor(4096.0).nextafter(torch.tensor(0.0))), 4096.0)  # 4095.99976, 4096.0


def _official_scheduler(steps: int) -> EulerAncestralDiscreteScheduler:
    scheduler = EulerAncestralDiscreteScheduler(prediction_type="v_prediction", rescale_betas_zero_snr=True,
                                                timestep_spacing="trailing")
    scheduler.set_timesteps(steps)
    return scheduler


@pytest.fixture(params=SIGMA_MAX_CANDIDATES, ids=["sigma-4095.99976", "sigma-4096"])
def sigma_max(request, monkeypatch):
    """Both float32 roundings of sigma_max, whichever this CPU computes: the scheduler's last
    alpha_cumprod is set so that its sigma is exactly the candidate, for pipedit's job and the
    reference loop alike (both build the scheduler through diffusers' set_timesteps)."""
    wanted = request.param
    original = EulerAncestralDiscreteScheduler.set_timesteps

    def set_timesteps(self, *args, **kwargs):
        original(self, *args, **kwargs)
        self.sigmas[0] = wanted  # trailing spacing: the first timestep is t=999, sigma_max

    monkeypatch.setattr(EulerAncestralDiscreteScheduler, "set_timesteps", set_timesteps)
    return wanted


def test_this_cpu_computes_one_of_the_two_float32_roundings_of_sigma_max():
    scheduler = _official_scheduler(3)
    assert scheduler.init_noise_sigma in SIGMA_MAX_CANDIDATES
    assert scheduler.init_noise_sigma == scheduler.sigmas[0].item() == scheduler.sigmas.max().item()


def _run_job(adapter, cond, seed: int, steps: int = 3, guidance: float = 7.5) -> DenoiseJob:
    request = VideoRequest(prompt="a cat", steps=steps, guidance_scale=guidance, seed=seed, **SHAPE)
    job = DenoiseJob.start(adapter, request, cond)
    while not job.finished:
        job.step(adapter)
    return job


def _official_loop(adapter, cond, seed: int, steps: int, guidance: float):
    scheduler = _official_scheduler(steps)
    generator = torch.Generator("cpu").manual_seed(seed)
    latents = torch.randn(adapter.latent_shape(VideoShape(**SHAPE)), generator=generator) * scheduler.init_noise_sigma
    text = torch.cat([cond["negative_prompt_embeds"], cond["prompt_embeds"]])[:, None]
    mask = torch.cat([cond["negative_prompt_attention_mask"], cond["prompt_attention_mask"]])[:, None]
    for i, t in enumerate(scheduler.timesteps):
        sigma = scheduler.sigmas[i]
        model_input = torch.cat([latents] * 2) / (sigma ** 2 + 1) ** 0.5
        out = adapter.transformer(model_input, torch.tensor([t, t], dtype=torch.float32), text,
                                  encoder_attention_mask=mask)
        uncond, positive = out.chunk(2)
        pred = uncond + guidance * (positive - uncond)
        latents = scheduler.step(pred, t, latents, generator=generator).prev_sample
    return latents, generator


def test_job_follows_the_official_loop_and_draw_order(osp_adapter, sigma_max):
    cond = osp_adapter.encode_prompt("a cat")
    assert cond["prompt_embeds"].shape[1] == 512 and cond["prompt_attention_mask"].sum() < 512  # padded text
    job = _run_job(osp_adapter, cond, seed=7)
    want, generator = _official_loop(osp_adapter, cond, seed=7, steps=3, guidance=7.5)
    assert (job.latents - want).abs().max().item() < 1e-5 * max(1.0, want.abs().max().item())
    # Exactly one initial draw and one ancestral draw per step: the generators end in the same state.
    assert torch.equal(job.generator.get_state(), generator.get_state())


def test_same_seed_same_latents_and_initial_sigma(osp_adapter, sigma_max):
    cond = osp_adapter.encode_prompt("a cat")
    request = VideoRequest(prompt="a cat", steps=3, seed=11, **SHAPE)
    start = DenoiseJob.start(osp_adapter, request, cond)
    unit = torch.randn(start.latents.shape, generator=torch.Generator("cpu").manual_seed(11))
    assert start.scheduler.init_noise_sigma == sigma_max
    assert torch.equal(start.latents, unit * sigma_max)  # one process, the same multiply: exact
    first, again = _run_job(osp_adapter, cond, seed=11), _run_job(osp_adapter, cond, seed=11)
    assert torch.equal(first.latents, again.latents)
    assert not torch.equal(first.latents, _run_job(osp_adapter, cond, seed=12).latents)


def test_guidance_at_most_one_runs_the_positive_branch_only(osp_adapter):
    cond = osp_adapter.encode_prompt("a cat")
    latents = torch.randn(osp_adapter.latent_shape(VideoShape(**SHAPE)), generator=torch.Generator().manual_seed(0))
    t = torch.tensor(500.0)
    negative, positive = osp_adapter.cfg_branches(cond)
    (alone,) = osp_adapter.predict_branches(latents, t, [positive])
    assert torch.equal(osp_adapter.predict_noise(latents, t, cond, 1.0), alone)
    uncond, cond_pred = osp_adapter.predict_branches(latents, t, [negative, positive])
    assert (cond_pred - alone).abs().max() < 1e-5  # batching does not change a branch
    guided = osp_adapter.predict_noise(latents, t, cond, 4.0)
    assert torch.allclose(guided, uncond + 4.0 * (cond_pred - uncond))
    assert (uncond - cond_pred).abs().max() > 1e-4  # the negative prompt makes a difference


def test_without_guidance_the_negative_prompt_is_not_encoded(osp_adapter):
    """As the official pipeline: encode_prompt encodes the negative only under guidance (> 1)."""
    from pipedit.runtime.rank import encode_request

    guided = encode_request(osp_adapter, VideoRequest("a cat", **SHAPE, guidance_scale=7.5, negative_prompt="dull"))
    plain = encode_request(osp_adapter, VideoRequest("a cat", **SHAPE, guidance_scale=1.0, negative_prompt="dull"))
    assert set(plain) == {"prompt_embeds", "prompt_attention_mask"}
    assert set(guided) == set(plain) | {"negative_prompt_embeds", "negative_prompt_attention_mask"}
    assert torch.equal(plain["prompt_embeds"], guided["prompt_embeds"])
    (positive,) = osp_adapter.cfg_branches(plain)
    assert positive["prompt_embeds"] is plain["prompt_embeds"]
    latents = torch.randn(osp_adapter.latent_shape(VideoShape(**SHAPE)), generator=torch.Generator().manual_seed(0))
    t = torch.tensor(500.0)
    assert torch.equal(osp_adapter.predict_noise(latents, t, plain, 0.5), osp_adapter.predict_noise(latents, t, guided, 0.5))


def test_prompts_use_the_official_templates_and_512_tokens(osp_adapter):
    positive = "\n    high quality, high aesthetic, {}\n    "
    negative = ("\n    nsfw, lowres, bad anatomy, bad hands, text, error, missing fingers, extra digit, fewer digits, "
                "cropped, worst quality, \n    low quality, normal quality, jpeg artifacts, signature, watermark, "
                "username, blurry.\n    ")
    cond = osp_adapter.encode_prompt("a cat")
    for text, embeds, mask in ((positive.format("a cat"), "prompt_embeds", "prompt_attention_mask"),
                               (negative, "negative_prompt_embeds", "negative_prompt_attention_mask")):
        tokens = osp_adapter.tokenizer([text], padding="max_length", max_length=512, truncation=True,
                                       return_tensors="pt")
        want = osp_adapter.text_encoder(tokens.input_ids, attention_mask=tokens.attention_mask).last_hidden_state
        assert torch.equal(cond[mask], tokens.attention_mask)
        assert torch.equal(cond[embeds], want)
