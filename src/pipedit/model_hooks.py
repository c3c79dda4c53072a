"""The optional half of the model-adapter seam: hooks the engine calls on every adapter, each
declared here with the behaviour a model that needs nothing special gets. Every adapter inherits
AdapterHooks and overrides what its model does differently; the engine calls the hooks directly.

The required half (loading, prompts, latents, scheduler, noise prediction, decoding) is the
ModelAdapter protocol in pipedit.adapter."""

from __future__ import annotations

from typing import Any

import torch

from .guidance import combine_guidance


class AdapterHooks:
    """Defaults for the optional adapter hooks (see each method)."""

    # -- guidance ---------------------------------------------------------------------------
    # An adapter whose guidance runs as separate branch passes (cfg_branches and predict_branches
    # below are its own) says so in its capabilities (cfg_parallel), which CFG parallel needs.

    def guidance_scale_at(self, request, timestep: torch.Tensor) -> float:
        """The guidance scale of the step at `timestep`; default: the request's guidance_scale at
        every step (Wan2.2 A14B: guidance_scale_2 for its low-noise expert)."""
        return request.guidance_scale

    def cfg_branches(self, cond: dict[str, torch.Tensor]) -> list[dict[str, torch.Tensor]] | None:
        """The conditions of guidance's branches, [negative, positive] (combine_guidance's order);
        default None: the model has no CFG branches (it predicts in one pass, e.g. embedded
        guidance), and CFG parallel runs predict_noise whole."""
        return None

    def predict_branches(self, latents: torch.Tensor, timestep: torch.Tensor,
                         branches: list[dict[str, torch.Tensor]]) -> list[torch.Tensor]:
        """One noise prediction per branch of cfg_branches; only models with CFG branches have it."""
        raise NotImplementedError(f"{type(self).__name__} has no CFG branches to predict")

    def combine_guidance(self, preds: list[torch.Tensor], guidance_scale: float) -> torch.Tensor:
        """The branch predictions [uncond, cond] -> the guided prediction; default
        uncond + g * (cond - uncond) (pipedit.guidance.combine_guidance)."""
        return combine_guidance(preds, guidance_scale)

    # -- denoising --------------------------------------------------------------------------
    def finish_latents(self, latents: torch.Tensor, cond: dict[str, torch.Tensor]) -> torch.Tensor:
        """The final say on the latents after the last step; default: unchanged (Wan2.2 TI2V puts
        the given image's latents back in the first frame)."""
        return latents

    @property
    def experts(self) -> list:
        """Every DiT the adapter holds, each with parallel attention installed; default: the one
        transformer (Wan2.2 A14B: both experts)."""
        return [self.transformer]

    @property
    def compute_dtype(self) -> torch.dtype:
        """The dtype the DiT computes and attends in (sizes Aco's messages and PipeSP's probes);
        default: the transformer's. An adapter whose idle weights may sit in another dtype (Wan2.2
        A14B offload: the idle expert's files) answers from what it loaded."""
        return self.transformer.dtype

    # The chooser of the expert of each timestep for models that switch transformers during
    # denoising (Wan2.2 A14B: its Experts, whose index_for(timestep) picks one); None: one DiT.
    expert_set: Any = None

    def first_swap_bytes(self) -> int:
        """Bytes this rank's first swap of offloaded weights reads from their files, where nothing
        has read them yet (the driver widens the first request's deadlines by their read time,
        pipedit.runtime.deadlines); default 0: nothing is offloaded."""
        return 0

    # -- step cache (pipedit.cache) -----------------------------------------------------------
    def cache_blocks(self) -> Any:
        """The transformer's blocks as the step cache sees them (pipedit.cache.blocks.CacheBlocks);
        default None: the model has no step cache (a request asking for one is refused)."""
        return None

    # -- --compile (pipedit.runtime.compile) ----------------------------------------------------
    def check_compile(self) -> None:
        """Raises UserInputError when this loaded model cannot run compiled with its options on
        this torch (Wan2.2 A14B's idle expert offload where torch refuses to swap a compiled
        module's parameters); default: it can."""

    # -- LoRA adapters (pipedit.lora.inject.apply_loras) ---------------------------------------
    def check_loras(self) -> None:
        """Raises UserInputError when this loaded model cannot take LoRA adapters although its
        family's loader reads them (Wan2.2 A14B with the idle expert offloaded); default: it can."""

    # -- decoding -----------------------------------------------------------------------------
    def decode_mode(self, latent_shape) -> int:
        """How a decode of this latent shape runs on this rank now (0: untiled, 1: tiled), the
        value every rank of a split decode agrees on; default 0 (the model always decodes untiled)."""
        return 0

    def free_decode_bytes(self) -> int | None:
        """The device memory a decode on this rank could use now; default None: the model's decode
        does not depend on memory (pipedit.runtime.decode_budget)."""
        return None

    def reserve_for_encode(self, peak_bytes: int) -> None:
        """This decode rank also encodes prompts (and images), the next request's while it decodes
        (DeDiVAE): keep `peak_bytes`, the encode's measured peak, out of the memory decodes are
        decided on (free_decode_bytes); default: nothing to decide."""

    def fix_decode_budget(self, free_bytes: int) -> None:
        """From now on decide decodes (decode_mode) on `free_bytes`, the tightest decode rank's
        free memory, instead of this rank's own; default: nothing to decide."""

    def split_units(self, latent_shape, parts: int) -> int:
        """How many units a decode of this shape splits into over `parts` decode ranks; default 1:
        the model cannot split a decode (one rank decodes each video whole)."""
        return 1

    def decode_sound(self, latents: torch.Tensor, shape) -> Any:
        """The request's sound track (pipedit.sound.Soundtrack) from `latents`, exactly what
        `decode` receives (one request's final latents), and the request's VideoShape (the sound's
        length follows its frames and fps); default None: the model makes no sound.
        A model that makes sound declares `has_sound` in its capabilities, and the engine then
        runs this beside `decode`, on another decode rank where one is free."""
        return None

    def saved_latents(self, latents: torch.Tensor, shape) -> Any:
        """What `generate --save-latents` writes (torch.save) for one request's final latents and
        VideoShape; asked of the config-only adapter (pipedit.adapter.model_inputs: no weights), so
        it may read configs only. Default: the latents tensor itself (a model with sound: a dict
        of its streams)."""
        return latents

    def split_plan(self, latents: torch.Tensor, mode: int, parts: int) -> Any:
        """The plan of a split decode (pipedit.runtime.split_decode); only asked of a model whose
        split_units gave 2 or more."""
        raise NotImplementedError(f"{type(self).__name__} cannot split a decode over several ranks")
