"""Front doors: the Hydra app behind ``train.py``, the ``rl-lightning`` CLI, run summaries and plots.

The core package (envs, data, nets, algos, callbacks) never imports this subpackage.
"""
