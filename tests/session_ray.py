"""The test session's own Ray instance (conftest's ray_session; the cluster folder gives it back
after its own cluster)."""


def connect_session_ray() -> None:
    """Found as every command finds its own (RAY_ADDRESS, else a new one; never one a killed run
    left). 12 logical CPUs on any machine: room for a test's ranks and replica (4) beside the rank
    processes kept idle between engines (pipedit.runtime.kept_ranks: up to 5), with some to spare."""
    from pipedit.runtime.ray_instance import connect_ray

    connect_ray(num_cpus=12)
