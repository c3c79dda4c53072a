"""Each replica checks at start that it sees the server's data folder (a node without the shared
mount would write videos nobody else can serve)."""

import pytest

from pipedit.errors import UserInputError
from pipedit.serve.ray_app import data_folder


def test_a_replica_without_the_shared_folder_fails_naming_node_and_path(tmp_path, monkeypatch):
    shared, local = tmp_path / "shared", tmp_path / "not-mounted"
    token = data_folder.mark(shared)
    assert data_folder.mark(shared) == token  # kept: a restarted replica still finds its mark
    monkeypatch.setenv(data_folder.ENV, token)
    data_folder.check(shared, "10.0.0.2")
    with pytest.raises(UserInputError, match=rf"node 10\.0\.0\.3 does not see the server's data folder at {local}"):
        data_folder.check(local, "10.0.0.3")
    other = tmp_path / "another-servers"
    data_folder.mark(other)
    with pytest.raises(UserInputError, match="another server's"):
        data_folder.check(other, "10.0.0.3")


def test_nothing_to_check_without_a_mark(tmp_path, monkeypatch):
    monkeypatch.delenv(data_folder.ENV, raising=False)
    data_folder.check(tmp_path / "anything", "10.0.0.2")  # `serve run` starts replicas without one


def test_the_mark_goes_to_the_replicas_only():
    import os

    from pipedit.config import EngineConfig
    from pipedit.serve.ray_app.deployment import deployment_options

    options = deployment_options(EngineConfig(), data_mark="abc")
    assert options["ray_actor_options"]["runtime_env"]["env_vars"] == {data_folder.ENV: "abc"}
    assert data_folder.ENV not in os.environ
