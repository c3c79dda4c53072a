"""What every rank asked of its process groups, in order, and Works that hold their tensors.

While a rank runs, `Recorder.patched()` wraps torch.distributed's collective and P2P entry points:
each call is logged (op, group members as global ranks, shapes, dtypes, split sizes), passed on
to the fake process group (which checks the arguments and moves no data), and its Work is wrapped
in a RetainingWork that references every tensor of the op until the Work itself is released:
what ProcessGroupNCCL does (the fake and gloo groups do not), so buffers that rank code keeps
Works of stay counted. Every tensor is also tagged "comm" in the rank's StorageCounter.

After all ranks ran, `mismatches()` compares each group's sequences across its members (a
difference is a hang on NCCL) and pairs every send with the peer's receive in order.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict, deque
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

_COLLECTIVES = ("all_to_all_single", "all_gather", "all_reduce", "broadcast", "barrier",
                "all_gather_into_tensor", "reduce_scatter_tensor", "new_group")
# pipedit posts batched P2P only (see distributed/p2p.py). isend/irecv stay unwrapped: P2POp
# checks its op by identity against them (a test in tests/distributed checks no module calls them).
_SINGLE_P2P = ("send", "recv")


def describe(tensor: torch.Tensor) -> str:
    return f"{str(tensor.dtype).removeprefix('torch.')}{list(tensor.shape)}"


class RetainingWork:
    """A Work that keeps its op's tensors referenced until it is released (NCCL's semantics)."""

    def __init__(self, work, tensors) -> None:
        self._work = work
        self.tensors = list(tensors)

    def wait(self, *args, **kwargs) -> bool:
        if self._work is not None:
            self._work.wait()
        return True

    def is_completed(self) -> bool:
        return True

    def __getattr__(self, name):
        return getattr(self._work, name)


@dataclass(frozen=True)
class Call:
    """One collective as its issuer saw it. `key` must agree across the group's members; an
    all-to-all's splits differ per member (uneven shards) and must pair up instead."""

    name: str
    tensors: tuple[str, ...]
    send_splits: tuple[int, ...] | None = None
    recv_splits: tuple[int, ...] | None = None

    @property
    def key(self) -> str:
        if self.name == "all_to_all_single" and self.send_splits is not None:
            return f"all_to_all_single({self.tensors[0].split('[')[0]})"
        return str(self)

    def __str__(self) -> str:
        splits = f", send_splits={list(self.send_splits)}, recv_splits={list(self.recv_splits)}" if self.send_splits else ""
        return f"{self.name}({', '.join(self.tensors)}{splits})"


@dataclass
class RankLog:
    rank: int
    calls: dict[tuple[int, ...], list[Call]] = field(default_factory=lambda: defaultdict(list))
    sends: dict[int, list[str]] = field(default_factory=lambda: defaultdict(list))  # by peer
    recvs: dict[int, list[str]] = field(default_factory=lambda: defaultdict(list))
    single_p2p: list[str] = field(default_factory=list)


def _tensors(value) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for item in value for t in _tensors(item)]
    return []


def _members(group) -> tuple[int, ...]:
    if group is None or group is dist.GroupMember.WORLD:
        return tuple(range(dist.get_world_size()))
    return tuple(dist.get_process_group_ranks(group))


class Recorder:
    def __init__(self) -> None:
        self.logs: dict[int, RankLog] = {}
        self.counter = None  # the running rank's StorageCounter (tags comm buffers)
        self.mail: dict[tuple[int, int], deque] = defaultdict(deque)  # (src, dst) -> small messages' values

    @contextlib.contextmanager
    def patched(self, rank: int, counter) -> Iterator[RankLog]:
        log = self.logs.setdefault(rank, RankLog(rank))
        self.counter = counter
        originals = {name: getattr(dist, name) for name in (*_COLLECTIVES, *_SINGLE_P2P, "batch_isend_irecv")}
        for name in _COLLECTIVES:
            setattr(dist, name, self._collective(name, originals[name], log))
        for name in _SINGLE_P2P:
            setattr(dist, name, self._single(name, originals[name], log))
        dist.batch_isend_irecv = self._batch(originals["batch_isend_irecv"], log)
        try:
            yield log
        finally:
            for name, fn in originals.items():
                setattr(dist, name, fn)
            self.counter = None

    def _collective(self, name, original, log: RankLog):
        def call(*args, **kwargs):
            if name == "new_group":  # collective on the default group: every rank, same order
                ranks = kwargs.get("ranks", args[0] if args else None)
                log.calls[_members(None)].append(Call("new_group", (str(sorted(ranks) if ranks else "all"),)))
                return original(*args, **kwargs)
            tensors = _tensors(list(args) + [v for k, v in kwargs.items() if k != "group"])
            splits = [tuple(a) for a in args[2:4] if isinstance(a, (list, tuple))] if name == "all_to_all_single" else []
            recv_splits, send_splits = splits if len(splits) == 2 else (None, None)
            members = _members(kwargs.get("group"))
            log.calls[members].append(Call(name, tuple(describe(t) for t in tensors), send_splits, recv_splits))
            if name == "broadcast":
                self._carry_broadcast(tensors[0], log.rank, kwargs.get("src"), (members, len(log.calls[members])))
            self._tag(tensors)
            work = original(*args, **kwargs)
            return RetainingWork(work, tensors) if kwargs.get("async_op") else work
        return call

    def _single(self, name, original, log: RankLog):
        def call(tensor, peer=None, *args, **kwargs):
            log.single_p2p.append(f"{name}({describe(tensor)}, peer={peer})")
            self._tag([tensor])
            return original(tensor, peer, *args, **kwargs)
        return call

    def _batch(self, original, log: RankLog):
        def call(ops):
            for op in ops:
                sending = "send" in getattr(op.op, "__name__", "")
                (log.sends if sending else log.recvs)[op.peer].append(describe(op.tensor))
                self._carry(op.tensor, log.rank, op.peer, sending)
            tensors = [op.tensor for op in ops]
            self._tag(tensors)
            return [RetainingWork(work, tensors) for work in original(ops)]
        return call

    def _carry(self, tensor: torch.Tensor, me: int, peer: int, sending: bool) -> None:
        """Small integer messages (headers) carry their values, FIFO per pair of ranks, as the
        real transfer would: the sender runs first (denoise ranks before decode ranks)."""
        if tensor.is_floating_point() or tensor.numel() > 16:
            return
        if sending:
            self.mail[(me, peer)].append(getattr(tensor, "_dry_values", None))
        elif self.mail[(peer, me)]:
            values = self.mail[(peer, me)].popleft()
            if values is not None:
                tensor.tolist = lambda: list(values)  # what rank code reads of a received header

    def _carry_broadcast(self, tensor: torch.Tensor, me: int, src, key) -> None:
        """A small integer broadcast (the split decode's mode) carries its values from the source,
        which runs first (the lead decode rank), to the group's other members."""
        if tensor.is_floating_point() or tensor.numel() > 16:
            return
        if me == src:
            self.mail[key] = deque([getattr(tensor, "_dry_values", None)])
        elif self.mail.get(key) and self.mail[key][0] is not None:
            values = self.mail[key][0]
            tensor.tolist = lambda: list(values)

    def _tag(self, tensors) -> None:
        if self.counter is not None:
            self.counter.tag(tensors, "comm")

    def mismatches(self) -> list[str]:
        """Every difference that would hang (or corrupt) a real run, as sentences."""
        found = []
        groups = {members for log in self.logs.values() for members in log.calls}
        for members in sorted(groups):
            found += _compare_group(members, {r: self.logs[r].calls.get(members, []) for r in members if r in self.logs})
        for log in self.logs.values():
            for peer, sent in log.sends.items():
                received = self.logs[peer].recvs.get(log.rank, []) if peer in self.logs else []
                if sent != received:
                    found.append(f"P2P {log.rank} -> {peer}: rank {log.rank} sends {_brief(sent)} but rank {peer} "
                                 f"receives {_brief(received)}")
            for peer, received in log.recvs.items():
                if peer not in self.logs or log.rank not in self.logs[peer].sends:
                    found.append(f"P2P {peer} -> {log.rank}: rank {log.rank} receives {_brief(received)} that rank "
                                 f"{peer} never sends")
            if log.single_p2p:
                found.append(f"rank {log.rank} posts single P2P ops {log.single_p2p[:3]}: on NCCL they never match "
                             f"batched ones (use pipedit.distributed.p2p.post)")
        return found


def _brief(items: list[str]) -> str:
    return f"{len(items)} tensor(s)" + (f" [{', '.join(items[:3])}{', ...' if len(items) > 3 else ''}]" if items else "")


def _compare_group(members: tuple[int, ...], sequences: dict[int, list[Call]]) -> list[str]:
    reference_rank = min(sequences)
    reference = sequences[reference_rank]
    found = []
    for rank, sequence in sorted(sequences.items()):
        keys, reference_keys = [c.key for c in sequence], [c.key for c in reference]
        if keys == reference_keys:
            continue
        index = next((i for i, (a, b) in enumerate(zip(reference_keys, keys)) if a != b), min(len(keys), len(reference_keys)))
        mine = sequence[index] if index < len(sequence) else "nothing (its sequence ends)"
        theirs = reference[index] if index < len(reference) else "nothing (its sequence ends)"
        found.append(f"group {list(members)}: call {index + 1} differs: rank {reference_rank} issues {theirs}, "
                     f"rank {rank} issues {mine} ({len(reference)} vs {len(sequence)} calls)")
        return found  # one report per group: later calls follow from the first difference
    return found + _unpaired_splits(members, sequences)


def _unpaired_splits(members: tuple[int, ...], sequences: dict[int, list[Call]]) -> list[str]:
    """All-to-all: what member i sends to member j must be what j expects from i."""
    if len(sequences) != len(members):
        return []
    for index, calls in enumerate(zip(*(sequences[r] for r in members))):
        if calls[0].send_splits is None:
            continue
        for i, sender in enumerate(calls):
            for j, receiver in enumerate(calls):
                if sender.send_splits[j] != receiver.recv_splits[i]:
                    return [f"group {list(members)}: all_to_all call {index + 1}: rank {members[i]} sends "
                            f"{sender.send_splits[j]} elements to rank {members[j]}, which expects "
                            f"{receiver.recv_splits[i]}"]
    return []


def group_summary(recorder: Recorder) -> list[dict]:
    """Per process group (global ranks): each member's calls in order, and the p2p pairs."""
    groups = {members for log in recorder.logs.values() for members in log.calls}
    summary = []
    for members in sorted(groups):
        sequences = {r: [str(c) for c in recorder.logs[r].calls.get(members, [])] for r in members if r in recorder.logs}
        summary.append({"members": list(members), "calls": sequences})
    for log in recorder.logs.values():
        for peer, sent in sorted(log.sends.items()):
            summary.append({"members": [log.rank, peer], "p2p_sends": sent,
                            "p2p_receives": recorder.logs[peer].recvs.get(log.rank, []) if peer in recorder.logs else []})
    return summary
