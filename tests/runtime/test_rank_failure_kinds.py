"""Which failed rank calls keep the rank group: a decode that raised outside any transfer and not
with a sticky CUDA error (a poisoned device fails every later kernel: replace the rank), and a
prompt encoding that raised a request error."""

import pytest
import torch

from pipedit.distributed.deadline import CommunicationError, OperationTimeout
from pipedit.runtime.rank_failure import leaves_group_intact


@pytest.mark.parametrize("method, cause, intact", [
    ("decode", torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"), True),
    ("decode", ValueError("bad latents"), True),
    ("decode", RuntimeError("CUDA error: an illegal memory access was encountered"), False),
    ("decode", RuntimeError("CUDA error: device-side assert triggered"), False),
    ("decode", CommunicationError("latent handoff receive from rank 0 failed"), False),
    ("decode", OperationTimeout("latent handoff receive did not complete"), False),
    ("step", ValueError("anything in a step"), False),
    ("encode_prompt", UnicodeEncodeError("utf-8", "\ud800", 0, 1, "surrogates not allowed"), True),
    ("encode_prompt", RuntimeError("NCCL timeout"), False),
])
def test_what_keeps_the_group(method, cause, intact):
    assert leaves_group_intact(method, cause) is intact


def test_torchs_own_cuda_error_type_is_a_fault_where_torch_has_it():
    accelerator_error = getattr(torch, "AcceleratorError", None)
    if accelerator_error is None:
        pytest.skip("this torch has no AcceleratorError")
    assert not leaves_group_intact("decode", accelerator_error("unspecified launch failure"))
