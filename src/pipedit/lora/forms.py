"""pipedit's own reading of LoRA files in the forms trainers write, into the diffusers layers of a
family's transformer (the family's key renames: Family.lora_names, a tuple of Rename).

Forms read, by their keys (any subset of layers; a key names a layer, then its part):
- diffusers/PEFT: `[transformer.|base_model.model.]<diffusers layer>.lora_A/lora_B.weight`, rank and
  alpha from the file's adapter metadata or a PEFT adapter_config.json beside it (alpha = rank
  when neither gives one);
- original: `[diffusion_model.]<original layer>.lora_down/lora_up.weight` or `.lora_A/.lora_B.weight`,
  with `.alpha`; a fused original layer (HunyuanVideo's img_attn_qkv, linear1) is split by rows
  into the diffusers layers it became (the down matrix is shared, the up matrix split);
- musubi-tuner / kohya: `lora_unet_<original layer, dots as underscores>.lora_down/lora_up.weight`
  with `.alpha`;
- full deltas as lightx2v and others write them: `<layer>.diff` (the weight's delta) and
  `<layer>.diff_b` (the bias's), on any layer or parameter (norms, modulation tables), or alone.

Meaning, per layer: W + scale * alpha/r * B @ A, and every diff / diff_b added as written (times
the adapter's scale). Conversion gives the low-rank pairs with alpha/r folded into B (a diff_b of
a layer with a pair becomes its peft bias, as diffusers reads it) and the other deltas as
parameter deltas, added to the weights by the caller. A key that names no layer is refused with
the form the file looks like.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..errors import UserInputError

_PREFIXES = ("base_model.model.", "model.diffusion_model.", "diffusion_model.", "transformer.")
KOHYA = "lora_unet_"
_PARTS = ((".lora_down.weight", "down"), (".lora_up.weight", "up"), (".lora_A.weight", "down"),
          (".lora_B.weight", "up"), (".lora_B.bias", "diff_b"), (".alpha", "alpha"), (".diff_b", "diff_b"),
          (".diff", "diff"), (".dora_scale", "dora"), (".lora_magnitude_vector", "dora"))


@dataclass(frozen=True)
class Rename:
    """An original layer name (a regular expression, matched whole) and the diffusers names it
    became (templates with \\1 ...; a parameter or a layer). Several: the original's output rows
    in that order, each target taking its own row count; `name@k/n`: the k-th of n equal row parts
    of `name` (HunyuanVideo's final modulation, whose shift and scale halves diffusers swaps).
    `refused`: no targets; a key matching `original` is refused as a LoRA on what this says (a
    part of the model pipedit does not apply adapters to)."""

    original: str
    targets: tuple[str, ...]
    refused: str = ""

    def match(self, name: str, kohya: bool) -> list[str] | None:
        pattern = self.original.replace(r"\.", "_") if kohya else self.original
        found = re.fullmatch(pattern, name)
        return None if found is None else [found.expand(target) for target in self.targets]


@dataclass
class Converted:
    form: str
    pairs: dict[str, tuple] = field(default_factory=dict)  # layer -> (A, B x alpha/r, bias delta or None)
    deltas: dict[str, torch.Tensor] = field(default_factory=dict)  # parameter -> delta, as written

    def peft_state_dict(self, prefix: str) -> dict[str, torch.Tensor]:
        """The pairs in the keys diffusers' load_lora_adapter takes (its scaling then 1: alpha = r)."""
        found = {}
        for layer, (down, up, bias) in self.pairs.items():
            found[f"{prefix}.{layer}.lora_A.weight"] = down
            found[f"{prefix}.{layer}.lora_B.weight"] = up
            if bias is not None:
                found[f"{prefix}.{layer}.lora_B.bias"] = bias
        return found


def split_key(key: str) -> tuple[str, str, str | None]:
    """(layer name as written, part, prefix stripped or None) of a file's key; part "" when unknown."""
    stripped = None
    for prefix in (KOHYA, *_PREFIXES):
        if key.startswith(prefix):
            stripped, key = prefix, key[len(prefix):]
            break
    for suffix, part in _PARTS:
        if key.endswith(suffix):
            return key[:-len(suffix)], part, stripped
    return key, "", stripped


def form_of(keys) -> str:
    """The form a file's keys look like, in words (for refusals and logs)."""
    splits = [split_key(key) for key in keys]
    if any(prefix == KOHYA for _, _, prefix in splits):
        return "musubi-tuner/kohya (lora_unet_...)"
    if splits and all(part in ("diff", "diff_b") for _, part, _ in splits):
        return "full deltas only (.diff / .diff_b)"
    if any(prefix in ("diffusion_model.", "model.diffusion_model.") for _, _, prefix in splits):
        return "original (diffusion_model. ...)"
    if any(part in ("alpha", "diff", "diff_b") for _, part, _ in splits):
        return "original (no prefix)"
    return "diffusers/PEFT (lora_A / lora_B)"


def read_file(path: Path) -> tuple[dict[str, torch.Tensor], dict]:
    """(tensors, adapter settings: lora_alpha, alpha_pattern, use_rslora, use_dora where given)."""
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as handle:
        tensors = {key: handle.get_tensor(key) for key in handle.keys()}
        header = handle.metadata() or {}
    settings: dict = {}
    if "lora_adapter_metadata" in header:  # diffusers' save_lora_weights: transformer.<setting>
        stored = json.loads(header["lora_adapter_metadata"])
        settings = {key.split(".", 1)[-1]: value for key, value in stored.items()}
    beside = path.parent / "adapter_config.json"  # peft's save_pretrained
    if not settings and beside.is_file():
        settings = json.loads(beside.read_text())
    return tensors, settings


def convert(tensors: dict[str, torch.Tensor], settings: dict, model: torch.nn.Module, renames: tuple[Rename, ...],
            where: str) -> Converted:
    """The file's LoRA in `model`'s layers; UserInputError naming the first key it cannot place."""
    form = form_of(tensors)
    if settings.get("use_dora"):
        raise UserInputError(f"{where}: DoRA adapters ({form} form) are not read by pipedit's conversion")
    layers = dict(model.named_modules())
    params = dict(model.named_parameters())
    kohya_names = {name.replace(".", "_"): name for name in (*layers, *params) if name}
    groups: dict[str, dict[str, torch.Tensor]] = {}
    prefixes = {}
    for key, tensor in tensors.items():
        name, part, prefix = split_key(key)
        if part in ("", "dora"):
            raise UserInputError(f"{where}: key {key!r} is no LoRA part pipedit reads (the file looks like the "
                                 f"{form} form; read: lora_A/lora_B, lora_down/lora_up, alpha, diff, diff_b)")
        groups.setdefault(name, {})[part] = tensor
        prefixes[name] = (prefix, key)
    original = any(prefix in (KOHYA, "diffusion_model.", "model.diffusion_model.") for prefix, _ in prefixes.values()) \
        or not all(name in layers or name in params for name in groups)
    converted = Converted(form)
    for name, parts in groups.items():
        prefix, key = prefixes[name]
        kohya = prefix == KOHYA
        refusal = next((r.refused for r in renames if r.refused and r.match(name, kohya) is not None), None)
        if refusal:
            raise UserInputError(f"{where}: its key {key!r} is a LoRA on {refusal}")
        targets = _targets(name, kohya, original, renames, layers, params, kohya_names)
        if targets is None:
            raise UserInputError(f"{where} does not fit this {type(model).__name__}: its key {key!r} matches no layer "
                                 f"(the file looks like the {form} form)")
        _place(converted, parts, targets, layers, params, settings, name, where, key)
    return converted


def _targets(name, kohya, original, renames, layers, params, kohya_names) -> list[str] | None:
    if original:
        for rename in renames:
            if rename.refused:
                continue
            found = rename.match(name, kohya)
            if found is not None:  # a layer this model lacks (a block beyond its depth) matches none
                bases = [target.partition("@")[0] for target in found]
                return found if all(base in layers or base in params for base in bases) else None
    direct = kohya_names.get(name) if kohya else name
    return [direct] if direct in layers or direct in params else None


def _rows(target: str, layers, params) -> tuple[str, int, slice]:
    """(layer or parameter, its row count, the rows this target takes)."""
    base, _, part = target.partition("@")
    module = layers.get(base)
    count = module.weight.shape[0] if module is not None and hasattr(module, "weight") else params[base].shape[0]
    if not part:
        return base, count, slice(0, count)
    index, parts = (int(n) for n in part.split("/"))
    size = count // parts
    return base, count, slice(index * size, (index + 1) * size)


def _split(tensor: torch.Tensor, targets: list[str], layers, params, where: str, key: str) -> dict[str, torch.Tensor]:
    """The rows of `tensor` (an original layer's) placed in each target's own rows."""
    placed: dict[str, torch.Tensor] = {}
    start = 0
    for target in targets:
        base, count, rows = _rows(target, layers, params)
        size = rows.stop - rows.start
        if len(targets) == 1 and "@" not in target:
            return {base: tensor}
        piece = tensor[start:start + size]
        start += size
        whole = placed.setdefault(base, torch.zeros((count, *tensor.shape[1:]), dtype=tensor.dtype))
        whole[rows] = piece
    if start != tensor.shape[0]:
        raise UserInputError(f"{where}: its key {key!r} has {tensor.shape[0]} rows, its layers here "
                             f"{', '.join(targets)} take {start}")
    return placed


def _place(converted, parts, targets, layers, params, settings, name, where, key) -> None:
    down, up = parts.get("down"), parts.get("up")
    if (down is None) != (up is None):
        raise UserInputError(f"{where}: its key {key!r} has a {'down' if up is None else 'up'} matrix without "
                             f"its other half")
    bias_with_pair = None
    if down is not None:
        if down.ndim != 2 or up.ndim != 2:
            raise UserInputError(f"{where}: its key {key!r} is a LoRA on a {down.ndim}-d weight (a convolution): "
                                 f"pipedit reads LoRA on linear layers")
        rank = down.shape[0]
        alpha = float(parts["alpha"]) if "alpha" in parts else _alpha(settings, name, rank)
        factor = alpha / math.sqrt(rank) if settings.get("use_rslora") else alpha / rank
        ups = _split(up.float() * factor, targets, layers, params, where, key)
        biases = _split(parts["diff_b"].float(), targets, layers, params, where, key) if "diff_b" in parts else {}
        for layer, layer_up in ups.items():
            module = layers.get(layer)
            if not isinstance(getattr(module, "base_layer", module), torch.nn.Linear):  # peft's wrapper: one before
                raise UserInputError(f"{where}: its key {key!r} is a LoRA on {layer}, which is not a linear layer")
            converted.pairs[layer] = (down.float(), layer_up, biases.get(layer))
        bias_with_pair = True
    for part, attribute in (("diff", "weight"), ("diff_b", "bias")):
        if part not in parts or (part == "diff_b" and bias_with_pair):
            continue
        for target, delta in _split(parts[part].float(), targets, layers, params, where, key).items():
            param = target if target in params else f"{target}.{attribute}"
            if param not in params:  # the layer already wrapped by an earlier adapter's peft layer
                param = f"{target}.base_layer.{attribute}"
            if param not in params or params[param].shape != delta.shape:
                raise UserInputError(f"{where}: its key {key!r} gives a {tuple(delta.shape)} delta, which fits no "
                                     f"parameter of {target} here")
            converted.deltas[param] = delta


def _alpha(settings: dict, name: str, rank: int) -> float:
    for pattern, alpha in (settings.get("alpha_pattern") or {}).items():
        if re.fullmatch(rf"(.*\.)?{pattern.lstrip('^')}", name):
            return float(alpha)
    return float(settings.get("lora_alpha", rank))
