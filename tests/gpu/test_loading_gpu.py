"""Loading straight to the GPU: the transformer's weights never sit whole in host memory."""

import json
import subprocess
import sys

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

_PROBE = """
import json, resource, sys, torch
from pipedit.adapter import read_model_index
from pipedit.components import load_component
root = sys.argv[1]
torch.zeros(1, device="cuda:0")  # CUDA context first: it is not part of loading
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
module = load_component(root, read_model_index(root), "transformer", dtype=torch.bfloat16, device="cuda:0")
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
weights = sum(p.numel() * p.element_size() for p in module.parameters())
print(json.dumps({"before": before, "after": after, "weights": weights, "device": str(next(module.parameters()).device)}))
"""


def test_transformer_loads_without_a_host_copy(full_width_checkpoint):
    out = subprocess.run([sys.executable, "-c", _PROBE, str(full_width_checkpoint)], check=True,
                         capture_output=True, text=True).stdout
    figures = json.loads(out.strip().splitlines()[-1])
    growth = figures["after"] - figures["before"]
    print(f"\nhost peak RSS growth while loading {figures['weights'] / 2**30:.2f} GiB of bf16 weights to "
          f"{figures['device']}: {growth / 2**30:.2f} GiB")
    assert figures["device"] == "cuda:0"
    assert growth < 0.5 * figures["weights"]
