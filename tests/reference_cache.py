"""diffusers' reference outputs kept on disk between test runs.

A reference run (diffusers' pipeline on a tiny checkpoint) is the slow half of every parity test
and gives the same output for the same inputs. `cached(pipe, checkpoint)` wraps a loaded
pipeline: called as the pipeline is (`pipe(prompt=..., ...).frames`), it returns the frames (and
the sound, `.audio`, of a model with sound) stored under a key of everything the output depends on, else runs the pipeline and stores them:

- the checkpoint folder's bytes (tokenizers and configs included),
- every weight the pipeline holds as loaded (dtype changes and LoRA weights included) and the
  LoRA scales set on its layers, its scheduler's class and config,
- every call argument (a generator by its state, an image or tensor by its bytes),
- the versions of diffusers, transformers, peft, torch and av, and torch's thread count.

A changed pin, checkpoint or argument is another key: the reference is recomputed. A call with an
argument that has no stable description (a callback), or on a pipeline with diffusers hooks (a step
cache a test watches decide), runs the pipeline every time. The folder is
$PIPEDIT_CACHE/test-references (pipedit.local_cache's default otherwise); deleting it is always
safe. Caveat: a cached call leaves the generator it was given where it was, unadvanced.
"""

from __future__ import annotations

import hashlib
import os
from importlib.metadata import version
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

from pipedit.local_cache import default_cache_dir

PACKAGES = ("diffusers", "transformers", "peft", "torch", "av")  # av: LTX-2 image-to-video's image re-encode
FORMAT = "outputs-dict"  # what a file holds: part of the key, so files of another form are never read


class Uncacheable(Exception):
    """An argument with no stable description: the pipeline runs."""


def folder_digest(folder: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(p for p in Path(folder).rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(folder)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _update_with_tensor(digest, tensor: torch.Tensor) -> None:
    tensor = tensor.detach().cpu().contiguous()
    digest.update(f"{tensor.dtype}{tuple(tensor.shape)}".encode())
    digest.update(tensor.view(torch.uint8).numpy().tobytes() if tensor.numel() else b"")


def pipeline_digest(pipe) -> str:
    """The weights, dtypes and LoRA scales of every module the pipeline holds, its scheduler."""
    digest = hashlib.sha256(type(pipe).__name__.encode())
    for name, component in sorted(pipe.components.items()):
        digest.update(name.encode())
        if isinstance(component, torch.nn.Module):
            # A diffusers hook (a step cache's, an offload's) changes what a call does, and a test may
            # watch it run: such a pipeline's calls always run.
            if any(getattr(getattr(m, "_diffusers_hook", None), "hooks", None) for m in component.modules()):
                raise Uncacheable(f"{type(component).__name__} with diffusers hooks")
            for key, tensor in component.state_dict().items():
                digest.update(key.encode())
                _update_with_tensor(digest, tensor)
            for module_name, module in component.named_modules():
                scaling = getattr(module, "scaling", None)  # peft's LoRA layers: adapter -> scale
                if isinstance(scaling, dict):
                    active = getattr(module, "active_adapters", None)
                    digest.update(f"{module_name}{sorted(scaling.items())}{active}".encode())
        elif component is not None and hasattr(component, "config"):
            digest.update(f"{type(component).__name__}{sorted(dict(component.config).items())}".encode())
    return digest.hexdigest()


def describe(value, digest) -> None:
    """Feeds a stable description of a call argument to `digest`."""
    if value is None or isinstance(value, (bool, int, float, str)):
        digest.update(f"{type(value).__name__}:{value!r};".encode())
    elif isinstance(value, torch.Generator):
        digest.update(b"generator:")
        _update_with_tensor(digest, value.get_state())
    elif isinstance(value, torch.Tensor):
        _update_with_tensor(digest, value)
    elif isinstance(value, np.ndarray):
        digest.update(f"ndarray{value.dtype}{value.shape}".encode() + np.ascontiguousarray(value).tobytes())
    elif hasattr(value, "tobytes") and hasattr(value, "size") and hasattr(value, "mode"):  # a PIL image
        digest.update(f"image{value.size}{value.mode}".encode() + value.tobytes())
    elif isinstance(value, (list, tuple)):
        digest.update(f"{type(value).__name__}[{len(value)}]".encode())
        for item in value:
            describe(item, digest)
    elif isinstance(value, dict):
        for key in sorted(value):
            digest.update(f"{key!r}=".encode())
            describe(value[key], digest)
    else:
        raise Uncacheable(type(value).__name__)


def _key(pipe, checkpoint: Path | None, kwargs: dict) -> str:
    digest = hashlib.sha256(";".join([FORMAT, *(f"{name}={version(name)}" for name in PACKAGES)]).encode())
    digest.update(f"threads={torch.get_num_threads()}".encode())  # float sums' order follows it
    digest.update(folder_digest(checkpoint).encode() if checkpoint else b"-")
    digest.update(pipeline_digest(pipe).encode())
    describe(kwargs, digest)
    return digest.hexdigest()


def _cached_call(self, **kwargs):
    try:
        key = _key(self, self._reference_checkpoint, kwargs)
    except Uncacheable:
        return super(type(self), self).__call__(**kwargs)
    path = default_cache_dir() / "test-references" / f"{key}.pt"
    if path.is_file():
        return SimpleNamespace(**torch.load(path, weights_only=False))
    output = super(type(self), self).__call__(**kwargs)
    kept = {"frames": output.frames}
    if getattr(output, "audio", None) is not None:  # a model with sound (LTX-2)
        kept["audio"] = output.audio
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"{path.name}.{os.getpid()}.partial")  # another process may write it too
    torch.save(kept, partial)
    os.replace(partial, path)
    return SimpleNamespace(**kept)


def cached(pipe, checkpoint: Path | None = None):
    """`pipe` itself, its calls' frames kept on disk (see the module's doc). Its class becomes a
    subclass of the same name whose only change is __call__, so it stays what tests expect."""
    if not getattr(pipe, "_reference_cached", False):
        pipe.__class__ = type(type(pipe).__name__, (type(pipe),), {"__call__": _cached_call, "_reference_cached": True})
    pipe._reference_checkpoint = checkpoint
    return pipe
