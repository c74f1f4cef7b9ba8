from benchmarks.replay_buffer import variants


def test_each_call_writes_one_row_or_draws_one_batch_from_a_filled_buffer():
    """Test that the timed calls are what the table names: one row more in the buffer written to, a batch of the
    asked size from the buffer sampled, for ours and torchrl's alike."""
    calls, ours, theirs = variants(8)
    assert len(ours) == len(theirs) == 2000
    calls["ours: extend one row"]()
    calls["torchrl: extend one row"]()
    assert len(ours) == len(theirs) == 2001
    for name in ("ours: sample 8", "torchrl: sample 8"):
        batch = calls[name]()
        assert batch.batch_size == (8,) and batch["obs"].shape == (8, 4)
