"""Per-operation deadlines on gloo ranks: an operation whose peer never takes part raises
OperationTimeout naming the operation, the peers and the deadline, within about the deadline
(not the process group's timeout); operations whose peers take part are unchanged."""

import time

import torch
import torch.distributed as dist

from pipedit.distributed import deadline
from pipedit.distributed.rank_state import RankState
from pipedit.distributed.collectives import all_gather_async, all_to_all_async
from pipedit.distributed.p2p import post
from pipedit.distributed.spawn import run_on_gloo_ranks

DEADLINE_S = 0.5


def _timed(fn):
    start = time.monotonic()
    try:
        fn()
    except deadline.OperationTimeout as error:
        return str(error), time.monotonic() - start
    return None, time.monotonic() - start


def _rank(rank, world_size):
    state = RankState.for_rank(rank, 30.0)  # ranks of a loaded machine may reach an op seconds apart
    group = dist.new_group([0, 1])
    # Both ranks take part: results as without a deadline.
    gathered = [t.item() for t in all_gather_async(torch.tensor([rank + 1.0]), group, state).wait()]
    swapped = all_to_all_async(torch.tensor([rank * 10.0, rank * 10.0 + 1]), [1, 1], [1, 1], group, state)
    swapped = swapped.then(lambda t: t.tolist()).wait(host=True)
    peer_value = torch.empty(1)
    post(sends=[(torch.tensor([rank + 5.0]), 1 - rank)], recvs=[(peer_value, 1 - rank)], state=state).wait()
    assert peer_value.item() == (1 - rank) + 5.0  # P2P completes under a deadline too
    dist.barrier()
    state.deadline.seconds = DEADLINE_S
    if rank == 0:  # then rank 0 stays away (alive, as a hung peer) while rank 1 waits
        time.sleep(4 * DEADLINE_S + 4)
        return gathered, swapped
    a2a = _timed(lambda: all_to_all_async(torch.zeros(2), [1, 1], [1, 1], group, state).wait())
    received = _timed(lambda: post(recvs=[(torch.empty(3), 0)], op="latent handoff receive",
                                   state=state).wait(host=True))
    return gathered, swapped, a2a, received


def test_an_absent_peer_fails_the_operation_at_its_deadline():
    (gathered0, swapped0), (gathered1, swapped1, a2a, received) = run_on_gloo_ranks(_rank, 2, timeout_s=60)
    assert gathered0 == gathered1 == [1.0, 2.0]
    assert swapped0 == [0.0, 10.0] and swapped1 == [1.0, 11.0]
    for (message, seconds), op in ((a2a, "all_to_all"), (received, "latent handoff receive")):
        assert message is not None, f"{op} did not time out"
        assert message.startswith(f"{op} with peer rank(s) [0")
        assert f"{DEADLINE_S:.1f} s operation deadline" in message
        # Generous: the deadline plus scheduling noise on a loaded machine, far below any group timeout.
        assert DEADLINE_S - 0.05 <= seconds < DEADLINE_S + 1.5, seconds  # gloo may wake a hair early


def test_settle_reports_a_watched_operation_past_its_deadline():
    class Stuck:  # a CUDA event that never completes
        def query(self):
            return False

    watched = deadline.OpDeadline(0.2)
    watched.watch(Stuck(), "Aco reply send", [3], time.monotonic())
    start = time.monotonic()
    try:
        watched.settle()
    except deadline.OperationTimeout as error:
        assert "Aco reply send with peer rank(s) [3]" in str(error)
    else:
        raise AssertionError("settle did not raise")
    assert time.monotonic() - start < 1.0
    watched.settle()  # reported once: nothing left to watch
