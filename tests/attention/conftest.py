import pytest


@pytest.fixture(autouse=True)
def collective_consistency_checks(monkeypatch):
    """The gloo ranks these tests spawn run under torch's collective checks: DETAIL wraps every
    process group so that ranks issuing different collectives (or shapes) raise, where gloo might
    pass and NCCL would hang. Children inherit the environment when they are spawned."""
    monkeypatch.setenv("TORCH_DISTRIBUTED_DEBUG", "DETAIL")
