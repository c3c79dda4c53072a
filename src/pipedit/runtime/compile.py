"""Regional torch.compile of a denoising transformer (`--compile`, config model.compile).

Only the repeated blocks are compiled (the classes a model lists in `_repeated_blocks`, as
diffusers' compile_repeated_blocks reads them): one graph per block class serves every block of
that class, so compile time is that of a few blocks, and a new request shape recompiles those few
graphs, not the whole model.

What is compiled, and the hazards that decide it:
- Dynamo must never trace a collective, an async work handle or the operation deadline's
  bookkeeping (pipedit.distributed). All of them live behind the attention processors, which
  hand Q/K/V to a pipedit AttentionStrategy. So every attention module inside a block (a module
  with a `processor`) runs eagerly, under torch.compiler.disable: a graph break at each attention
  call. What is compiled is everything else in the block: the timestep modulation, norms,
  gates, residuals and MLPs, where inductor's fusion pays. The attention itself is one SDPA /
  flash call either way, and PipeSP's overlap of all-to-alls with projections stays as written.
  (Breaking only at the strategy call would also fuse RoPE and the Q/K norms, but the Ulysses
  processor starts an all-to-all after each projection: six or more graphs per attention instead
  of one break, different graphs on one rank and on N.) Invariant: the compiled graphs hold no
  communication and are the same code on one rank and on N (specialised to other sizes and
  strides), so the single-rank comparison with eager tests what every parallel layout runs.
- Each block's `forward` is replaced in place by its compiled version (the module object, its
  place in the tree, its parameters and hooks stay). Wrappers installed on `block.forward`
  afterwards (step caching) run eagerly around it, so their Python decisions and all-reduces are
  never traced. A block whose forward is already wrapped is refused: compile first, wrap after.
- dynamic=None (dynamo's default): the first shape compiles static, specialised graphs; a
  request of another shape recompiles once with the changed sizes symbolic, and later shapes
  reuse that (measured on the demo: 3 more shapes, one recompile). Marking sizes dynamic up
  front would cost the first shape its static kernels, which servers that see one shape keep.
  Inputs of other strides get their own graph too (HunyuanVideo's single-stream blocks after the
  first receive a slice). Dynamo's recompile limit per block class bounds the variants; past it
  that class runs eagerly (dynamo warns), never wrongly.
- The prompt's length: HunyuanVideo and HunyuanVideo 1.5 send only the valid text tokens, so
  each prompt length is another size of the blocks' text inputs (and of what follows from them:
  the joint sequence, its mask, the resumed frames after each attention break). The warm-up runs
  two prompts of different lengths (WARM_UP_PROMPTS): the second recompiles once and dynamo's
  automatic dynamic makes every text-sized dimension symbolic, so no later prompt length
  compiles (measured on the demo: lengths 6, 34, 48, 2 -> one recompile, at 34). Marking the
  block's text argument dynamic up front does not reach the resumed frames and the strides of
  the sliced single-stream inputs (the same recompile, measured). Padding the text to buckets
  would put padded keys into the attention: a key mask the Ulysses, Ring and Aco paths do not
  carry, and a softmax that differs from the unpadded reference's; the two-prompt warm-up keeps
  the outputs the reference's. What still changes the graphs (the video shape, one or two
  guidance branches per forward, an image condition) is graph_key: a request's first forward of
  a key the group has not run gets the first-compile deadlines.
- Inductor needs a C++ compiler on CPU and Triton on CUDA. Without one apply_compile raises a
  UserInputError naming the fix: the user asked for --compile, and a silent eager fallback would
  report eager speed as compiled.
"""

from __future__ import annotations

from collections import Counter

import torch

from ..errors import UserInputError
from ..guidance import guidance_applies

# Two prompts whose token counts differ for every family's tokenizer (see the notes above).
WARM_UP_PROMPTS = ("a red fox running through snow",
                   "a lighthouse on a rocky coast at dusk, waves breaking below, gulls circling the lamp")


def graph_key(request) -> tuple:
    """What decides a request's compiled graphs besides the model: its video shape, whether it
    is guided (one or two CFG branches in a forward) and whether it carries an image condition.
    Not the prompt's length: after the warm-up its dimension is dynamic (see the notes above)."""
    return request.shape, guidance_applies(request.guidance_scale), request.image is not None


def compiler_problem(device: torch.device) -> str | None:
    """Why inductor cannot build kernels for `device` here, or None when it can."""
    if device.type == "cuda":
        from torch.utils._triton import has_triton

        return None if has_triton() else "inductor needs Triton on CUDA: pip install triton (the version torch names)"
    try:
        from torch._inductor.cpp_builder import get_cpp_compiler

        get_cpp_compiler()
    except Exception as error:  # noqa: BLE001 - whatever fails here, inductor cannot build kernels
        return (f"inductor needs a C++ compiler on CPU ({type(error).__name__}: {error}): install g++ "
                f"(apt-get install g++) or point CXX at one")
    return None


def repeated_blocks(transformer) -> list[torch.nn.Module]:
    """The modules of the classes `_repeated_blocks` names that occur more than once (all of them
    when none does). A listed class present once (HunyuanVideo's patch embedding and token
    refiner) would gain little from its own graph and add compile time."""
    names = set(getattr(transformer, "_repeated_blocks", None) or ())
    found = [module for module in transformer.modules() if type(module).__name__ in names]
    counts = Counter(type(module).__name__ for module in found)
    blocks = [module for module in found if counts[type(module).__name__] > 1] or found
    if not blocks:
        raise UserInputError(f"--compile: {type(transformer).__name__} has no repeated blocks to compile "
                             f"(_repeated_blocks: {sorted(names) or 'none'}); run without --compile")
    return blocks


def attention_modules(block: torch.nn.Module) -> list[torch.nn.Module]:
    """The attention modules inside `block`: those that call a replaceable processor, the seam
    where pipedit routes attention to its strategies (and their collectives)."""
    return [module for module in block.modules() if hasattr(module, "processor")]


def _check_unwrapped(module: torch.nn.Module) -> None:
    if "forward" in vars(module):
        raise RuntimeError(f"{type(module).__name__}.forward is already replaced: apply compile before anything "
                           f"wraps block forwards (step caching), so that the wrappers stay outside the graphs")


def compile_blocks(transformer, backend: str = "inductor") -> int:
    """Compiles every repeated block's forward in place, its attention modules kept eager;
    returns the number of blocks compiled."""
    blocks = repeated_blocks(transformer)
    eager = [attn for block in blocks for attn in attention_modules(block)]
    for module in (*blocks, *eager):
        _check_unwrapped(module)
    for attn in eager:
        attn.forward = torch.compiler.disable(attn.forward)
    for block in blocks:
        block.forward = torch.compile(block.forward, backend=backend, dynamic=None)
    return len(blocks)


def apply_compile(transformer, device: torch.device) -> int:
    """Regional compile of `transformer`, once its attention processors are final (sequence
    parallel or local). Returns the number of compiled blocks."""
    problem = compiler_problem(torch.device(device))
    if problem is not None:
        raise UserInputError(f"--compile (model.compile) cannot run here: {problem}; or run without --compile")
    return compile_blocks(transformer)
