import pytest


@pytest.fixture(scope="session")
def osp_demo(tmp_path_factory):
    """The tiny OpenSoraPlan demo checkpoint (official layout), written once per session."""
    from pipedit.integrations.opensora_plan.demo_checkpoint import write_demo_checkpoint

    return write_demo_checkpoint(tmp_path_factory.mktemp("models") / "osp-demo")
