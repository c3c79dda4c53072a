"""`pipedit serve` says when it serves with fewer replicas than asked for (a node was lost) and
when all run again."""

from pipedit.serve.ray_app import launch


def test_fewer_replicas_are_said_and_so_is_their_return(monkeypatch, capsys):
    counts = iter([2, 1, 1, None, 2])
    monkeypatch.setattr(launch, "PROGRESS_S", 0)
    monkeypatch.setattr(launch, "_running_replicas", lambda: next(counts))  # StopIteration ends the watch
    try:
        launch._watch_replicas(2)
    except (StopIteration, RuntimeError):  # a generator's end, as seen through the lambda
        pass
    out = capsys.readouterr().out.splitlines()
    assert out == ["pipedit: serving with 1 of 2 replica(s); Serve starts the others where there is room (a node "
                   "that joins takes them)", "pipedit: all 2 replica(s) running again"]
