"""pipedit's NCCL path on a one-rank NCCL group (one GPU): the async collectives, the deadline
watch by CUDA event, host waits, and batched P2P to itself.

What CPU tests cannot show: that Pending.wait() on NCCL only orders the stream and records an
event that settle() can query, and that the receive buffers of waited ops are freed (allocated
memory returns to where it was) before the step settles, however many ops a forward makes."""

import datetime

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

MIB = 2**20


@pytest.fixture(scope="module")
def nccl_group():
    import torch.distributed as dist

    from pipedit.distributed.spawn import free_tcp_port

    device = torch.device("cuda:0")
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{free_tcp_port('127.0.0.1')}", rank=0,
                            world_size=1, device_id=device, timeout=datetime.timedelta(seconds=60))
    yield dist.group.WORLD
    dist.destroy_process_group()


@pytest.fixture
def rank_state():
    from pipedit.distributed.rank_state import RankState

    state = RankState.for_rank(0, 30.0)
    yield state
    state.deadline.settle()


def test_waited_all_to_alls_free_their_buffers_before_settle(nccl_group, rank_state):
    from pipedit.distributed.collectives import all_to_all_async

    send = torch.arange(16 * MIB, dtype=torch.float32, device="cuda:0")  # 64 MiB
    n = send.numel()
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    for _ in range(6):
        out = all_to_all_async(send, [n], [n], nccl_group, rank_state).wait()
        assert torch.equal(out, send)  # one rank: the identity (also syncs the stream)
        del out
    torch.cuda.synchronize()
    grown = torch.cuda.memory_allocated() - before
    assert rank_state.deadline.watched_count() == 6  # checked at settle()...
    assert grown < 64 * MIB, f"{grown / MIB:.0f} MiB still allocated"  # ...but no buffer held for it
    rank_state.deadline.settle()
    assert rank_state.deadline.watched_count() == 0


def test_all_gather_and_a_host_wait(nccl_group, rank_state):
    from pipedit.distributed.collectives import all_gather_async

    x = torch.randn(1000, device="cuda:0")
    (gathered,) = all_gather_async(x, nccl_group, rank_state).wait(host=True)  # polled with is_completed()
    assert torch.equal(gathered, x)
    assert rank_state.deadline.watched_count() == 0  # a host wait needs no watch


def test_batched_p2p_to_itself(nccl_group, rank_state):
    from pipedit.distributed import p2p

    send, recv = torch.randn(4096, device="cuda:0"), torch.empty(4096, device="cuda:0")
    p2p.post(sends=[(send, 0)], recvs=[(recv, 0)], op="self exchange", state=rank_state).wait(host=True)
    assert torch.equal(recv, send)


def test_rank_device_carries_its_index(monkeypatch):
    from pipedit.distributed.devices import resolve_rank_device

    monkeypatch.setenv("LOCAL_RANK", "0")
    device = resolve_rank_device("cuda")
    assert device.type == "cuda" and device.index is not None
