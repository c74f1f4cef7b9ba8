"""``probe.py`` is a script the DDP tests run in subprocesses, not a test module."""

collect_ignore = ["probe.py"]
