"""NCCL's and gloo's socket interfaces for the ranks: loopback on an instance of our own (every
node loopback), untouched on a real cluster. The listening sockets themselves are checked with two
real gloo ranks in tests/runtime/test_ray_instance.py."""

from pipedit.distributed.interfaces import loopback_interface, socket_interface_env


def _interface(folder, name, flags):
    (folder / name).mkdir()
    (folder / name / "flags").write_text(f"{flags}\n")


def test_the_loopback_interface_is_found_by_its_flag(tmp_path):
    _interface(tmp_path, "eth0", "0x1003")  # UP, BROADCAST, MULTICAST
    _interface(tmp_path, "lo0", "0x9")  # UP, LOOPBACK
    assert loopback_interface(tmp_path) == "lo0"
    assert loopback_interface(tmp_path / "absent") == "lo"


def test_loopback_nodes_keep_every_socket_on_loopback():
    env = socket_interface_env(["127.0.0.1"], interface="lo")
    assert env == {"NCCL_SOCKET_IFNAME": "=lo", "NCCL_OOB_NET_IFNAME": "=lo", "GLOO_SOCKET_IFNAME": "lo"}
    assert socket_interface_env(["::1", "127.0.0.1"], interface="lo") == env


def test_a_real_cluster_keeps_its_nodes_interfaces():
    assert socket_interface_env(["10.0.0.5", "10.0.0.6"], interface="lo") == {}
    assert socket_interface_env(["127.0.0.1", "10.0.0.6"], interface="lo") == {}  # a node is not this machine
    assert socket_interface_env([], interface="lo") == {}


def test_the_rank_actors_get_them_from_the_live_nodes(monkeypatch):
    import ray

    from pipedit.runtime.executor import rank_env

    nodes = [{"NodeManagerAddress": "127.0.0.1", "Alive": True}, {"NodeManagerAddress": "10.0.0.9", "Alive": False}]
    monkeypatch.setattr(ray, "nodes", lambda: nodes)
    env = rank_env({"PIPEDIT_FAULTS": "x"}, 2)
    assert env["GLOO_SOCKET_IFNAME"] == loopback_interface() and env["NCCL_SOCKET_IFNAME"].startswith("=")
    assert env["PIPEDIT_FAULTS"] == "x" and env["TOKENIZERS_PARALLELISM"] == "false"
    nodes[1]["Alive"] = True  # a second, real node joined: the cluster's interfaces stand
    assert "GLOO_SOCKET_IFNAME" not in rank_env({}, 2)
