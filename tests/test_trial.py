"""The Ray-free trial loop: reproducibility, early stopping, divergence, test-split isolation, epoch selection."""
import copy
import math

import ndebench.platform.worker.build as build_module
import pytest
import torch
from ndebench.datasets.registry import create_dataset
from ndebench.models.integrate import SolverConfig
from ndebench.platform.spec.config import TrainingConfig
from ndebench.platform.worker.build import auto_batch_size, build_trial
from ndebench.platform.worker.evaluation import evaluate
from ndebench.platform.worker.loop import run_trial
from ndebench.platform.worker.spec import TrialSpec

FAST = TrainingConfig(epochs=6, min_epochs=2, patience=2, lr=0.01, threads=1)


def spec(**kw):
    base = dict(model="neural_cde", dataset="synthetic", regularizer="continuum_dropout",
                regularizer_params={"p": 0.3, "m": 10}, model_params={"hidden_size": 8}, training=FAST,
                solver=SolverConfig("euler"))
    base.update(kw)
    return TrialSpec(**base)


def test_same_seed_same_metrics_and_other_seed_differs():
    a, b = run_trial(spec(seed=1)), run_trial(spec(seed=1))
    assert a.status == b.status == "ok"
    assert a.val == b.val and a.test == b.test
    c = run_trial(spec(seed=2))
    assert c.test != a.test


def test_epoch_callback_and_best_weights_restored():
    records = []
    result = run_trial(spec(regularizer="none", regularizer_params={}), on_epoch=records.append)
    assert len(records) == result.epochs
    assert set(records[0]) == {"train_loss", "val_loss", "val_accuracy", "epoch_time_s", "train_time_s"}
    assert all(0 < r["train_time_s"] < r["epoch_time_s"] for r in records)
    losses = [r["val_loss"] for r in records]
    assert result.best_epoch == 1 + losses.index(min(losses))
    assert result.val["val_loss"] == min(losses)
    assert {"test_accuracy", "test_nll", "test_ece"} <= set(result.test)
    assert sum(result.calibration["count"]) == len(create_dataset("synthetic", seed=0).test)


def test_early_stopping_after_patience():
    records = []
    result = run_trial(spec(training=TrainingConfig(epochs=60, min_epochs=0, patience=1, lr=1.0, threads=1)),
                       on_epoch=records.append)
    assert result.epochs < 60
    assert result.epochs - result.best_epoch == 2


def test_mc_protocol_is_recorded():
    assert run_trial(spec()).protocol["n_mc"] == 5
    assert run_trial(spec(regularizer="none", regularizer_params={})).protocol["n_mc"] == 1


def test_tune_phase_never_touches_test_split():
    result = run_trial(spec(phase="tune"), evaluate_test=False)
    assert result.test == {} and result.calibration is None and "val_loss" in result.val


def test_non_finite_loss_ends_as_diverged(monkeypatch):
    def poisoned(name, **kwargs):
        bundle = create_dataset(name, **kwargs)
        bundle.train.values[:, 3, :] = math.inf
        return bundle

    monkeypatch.setattr(build_module, "create_dataset", poisoned)
    result = run_trial(spec())
    assert result.status == "diverged" and "non-finite" in result.message and result.test == {}


def test_flat_config_round_trip():
    flat = {"model": "neural_cde", "dataset": "synthetic", "regularizer": "continuum_dropout", "seed": 3,
            "phase": "evaluate", "model.hidden_size": 8, "regularizer.p": 0.2, "regularizer.m": 5,
            "training.epochs": 2, "solver.method": "rk4", "solver.step_size": None, "dataset.missing_rate": 0.3}
    s = TrialSpec.from_flat(flat)
    assert s.seed == 3 and s.model_params == {"hidden_size": 8} and s.regularizer_params == {"p": 0.2, "m": 5}
    assert s.training.epochs == 2 and s.solver.method == "rk4" and s.dataset_options == {"missing_rate": 0.3}
    assert s.select == "best_epoch" and TrialSpec.from_flat({**flat, "select": "last_epoch"}).select == "last_epoch"


def test_last_epoch_selection_reports_and_tests_the_final_epoch():
    # lr 1.0 with patience 1 stops two epochs after the best one, so the last epoch is not the best.
    training = TrainingConfig(epochs=60, min_epochs=0, patience=1, lr=1.0, threads=1)
    records, weights = [], []
    result = run_trial(spec(training=training, select="last_epoch"), on_epoch=records.append,
                       on_checkpoint=lambda epoch, snapshot: weights.append(copy.deepcopy(snapshot()["model"])))
    losses = [r["val_loss"] for r in records]
    assert 1 + losses.index(min(losses)) == result.epochs - 2
    assert result.best_epoch == result.epochs and result.val["val_loss"] == losses[-1]
    assert result.val["val_accuracy"] == records[-1]["val_accuracy"]
    assert all(torch.equal(result.weights[k], weights[-1][k]) for k in weights[-1])
    built = build_trial(spec(training=training))
    built.model.load_state_dict(weights[-1])
    metrics, _ = evaluate(built.model, built.feeds["test"], built.batch_size, 0)
    assert result.test == {f"test_{k}": v for k, v in metrics.items()}
    best = run_trial(spec(training=training))
    assert best.val["val_loss"] == min(losses) and best.best_epoch == result.epochs - 2
    assert best.test != result.test


@pytest.mark.parametrize("n,size", [(20, 16), (40, 16), (64, 32), (150, 64), (300, 128), (1000, 128)])
def test_reference_batch_size_rule(n, size):
    assert auto_batch_size(n) == size


def test_missing_rate_reaches_the_dataset():
    result = run_trial(spec(dataset_options={"missing_rate": 0.5}, regularizer="none", regularizer_params={}))
    assert result.status == "ok" and torch.isfinite(torch.tensor(result.test["test_nll"]))
