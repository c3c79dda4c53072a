"""Wan's causal VAE decode (diffusers AutoencoderKLWan, Wan2.1's 16 and Wan2.2's 48 channels): FLOPs
and peak memory, walked from its config.

How diffusers decodes (and pipedit's wan adapter with it, untiled): one latent frame per decoder
call, in order; every causal 3x3x3 convolution keeps the last 2 frames of its input in a feature
cache for the next call. A call turns 1 latent frame into 4 video frames (the first call into 1):
the two temporal upsamplers double the frames of every call after the first, so a level with
`lt` latent frames runs lt, 2lt-1, then 4lt-3 (= the video's) frames in all. Decoder blocks (from
the latent side): conv_in, a mid block (resnet, single-head attention within each frame, resnet)
at dims[0], then len(dim_mult) up blocks of num_res_blocks + 1 resnets, each but the last
followed by an upsampler (2x nearest in space + a 3x3 conv; temporal ones first a (3,1,1) conv to
twice the channels that become two frames). Wan2.1's upsamplers halve the channels; Wan2.2's
(`is_residual`) keep them and add a parameter-free shortcut. Wan2.2 then unpatchifies 2x2 pixels.

Memory of one decode (activations only: weights and latents are resident already), in the VAE's
dtype:
- the feature cache: 2 frames of every causal convolution's input, at its level (it persists
  over the whole decode);
- one call's tensors: a factor x the largest tensor of a call (4 frames at its level): the block
  input kept for the residual, norm and activation outputs, the causal padding copy with its 2
  cached frames, the convolution output; Wan2.2's residual up blocks also keep their input for
  the shortcut and make channel-repeated and permuted copies of it (RESIDUAL_FACTOR);
- the decoded frames: each call's output is concatenated onto the video so far (torch.cat: both
  alive), then clamped (another copy); pipedit then converts the video to float32 frames in [0,
  1] (two float32 copies alive at once beside the VAE's video);
- the mid block's attention within a frame: SDPA without a fused kernel for its single
  384/1024-wide head materialises the frame's [N, N] scores (N = latent height x width) in
  float32 and their softmax: counted as 2 x 4 bytes per entry, apart from the convolutions.
The factors were set against diffusers' own decode (and pipedit's frame conversion) run on fake
tensors, which count every storage it allocates (pipedit.dryrun.memory), bfloat16, released
configs: Wan2.1 at 832x480x17, 832x480x81, 1280x720x81 measured 3.80, 3.95, 9.11 GiB (predicted
+1% to +4%); Wan2.2 at 1280x704x41 and x121 measured 9.23 and 9.64 GiB (+2%, +6%); a test keeps
the bound. Not measured on a GPU: cuDNN workspaces and the caching allocator come on top (the
planner's ALLOCATOR_OVERHEAD).
"""

from __future__ import annotations

from dataclasses import dataclass

ACTIVATION_FACTOR = 3.5
RESIDUAL_FACTOR = 7.0
FRAMES_PER_CALL = 4  # video frames one decoder call makes (after the first)
CACHE_FRAMES = 2  # diffusers' CACHE_T
SCORE_BYTES = 8  # float32 scores and their softmax, per entry of a frame's attention matrix


@dataclass(frozen=True)
class Conv:
    cin: int
    cout: int
    taps: int
    frames: int  # output frames over the whole decode
    height: int
    width: int
    cached: bool  # a causal convolution that keeps CACHE_FRAMES of its input


@dataclass(frozen=True)
class Walk:
    convs: tuple[Conv, ...]
    attention: tuple[int, int, int]  # (channels, frames, tokens per frame) of the mid block
    largest: int  # elements of the largest tensor of one decoder call
    output: int  # elements of the decoded video


def _dims(vae: dict) -> list[int]:
    base, mult = vae.get("decoder_base_dim") or vae["base_dim"], vae["dim_mult"]
    return [base * m for m in [mult[-1], *mult[::-1]]]


def walk(vae: dict, lt: int, lh: int, lw: int) -> Walk:
    """Every convolution of a decode of latents (lt, lh, lw), from the config alone."""
    dims, residual, ups = _dims(vae), vae.get("is_residual", False), vae["temperal_downsample"][::-1]
    convs: list[Conv] = []
    frames, call, h, w = lt, 1, lh, lw
    largest = 0

    def conv(cin, cout, taps, cached=True):
        nonlocal largest
        convs.append(Conv(cin, cout, taps, frames, h, w, cached))
        largest = max(largest, (cin + (CACHE_FRAMES if cached and taps == 27 else 0)) * call * h * w,
                      cout * call * h * w)

    def resnet(cin, cout):
        conv(cin, cout, 27)
        conv(cout, cout, 27)
        if cin != cout:
            conv(cin, cout, 1, cached=False)

    conv(vae["z_dim"], dims[0], 27)
    resnet(dims[0], dims[0])
    attention = (dims[0], frames, h * w)
    resnet(dims[0], dims[0])
    for i, (cin, cout) in enumerate(zip(dims[:-1], dims[1:])):
        resnet(cin // 2 if i > 0 and not residual else cin, cout)
        for _ in range(vae["num_res_blocks"]):
            resnet(cout, cout)
        if i == len(dims) - 2:
            break
        if ups[i]:  # the (3,1,1) conv runs on every call but the first, to two frames' channels
            convs.append(Conv(cout, 2 * cout, 3, frames - 1, h, w, True))
            frames, call = 2 * frames - 1, 2 * call
        h, w = 2 * h, 2 * w
        largest = max(largest, cout * call * h * w)  # the interpolated frames before the conv
        conv(cout, cout if residual else cout // 2, 9, cached=False)
    conv(dims[-1], vae["out_channels"], 27)
    return Walk(tuple(convs), attention, largest, vae["out_channels"] * frames * h * w)


def decode_flops(vae: dict, lt: int, lh: int, lw: int) -> float:
    """One untiled decode: 2 FLOPs per multiply-add of every convolution, plus the mid block's
    attention (scores and weighted sum) within each frame and its 1x1 projections."""
    found = walk(vae, lt, lh, lw)
    flops = sum(2.0 * c.taps * c.cin * c.cout * c.frames * c.height * c.width for c in found.convs)
    channels, frames, tokens = found.attention
    return flops + frames * (4.0 * tokens * tokens * channels + 8.0 * channels * channels * tokens)


def cache_elements(found: Walk) -> int:
    return sum(CACHE_FRAMES * c.cin * c.height * c.width for c in found.convs if c.cached)


def decode_peak_bytes(vae: dict, lt: int, lh: int, lw: int, itemsize: int = 2) -> float:
    """Peak activation bytes of one untiled decode (see the module docstring)."""
    found = walk(vae, lt, lh, lw)
    _, _, tokens = found.attention
    factor = RESIDUAL_FACTOR if vae.get("is_residual", False) else ACTIVATION_FACTOR
    during = (cache_elements(found) + factor * found.largest + 2 * found.output) * itemsize
    scores = SCORE_BYTES * tokens * tokens + cache_elements(found) * itemsize
    frames = found.output * (itemsize + 2 * 4)  # the VAE's video and two float32 copies of it
    return max(during, scores, frames)
