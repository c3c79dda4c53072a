"""The transformer loaded from an official-layout folder equals a direct evaluation of the
documented OpenSoraT2V_v1_3 math (written out here, token by token), in fp64 within 1e-5 (the
two only differ by summation order; 1e-5 is the issue's fp64 bound)."""

import json
import math

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import save_file

from pipedit.errors import ModelPathError
from pipedit.integrations.opensora_plan.transformer import load_transformer

HEADS, HEAD_DIM, LAYERS, TEXT_DIM, CHANNELS, PATCH = 2, 12, 6, 20, 8, 2
DIM = HEADS * HEAD_DIM
CONFIG = {
    "_class_name": "OpenSoraT2V_v1_3", "_diffusers_version": "0.30.2", "decay": 0.9999, "inv_gamma": 1.0,
    "min_decay": 0.0, "optimization_step": 1000, "power": 0.6667, "update_after_step": 0, "use_ema_warmup": False,
    "num_attention_heads": HEADS, "attention_head_dim": HEAD_DIM, "in_channels": CHANNELS, "out_channels": CHANNELS,
    "num_layers": LAYERS, "cross_attention_dim": DIM, "attention_bias": True, "activation_fn": "gelu-approximate",
    "sample_size_h": [40, 40], "sample_size_w": [40, 40], "sample_size_t": 24, "patch_size": PATCH, "patch_size_t": 1,
    "norm_elementwise_affine": False, "norm_eps": 1e-6, "caption_channels": TEXT_DIM, "interpolation_scale_h": 1.0,
    "interpolation_scale_w": 1.0, "interpolation_scale_t": 1.0, "sparse1d": True, "sparse_n": 4,
}


def _official_shapes() -> dict[str, tuple]:
    shapes = {
        "pos_embed.proj.weight": (DIM, CHANNELS, PATCH, PATCH), "pos_embed.proj.bias": (DIM,),
        "caption_projection.linear_1.weight": (DIM, TEXT_DIM), "caption_projection.linear_1.bias": (DIM,),
        "caption_projection.linear_2.weight": (DIM, DIM), "caption_projection.linear_2.bias": (DIM,),
        "adaln_single.emb.timestep_embedder.linear_1.weight": (DIM, 256),
        "adaln_single.emb.timestep_embedder.linear_1.bias": (DIM,),
        "adaln_single.emb.timestep_embedder.linear_2.weight": (DIM, DIM),
        "adaln_single.emb.timestep_embedder.linear_2.bias": (DIM,),
        "adaln_single.linear.weight": (6 * DIM, DIM), "adaln_single.linear.bias": (6 * DIM,),
        "scale_shift_table": (2, DIM), "proj_out.weight": (PATCH * PATCH * CHANNELS, DIM),
        "proj_out.bias": (PATCH * PATCH * CHANNELS,),
    }
    for i in range(LAYERS):
        b = f"transformer_blocks.{i}."
        shapes[b + "scale_shift_table"] = (6, DIM)
        for attn in ("attn1", "attn2"):
            for proj in ("to_q", "to_k", "to_v", "to_out.0"):
                shapes[f"{b}{attn}.{proj}.weight"] = (DIM, DIM)
                shapes[f"{b}{attn}.{proj}.bias"] = (DIM,)
        shapes[b + "ff.net.0.proj.weight"] = (4 * DIM, DIM)
        shapes[b + "ff.net.0.proj.bias"] = (4 * DIM,)
        shapes[b + "ff.net.2.weight"] = (DIM, 4 * DIM)
        shapes[b + "ff.net.2.bias"] = (DIM,)
    return shapes


@pytest.fixture(scope="module")
def official(tmp_path_factory):
    """An official-layout transformer folder: config.json with EMA keys and list sample sizes,
    two safetensors shards and their index."""
    generator = torch.Generator().manual_seed(0)
    state = {name: torch.randn(shape, generator=generator) * (0.02 if "adaln_single.emb" in name else 0.3)
             for name, shape in _official_shapes().items()}
    folder = tmp_path_factory.mktemp("osp") / "any93x640x640"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(CONFIG))
    names = sorted(state)
    shards = {"diffusion_pytorch_model-00001-of-00002.safetensors": names[: len(names) // 2],
              "diffusion_pytorch_model-00002-of-00002.safetensors": names[len(names) // 2:]}
    weight_map = {}
    for file, keys in shards.items():
        save_file({k: state[k] for k in keys}, str(folder / file))
        weight_map.update(dict.fromkeys(keys, file))
    (folder / "diffusion_pytorch_model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    return folder, {k: v.double() for k, v in state.items()}


# -- the documented math, token by token ------------------------------------------------------
def _linear(x, sd, name):
    return x @ sd[name + ".weight"].T + sd[name + ".bias"]


def _gelu_tanh(x):
    return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def _layer_norm(x):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + 1e-6)


def _rope(x, positions):
    """x [S, H, Dh]; each third of Dh rotated by its axis' angle, rotate-half pairs (i, i + c/2).
    Angles computed in float32 as documented, then cast."""
    out = x.clone()
    c = HEAD_DIM // 3
    for axis in range(3):
        for s, pos in enumerate(positions):
            for i in range(c // 2):
                inv = 1.0 / (torch.tensor(10000.0) ** (torch.tensor(2 * i, dtype=torch.float32) / c))
                angle = (torch.tensor(float(pos[axis])) * inv).double()
                a, b = axis * c + i, axis * c + i + c // 2
                out[s, :, a] = x[s, :, a] * torch.cos(angle) - x[s, :, b] * torch.sin(angle)
                out[s, :, b] = x[s, :, b] * torch.cos(angle) + x[s, :, a] * torch.sin(angle)
    return out


def _attend(q, k, v, bias):
    """q [Sq, H, Dh], k/v [Sk, H, Dh], bias [Sk]."""
    scores = torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(HEAD_DIM) + bias
    return torch.einsum("hqk,khd->qhd", scores.softmax(-1), v)


def _groups(seq_len: int, layer: int) -> list[list[int]]:
    """Token index sets of the Skiparse sub-sequences over the padded length (n = 4)."""
    n = 4
    padded = -(-seq_len // (n * n)) * n * n
    if not 2 <= layer < 30:
        return [list(range(seq_len))]
    if layer % 2 == 0:  # single skip: j mod n
        return [[j for j in range(padded) if j % n == k] for k in range(n)]
    return [[j for j in range(padded) if (j // n) % n == m] for m in range(n)]  # group skip


def _self_attention(h, sd, prefix, positions, layer):
    seq_len = h.shape[0]
    q = _rope(_linear(h, sd, prefix + "to_q").reshape(seq_len, HEADS, HEAD_DIM), positions)
    k = _rope(_linear(h, sd, prefix + "to_k").reshape(seq_len, HEADS, HEAD_DIM), positions)
    v = _linear(h, sd, prefix + "to_v").reshape(seq_len, HEADS, HEAD_DIM)
    out = torch.zeros_like(q)
    for members in _groups(seq_len, layer):
        idx = torch.tensor(members)
        real = idx < seq_len
        safe = idx.clamp(max=seq_len - 1)
        mask = real[:, None, None].double()
        bias = torch.where(real, 0.0, -9980.0).double()
        o = _attend(q[safe] * mask, k[safe] * mask, v[safe] * mask, bias)
        out[idx[real]] = o[real]
    return _linear(out.reshape(seq_len, DIM), sd, prefix + "to_out.0")


def reference_forward(sd, x, timestep, text, text_mask):
    batch, _, frames, height, width = x.shape
    rows, cols = height // PATCH, width // PATCH
    positions = [(t, i, j) for t in range(frames) for i in range(rows) for j in range(cols)]
    outputs = []
    for b in range(batch):
        tokens = torch.stack([
            (sd["pos_embed.proj.weight"] * x[b, :, t, i * PATCH:(i + 1) * PATCH, j * PATCH:(j + 1) * PATCH]).sum((1, 2, 3))
            + sd["pos_embed.proj.bias"] for t, i, j in positions
        ])
        # The sinusoid is computed in float32, as documented (then cast to the model dtype).
        freqs = torch.exp(-math.log(10000.0) * torch.arange(128, dtype=torch.float32) / 128)
        angles = timestep[b].float() * freqs
        sinus = torch.cat((torch.cos(angles), torch.sin(angles))).double()
        emb = _linear(F.silu(_linear(sinus, sd, "adaln_single.emb.timestep_embedder.linear_1")), sd,
                      "adaln_single.emb.timestep_embedder.linear_2")
        t6 = _linear(F.silu(emb), sd, "adaln_single.linear").reshape(6, DIM)
        txt = _linear(_gelu_tanh(_linear(text[b], sd, "caption_projection.linear_1")), sd, "caption_projection.linear_2")
        text_bias = (1 - text_mask[b].double()) * -10000.0
        h = tokens
        for layer in range(LAYERS):
            p = f"transformer_blocks.{layer}."
            shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = sd[p + "scale_shift_table"] + t6
            normed = _layer_norm(h) * (1 + scale_msa) + shift_msa
            h = h + gate_msa * _self_attention(normed, sd, p + "attn1.", positions, layer)
            q = _linear(h, sd, p + "attn2.to_q").reshape(-1, HEADS, HEAD_DIM)
            k = _linear(txt, sd, p + "attn2.to_k").reshape(-1, HEADS, HEAD_DIM)
            v = _linear(txt, sd, p + "attn2.to_v").reshape(-1, HEADS, HEAD_DIM)
            h = h + _linear(_attend(q, k, v, text_bias).reshape(-1, DIM), sd, p + "attn2.to_out.0")
            normed = _layer_norm(h) * (1 + scale_mlp) + shift_mlp
            ff = _linear(_gelu_tanh(_linear(normed, sd, p + "ff.net.0.proj")), sd, p + "ff.net.2")
            h = h + gate_mlp * ff
        shift, scale = sd["scale_shift_table"] + emb
        y = _linear(_layer_norm(h) * (1 + scale) + shift, sd, "proj_out")  # [S, (p, q, c)]
        out = torch.zeros(CHANNELS, frames, height, width, dtype=torch.float64)
        for s, (t, i, j) in enumerate(positions):
            patch = y[s].reshape(PATCH, PATCH, CHANNELS)
            out[:, t, i * PATCH:(i + 1) * PATCH, j * PATCH:(j + 1) * PATCH] = patch.permute(2, 0, 1)
        outputs.append(out)
    return torch.stack(outputs)


def test_loaded_transformer_equals_the_documented_math(official):
    folder, state = official
    model = load_transformer(folder, dtype=torch.float64)
    assert [b.layout is not None for b in model.transformer_blocks] == [False, False, True, True, True, True]
    generator = torch.Generator().manual_seed(1)
    # 3 x 3 x 5 patches = 45 tokens: Skiparse pads to 48; the text masks pad 3 and 7 of 10 tokens.
    x = torch.randn(2, CHANNELS, 3, 6, 10, generator=generator, dtype=torch.float64)
    timestep = torch.tensor([999.0, 412.0], dtype=torch.float64)
    text = torch.randn(2, 1, 10, TEXT_DIM, generator=generator, dtype=torch.float64)
    text_mask = torch.tensor([[1] * 7 + [0] * 3, [1] * 3 + [0] * 7])
    got = model(x, timestep, text, encoder_attention_mask=text_mask[:, None])
    want = reference_forward(state, x, timestep, text[:, 0], text_mask)
    assert got.shape == want.shape == x.shape
    assert (got - want).abs().max().item() < 1e-5, (got - want).abs().max().item()
    # The text mask matters (padded tokens change nothing only because they are masked).
    unmasked = model(x, timestep, text, encoder_attention_mask=torch.ones_like(text_mask)[:, None])
    assert (unmasked - got).abs().max().item() > 1e-3


def test_mismatched_weights_are_refused_by_name(official, tmp_path):
    folder, _ = official
    bad = tmp_path / "any93x640x640"
    bad.mkdir()
    (bad / "config.json").write_text(json.dumps({**CONFIG, "num_layers": LAYERS + 1}))
    for f in folder.glob("*.safetensors*"):
        (bad / f.name).write_bytes(f.read_bytes())
    with pytest.raises(ModelPathError, match="transformer_blocks.6"):
        load_transformer(bad)
