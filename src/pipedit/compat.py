"""pipedit's patches of private APIs of Ray and uvicorn, in one place, with the versions they were
written against. Each one exists because the library offers no public switch:

- Ray's node IP (`loopback_node`): an instance of our own binds all its servers to loopback
  (pipedit.runtime.ray_instance);
- Ray Serve's replica gRPC port (`replica_grpc_on_loopback`): bound to the node's loopback
  address rather than every interface (pipedit.serve.ray_app);
- uvicorn's HTTP protocol table (`use_http_protocol`, `httptools_protocol`): Ray Serve's proxies
  run a protocol with a header time limit (pipedit.serve.http.header_timeout).

Any release of Ray or uvicorn may change these names. At import this module compares the installed
versions with PATCHED_AGAINST (the pins of requirements-cpu.txt; a test keeps the two equal) and
warns when they differ: the patches may still hold. Where a private name a patch needs is gone, the
patch raises IncompatibleDependency instead of doing nothing: each of them guards an exposure
(a server on every interface, a connection held open without headers) that would otherwise
open silently.
"""

from __future__ import annotations

import warnings
from contextlib import contextmanager
from importlib import metadata

PATCHED_AGAINST = {"ray": "2.60.0", "uvicorn": "0.54.0"}
# The callbacks of uvicorn's httptools protocol that the header time limit overrides.
HTTP_CALLBACKS = ("connection_made", "on_message_begin", "on_headers_complete", "connection_lost")
_FIX = ("install the pinned versions (pip install -r requirements-cpu.txt), or re-check pipedit/compat.py against "
        "the installed ones (tests/runtime/test_ray_instance.py, tests/serve/test_serve_startup.py and "
        "tests/serve/test_hostile_input.py check what each patch must do) and update the pins")


class UntestedDependency(UserWarning):
    """Ray or uvicorn is not the version pipedit's patches were written against."""


class IncompatibleDependency(RuntimeError):
    """A private name one of pipedit's patches needs is gone from the installed Ray or uvicorn."""


def installed_version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def version_mismatches() -> dict[str, str]:
    """{package: installed version} for each patched package installed at another version than
    PATCHED_AGAINST's (a package not installed is patched nowhere)."""
    found = {package: installed_version(package) for package in PATCHED_AGAINST}
    return {package: version for package, version in found.items()
            if version is not None and version != PATCHED_AGAINST[package]}


def check_versions() -> None:
    """Warns (UntestedDependency) when Ray or uvicorn differs from PATCHED_AGAINST, saying what to do."""
    mismatches = version_mismatches()
    if mismatches:
        pinned = ", ".join(f"{package}=={version}" for package, version in PATCHED_AGAINST.items())
        found = ", ".join(f"{package} {version}" for package, version in mismatches.items())
        warnings.warn(f"pipedit patches private APIs of Ray and uvicorn written against {pinned}; found {found}: "
                      f"{_FIX}", UntestedDependency, stacklevel=2)


def _gone(name: str, package: str) -> IncompatibleDependency:
    return IncompatibleDependency(f"{name} is gone from {package} {installed_version(package)}, and pipedit's patch "
                                  f"of it was written against {package}=={PATCHED_AGAINST[package]}: {_FIX}")


@contextmanager
def loopback_node():
    """While Ray starts an instance, its node IP is loopback, and every server of the instance
    binds that IP. Ray 2.60 takes the node IP from services.get_node_ip_address, which answers
    loopback while ray_constants.ENABLE_RAY_CLUSTER (env RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER, read
    at import) is false; `_node_ip_address="127.0.0.1"` does not do it (ray.init swaps a loopback
    address for the machine's). tests/runtime/test_ray_instance.py lists the sockets an instance
    listens on."""
    from ray._private import ray_constants

    if not hasattr(ray_constants, "ENABLE_RAY_CLUSTER"):  # setting it would change nothing
        raise _gone("ray._private.ray_constants.ENABLE_RAY_CLUSTER", "ray")
    saved = ray_constants.ENABLE_RAY_CLUSTER
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = saved


def replica_grpc_on_loopback() -> None:
    """Ray Serve 2.60 opens each replica's inter-deployment gRPC server on every interface
    ("[::]:0" in ray/serve/_private/replica.py), whatever the node's address. On an instance of
    our own, whose node address is loopback (pipedit.runtime.ray_instance), it is bound there like
    the rest of Ray. Call it in the replica's process before the replica opens that server (in
    the deployment's constructor: Serve opens it right after); once per process is enough.
    tests/serve/test_serve_startup.py lists every address the server listens on."""
    import ipaddress

    import ray
    from ray.serve._private import replica

    node = ray.util.get_node_ip_address()
    if not ipaddress.ip_address(node).is_loopback:
        return
    real = getattr(replica, "add_port_to_grpc_server", None)
    if real is None:
        raise _gone("ray.serve._private.replica.add_port_to_grpc_server", "ray")
    if getattr(real, "on_loopback", False):
        return

    def on_node_address(server, address: str):
        host, _, port = address.rpartition(":")
        return real(server, f"{node}:{port}" if host in ("[::]", "0.0.0.0") else address)

    on_node_address.on_loopback = True
    replica.add_port_to_grpc_server = on_node_address


def httptools_protocol() -> type:
    """uvicorn's httptools protocol, once checked to have the callbacks a subclass overrides
    (HTTP_CALLBACKS). ImportError without httptools."""
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    missing = [name for name in HTTP_CALLBACKS if not callable(getattr(HttpToolsProtocol, name, None))]
    if missing:
        raise _gone(f"HttpToolsProtocol.{', '.join(missing)}", "uvicorn")
    return HttpToolsProtocol


def check_http_protocol_table() -> None:
    """Raises IncompatibleDependency unless uvicorn resolves its "auto" HTTP protocol through
    uvicorn.config.HTTP_PROTOCOLS and takes a class there in place of an import path."""
    import uvicorn.config
    from uvicorn.importer import import_from_string

    if "auto" not in getattr(uvicorn.config, "HTTP_PROTOCOLS", {}):
        raise _gone('uvicorn.config.HTTP_PROTOCOLS["auto"]', "uvicorn")
    probe = object()
    if import_from_string(probe) is not probe:  # a class in the table is taken as it is
        raise _gone("uvicorn.importer.import_from_string taking objects as they are", "uvicorn")


def use_http_protocol(protocol: type) -> None:
    """Every uvicorn server this process loads from now on with http="auto" (Ray Serve's proxy's
    choice) runs `protocol`: uvicorn looks the name up in HTTP_PROTOCOLS as its config loads."""
    import uvicorn.config

    check_http_protocol_table()
    uvicorn.config.HTTP_PROTOCOLS["auto"] = protocol


check_versions()
