"""Device resolution per rank: always an indexed CUDA device, the GPU Ray assigned, clear errors."""

import pytest
import torch

from pipedit.distributed.devices import DeviceEnvironment, check_distinct_gpus, resolve_rank_device
from pipedit.errors import UserInputError


@pytest.mark.parametrize(
    "requested,env,expected",
    [
        ("auto", DeviceEnvironment(cuda_count=0), "cpu"),
        ("cpu", DeviceEnvironment(cuda_count=8), "cpu"),
        # The defect: plain "cuda" must come back with an index.
        ("cuda", DeviceEnvironment(cuda_count=1), "cuda:0"),
        ("auto", DeviceEnvironment(cuda_count=2), "cuda:0"),
        # A Ray actor with one GPU: Ray narrows CUDA_VISIBLE_DEVICES to it, so it is index 0.
        ("cuda", DeviceEnvironment(cuda_count=1, visible_devices="5", ray_gpu_ids=("5",)), "cuda:0"),
        ("auto", DeviceEnvironment(cuda_count=2, visible_devices="2,3", ray_gpu_ids=("3",)), "cuda:1"),
        # Ray left CUDA_VISIBLE_DEVICES unset: its ids are torch indices.
        ("cuda", DeviceEnvironment(cuda_count=8, ray_gpu_ids=("4",)), "cuda:4"),
        ("cuda", DeviceEnvironment(cuda_count=8, local_rank=3), "cuda:3"),
        ("cuda:1", DeviceEnvironment(cuda_count=2, ray_gpu_ids=("0",)), "cuda:1"),
    ],
)
def test_resolution(requested, env, expected):
    device = resolve_rank_device(requested, env)
    assert device == torch.device(expected)
    assert device.type == "cpu" or device.index is not None


@pytest.mark.parametrize(
    "requested,env,message",
    [
        ("cuda", DeviceEnvironment(cuda_count=0, visible_devices=""), "sees no GPU"),
        ("cuda:2", DeviceEnvironment(cuda_count=1, visible_devices="6", ray_gpu_ids=("6",)), "cuda:2 does not exist"),
        ("cuda", DeviceEnvironment(cuda_count=8, local_rank=9), "cuda:9 does not exist"),
    ],
)
def test_impossible_devices_are_refused_with_the_fix(requested, env, message):
    with pytest.raises(UserInputError, match=message):
        resolve_rank_device(requested, env)


def test_ray_gpu_outside_the_visible_list_is_an_error():
    env = DeviceEnvironment(cuda_count=1, visible_devices="0", ray_gpu_ids=("7",))
    with pytest.raises(RuntimeError, match="do not override CUDA_VISIBLE_DEVICES"):
        resolve_rank_device("cuda", env)


def test_two_ranks_on_one_gpu_are_refused_before_nccl():
    check_distinct_gpus([("node-a", "H100 GPU-1"), ("node-a", "H100 GPU-2"), ("node-b", "H100 GPU-1")])
    check_distinct_gpus([("node-a", None), ("node-a", None)])  # CPU ranks share cores, not GPUs
    with pytest.raises(UserInputError, match="ranks 0 and 2 were placed on the same GPU"):
        check_distinct_gpus([("node-a", "H100 GPU-1"), ("node-a", "H100 GPU-2"), ("node-a", "H100 GPU-1")])


def test_this_machine_resolves_from_the_live_environment():
    device = resolve_rank_device("auto")
    assert device == (torch.device("cuda", device.index) if torch.cuda.is_available() else torch.device("cpu"))
