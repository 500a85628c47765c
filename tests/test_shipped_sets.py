"""Every classification set sktime ships loads offline and trains for one epoch through the trial loop."""
import math

import pytest
from ndebench.datasets.uea import shipped_sets
from ndebench.models.integrate import SolverConfig
from ndebench.platform.spec.config import TrainingConfig
from ndebench.platform.worker.loop import run_trial
from ndebench.platform.worker.spec import TrialSpec


@pytest.mark.parametrize("name", shipped_sets())
def test_shipped_set_trains_one_epoch(name):
    records = []
    spec = TrialSpec(
        model="neural_cde", dataset=f"uea/{name}", regularizer="none", model_params={"hidden_size": 4},
        training=TrainingConfig(epochs=1, batch_size=128, threads=1),
        solver=SolverConfig("euler", step_size=0.05),
    )
    result = run_trial(spec, on_epoch=records.append)
    assert result.status == "ok" and len(records) == 1
    assert math.isfinite(records[0]["train_loss"]) and 0.0 <= result.test["test_accuracy"] <= 1.0
