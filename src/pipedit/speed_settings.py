"""The checks of model.attention and model.quantize, alone and with the rest of the config."""

from __future__ import annotations

from .errors import UserInputError

QUANTIZE_MODES = ("none", "fp8")  # model.quantize


def check_model_speed(model) -> None:
    """model.attention is auto or a kernel of the table; model.quantize fp8 takes fused adapters only."""
    from .attention.kernels import attention_kernels

    kernels = ("auto", *(entry.name for entry in attention_kernels()))
    if model.attention not in kernels:
        raise UserInputError(f"model.attention must be one of {', '.join(kernels)}, got {model.attention!r}")
    if model.quantize not in QUANTIZE_MODES:
        raise UserInputError(f"model.quantize must be one of {', '.join(QUANTIZE_MODES)}, got {model.quantize!r}")
    if model.quantize == "fp8" and (model.offered_loras or (model.run_loras and not model.fuse_loras)):
        raise UserInputError("model.quantize fp8 takes LoRA adapters fused only (model.fuse_loras with "
                             "model.run_loras): an unfused adapter would have to be re-quantized into the float8 "
                             "weights at every switch; fuse them (--fuse-loras) or drop --quantize fp8")
    if model.quantize == "fp8" and model.idle_expert == "offload":
        raise UserInputError("model.quantize fp8 cannot run with model.idle_expert offload: the offloaded expert's "
                             "weights are views of its checkpoint files, swapped in as they are written, while fp8 "
                             "replaces the block linears by float8 buffers; keep the idle expert resident "
                             "(--idle-expert resident) or drop --quantize fp8")


def check_engine_speed(config) -> None:
    """SageAttention returns no log-sum-exp, which Ring attention merges its blocks by."""
    if config.model.attention == "sage" and config.parallel.ring > 1:
        raise UserInputError(f"model.attention sage cannot run Ring attention (--ring {config.parallel.ring}): "
                             f"Ring merges blocks by their log-sum-exp, which SageAttention does not return; "
                             f"use --ring 1 (Ulysses or Aco) or an exact kernel (--attention auto)")
