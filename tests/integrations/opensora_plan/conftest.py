import pytest


@pytest.fixture(scope="session")
def osp_demo(tmp_path_factory):
    """The tiny OpenSoraPlan demo checkpoint (official layout), written once per session by
    `pipedit demo-checkpoint --model opensora-plan DIR`."""
    from pipedit.cli import main

    folder = tmp_path_factory.mktemp("models") / "osp-demo"
    assert main(["demo-checkpoint", "--model", "opensora-plan", str(folder)]) == 0
    return folder


@pytest.fixture(scope="session")
def osp_adapter(osp_demo):
    from pipedit.adapter import load_adapter

    return load_adapter(osp_demo)
