import pytest


@pytest.fixture(scope="session")
def osp_adapter(osp_demo):
    from pipedit.adapter import load_adapter

    return load_adapter(osp_demo)
