from pipedit.attention.autotune import chunk_candidates, pick_faster


def test_candidates_are_powers_of_two_below_local_heads():
    assert chunk_candidates(8, 24) == [None, 1, 2]  # 3 heads per rank
    assert chunk_candidates(5, 24) == [None, 1, 2, 4]  # uneven: up to 5 heads on a rank
    assert chunk_candidates(4, 4) == [None]  # one head per rank: nothing to chunk


def test_sync_stays_unless_a_chunk_clearly_wins():
    assert pick_faster({None: [1.0, 1.0, 1.0], 1: [0.99, 0.98, 0.99]}) is None  # within the margin
    assert pick_faster({None: [1.0, 1.0, 1.0], 1: [1.2, 1.1, 1.3]}) is None
    assert pick_faster({None: [1.0, 1.0, 1.0], 1: [0.8, 0.9, 0.85], 2: [0.7, 0.75, 0.72]}) == 2


def test_a_median_win_must_also_win_most_rounds():
    # The chunk's median is 10% better, but it is faster in only 3 of 5 paired rounds.
    assert pick_faster({None: [1.0, 1.0, 1.0, 0.5, 0.5], 1: [0.9, 0.9, 0.9, 0.6, 0.6]}) is None
    assert pick_faster({None: [1.0, 1.0, 1.0, 0.5, 0.5], 1: [0.9, 0.9, 0.9, 0.45, 0.6]}) == 1
