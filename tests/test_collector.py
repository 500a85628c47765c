"""The collector's start-up thresholds: raised before a trial worker imports the training code, never lowered."""
from __future__ import annotations

import gc
import pickle
import subprocess
import sys

import pytest
from ndebench.platform.common.collector import START_THRESHOLDS, for_startup
from ndebench.platform.engine import entry, stacktrainable
from ndebench.platform.engine.entry import trial_entry


@pytest.fixture
def thresholds():
    saved = gc.get_threshold()
    yield
    gc.set_threshold(*saved)


def test_startup_raises_the_thresholds_and_never_lowers_one(thresholds):
    gc.set_threshold(700, 10, 10)
    for_startup()
    assert gc.get_threshold() == START_THRESHOLDS
    gc.set_threshold(50_000, 5, 30)
    for_startup()
    assert gc.get_threshold() == (50_000, START_THRESHOLDS[1], 30)


def test_the_trial_entry_raises_them_before_the_trial_runs(thresholds, monkeypatch):
    seen = []
    monkeypatch.setattr(stacktrainable, "trial_or_stack", lambda config, **kw: seen.append((gc.get_threshold(), kw)))
    gc.set_threshold(700, 10, 10)
    trial_entry({"trial": "t"}, tracking_uri="sqlite:///x.db")
    assert seen == [(START_THRESHOLDS, {"tracking_uri": "sqlite:///x.db"})]


def test_a_worker_unpickles_the_entry_without_the_training_code():
    """What Ray ships to a worker is a reference to the light module; torch, MLflow and scikit-learn come with the
    first trial, after the thresholds."""
    code = ("import pickle, sys\n"
            f"fn = pickle.loads({pickle.dumps(trial_entry)!r})\n"
            "print(fn.__module__, [m for m in ('torch', 'mlflow', 'sklearn', 'ray') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split(None, 1) == [entry.__name__, "[]\n"]
