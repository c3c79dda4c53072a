"""Each rank reads the model folder on its own node: one that cannot read it fails the start
naming the node and the path; with no model path each rank builds the demo model where it runs."""

import pytest

from pipedit.config import EngineConfig, ModelConfig
from pipedit.errors import UserInputError
from pipedit.runtime.layout import WorldLayout
from pipedit.runtime.rank import RankWorker


def test_a_rank_that_cannot_read_the_model_folder_names_node_and_path(tmp_path):
    missing = tmp_path / "not-copied-here"
    rank = RankWorker(EngineConfig(model=ModelConfig(path=str(missing))), WorldLayout(ulysses=2), rank=1)
    with pytest.raises(UserInputError, match=rf"rank 1 on node [\d.:a-f]+ cannot read the model folder {missing}"):
        rank.find_model(str(missing))


def test_a_rank_finds_the_demo_model_on_its_node(tmp_path, monkeypatch):
    from pipedit.integrations.hunyuan_video import demo_checkpoint

    monkeypatch.setattr(demo_checkpoint, "default_cache_dir", lambda: tmp_path / "cache")
    rank = RankWorker(EngineConfig(), WorldLayout(), rank=0)
    found = rank.find_model("/the/driver's/cache/path")  # another node's path: this node builds its own
    assert found == str(tmp_path / "cache" / demo_checkpoint.DEMO_VERSION) == rank.model_path
    assert (tmp_path / "cache" / demo_checkpoint.DEMO_VERSION / "model_index.json").is_file()


def test_a_rank_that_cannot_see_the_fault_folder_names_node_and_folder(tmp_path, monkeypatch):
    from pipedit import faults

    monkeypatch.setenv(faults.ONCE_DIR_ENV, str(tmp_path))
    RankWorker(EngineConfig(), WorldLayout(ulysses=2), rank=1).check_fault_folder()
    monkeypatch.setenv(faults.ONCE_DIR_ENV, str(tmp_path / "on-another-node"))
    rank = RankWorker(EngineConfig(), WorldLayout(ulysses=2), rank=1)  # a rank reads the switch as it starts
    with pytest.raises(UserInputError, match=r"rank 1 on node .* cannot see the fault injection state folder"):
        rank.check_fault_folder()
