"""The function Ray Tune runs in a trial worker, kept in a module that imports nothing heavy.

Ray imports this module in each new worker to unpickle the trainable; the collector's thresholds are raised
(:mod:`ndebench.platform.common.collector`) before the first trial imports the training code (torch, MLflow,
scikit-learn), so those imports run with few collections.
"""
from __future__ import annotations

from typing import Any

from ndebench.platform.common.collector import for_startup
from ndebench.platform.failures.leftovers import remove_orphaned


def trial_entry(config: dict[str, Any], **kwargs: Any) -> None:
    """Ray Tune's trainable for every stage: :func:`~ndebench.platform.engine.stacktrainable.trial_or_stack`
    with the same ``config`` (the trial's sampled or fixed values) and keyword arguments. First removes the
    temporary folders that killed processes left on this host."""
    for_startup()
    remove_orphaned()
    from ndebench.platform.engine.stacktrainable import trial_or_stack

    trial_or_stack(config, **kwargs)
