"""Which network interface a rank's communication libraries bind, on a loopback node.

A pipedit instance of its own (one machine, pipedit.runtime.ray_instance) binds Ray to loopback
and rendezvous through a file store, so that nothing listens beyond loopback. NCCL and gloo
choose their own interfaces, though: NCCL's bootstrap and proxy sockets take the first usable
interface that is not loopback (eth0 on most hosts), and gloo binds the address the host name
resolves to, which may be a public one. On a loopback node every rank is on this machine, so the
ranks are told to use the loopback interface (set before the process group starts: both read
these variables when they create their sockets). On a real cluster nothing changes: the node's
address is not loopback, and the user's own settings (or the libraries' choice) stand.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from pathlib import Path

# NCCL: every socket (bootstrap, proxy, the socket transport); `=` asks for this exact name
# (a bare name is a prefix). NCCL_OOB_NET_IFNAME: the bootstrap when it runs over the network
# plugin (NCCL_OOB_NET_ENABLE). gloo: its listening socket and its pairs.
NCCL_VARIABLES = ("NCCL_SOCKET_IFNAME", "NCCL_OOB_NET_IFNAME")
GLOO_VARIABLES = ("GLOO_SOCKET_IFNAME",)
_IFF_LOOPBACK = 0x8  # Linux's interface flag (include/uapi/linux/if.h)


def loopback_interface(sys_net: Path = Path("/sys/class/net")) -> str:
    """The name of this host's loopback interface, read from the kernel's interface flags ("lo"
    where they cannot be read: Linux's name for it)."""
    try:
        for device in sorted(sys_net.iterdir()):
            try:
                if int((device / "flags").read_text().strip(), 16) & _IFF_LOOPBACK:
                    return device.name
            except (OSError, ValueError):
                continue
    except OSError:
        pass
    return "lo"


def socket_interface_env(node_addresses: Iterable[str], interface: str | None = None) -> dict[str, str]:
    """The variables that keep NCCL's and gloo's sockets on loopback when every node the ranks may
    run on (`node_addresses`, as Ray reports them) is a loopback address: an instance of our own,
    one machine; {} otherwise (a real cluster's ranks talk across nodes over the nodes' own
    interfaces, as the user or the libraries choose them)."""
    nodes = list(node_addresses)
    if not nodes or not all(ipaddress.ip_address(node).is_loopback for node in nodes):
        return {}
    name = interface or loopback_interface()
    return {**{variable: f"={name}" for variable in NCCL_VARIABLES},
            **{variable: name for variable in GLOO_VARIABLES}}
