"""What a node has and whether it works: the environment report (`pipedit env`) and the
parallel-configuration check (`pipedit check-node`)."""
