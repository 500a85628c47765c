"""A synthetic study in the real run layout, for measuring what reads a study (``ndebench bench scale``).

``runs`` evaluate runs: cells cross :data:`MODELS` models with :data:`REGULARIZERS` (the registered ones)
per dataset, ``dataset-000``, ``dataset-001``, ... as many as needed, :data:`SEEDS` seeds per cell (the
last cell fewer, to make exactly ``runs``). Under a study run (``ndebench.kind=study``) and one cell run per
cell (closed ``done``), each trial run is what the trainable records for an evaluate trial (written by
:func:`~ndebench.platform.record.bulk.write_trial`): identity and protocol tags, the resolved config as
params, :data:`EPOCHS` epochs of ``train_loss``, ``val_loss``, ``val_accuracy``, ``epoch_time_s`` and
``train_time_s``, the final test metrics and calibration bins of synthetic 3-class predictions, the run
summaries (:mod:`~ndebench.platform.record.summaries`) and ``calibration.json``. Values come from a seeded
generator, so a study is the same every time.
"""
from __future__ import annotations

import json
import multiprocessing
import zlib
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import numpy as np
from ndebench.platform.common.metrics import calibration_bins, classification_metrics
from ndebench.platform.record import store, tracking
from ndebench.platform.record.bulk import write_trial
from ndebench.platform.record.completeness import seal_plan
from ndebench.platform.record.summaries import TIME_METRICS, calibration_tags, time_summaries

MODELS = ("model-a", "model-b", "model-c", "model-d")
REGULARIZERS = ("none", "continuum_dropout", "jump_diffusion", "jump_diffusion_ttn", "naive_dropout_drift",
                "naive_dropout_head", "steer", "tabn")
SEEDS, EPOCHS, CLASSES, TEST_SIZE = 5, 5, 3, 200
Cell = tuple[str, str, str, int]


def cells(runs: int) -> list[Cell]:
    """``(model, dataset, regularizer, seeds)`` of a study of ``runs`` evaluate runs."""
    out: list[Cell] = []
    left = runs
    index = 0
    while left > 0:
        model = MODELS[(index // len(REGULARIZERS)) % len(MODELS)]
        dataset = f"dataset-{index // (len(REGULARIZERS) * len(MODELS)):03d}"
        out.append((model, dataset, REGULARIZERS[index % len(REGULARIZERS)], min(SEEDS, left)))
        left -= SEEDS
        index += 1
    return out


def trial(cell: Cell, seed: int, study: str) -> dict[str, Any]:
    """The keyword arguments of :func:`write_trial` for one seed of ``cell`` (without client and parent)."""
    model, dataset, regularizer, _ = cell
    key = f"{model}__{dataset}__{regularizer}"
    rng = np.random.default_rng([zlib.crc32(key.encode()), seed])
    config = {"study": study, "phase": "evaluate", "cell": key, "model": model, "dataset": dataset,
              "regularizer": regularizer, "seed": seed, "model.hidden_size": 32, "model.num_layers": 2,
              "training.lr": 0.001, "training.epochs": EPOCHS, "training.batch_size": 64, "solver.method": "rk4",
              "solver.adjoint": False, "evaluate.n_mc": 5, "device": "cpu", "data_dir": "data"}
    if regularizer == "continuum_dropout":
        config |= {"regularizer.p": 0.3, "regularizer.m": 10.0, "regularizer.n_mc": 5}
    loss = np.log(CLASSES) * np.exp(-np.linspace(0.1, 1.0, EPOCHS) * rng.uniform(0.5, 1.5))
    epochs = [{"train_loss": float(v), "val_loss": float(v + rng.uniform(0, 0.1)),
               "val_accuracy": float(rng.uniform(0.4, 0.9)), "epoch_time_s": float(rng.uniform(1.0, 2.0)),
               "train_time_s": float(rng.uniform(0.5, 1.0))} for v in loss]
    targets = rng.integers(0, CLASSES, TEST_SIZE)
    logits = rng.normal(size=(TEST_SIZE, CLASSES)) + 2.0 * np.eye(CLASSES)[targets] * rng.uniform(0.2, 1.0)
    probs = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    bins = calibration_bins(probs, targets)
    test = {f"test_{k}": v for k, v in classification_metrics(probs, targets).items()}
    times = time_summaries({k: [e[k] for e in epochs] for k in TIME_METRICS})
    tags = {"study": study, "phase": "evaluate", "model": model, "dataset": dataset, "regularizer": regularizer,
            "seed": str(seed), "cell": key, "metric": "accuracy", "trial_dir": f"evaluate/{key}_{seed}"}
    return {"config": config, "config_hash": f"{key}#{seed}", "tags": tags, "epochs": epochs, "status": "ok",
            "final": {"val_accuracy": epochs[-1]["val_accuracy"], "val_loss": epochs[-1]["val_loss"], **test,
                      **times},
            "final_tags": {"test_protocol": "mc", "n_mc": 5, "point_predictor": "mc_mean", "num_classes": CLASSES,
                           "epochs": EPOCHS, "best_epoch": EPOCHS, **calibration_tags(bins)},
            "artifacts": {"calibration.json": bins}}


def _write_cells(uri: str, study: str, parent: str, part: list[Cell]) -> int:
    mlflow_client = store.client(uri)
    experiment_id = store.ensure_experiment(uri, study)
    for cell in part:
        model, dataset, regularizer, seeds = cell
        key = f"{model}__{dataset}__{regularizer}"
        cell_id = tracking.cell_run(uri, study, parent, "evaluate", key,
                                    {"model": model, "dataset": dataset, "regularizer": regularizer})
        for seed in range(seeds):
            write_trial(mlflow_client, experiment_id, parent_run_id=cell_id, **trial(cell, seed, study))
        tracking.finish_cell(uri, cell_id, "done")
    return sum(c[3] for c in part)


def write_study(uri: str, study: str, runs: int, *, workers: int = 1) -> int:
    """Write the synthetic study of ``runs`` evaluate runs into ``uri`` with ``workers`` processes (each takes
    every ``workers``-th cell); returns the runs written."""
    store.ensure_experiment(uri, study)
    parent = tracking.study_run(uri, study, description=f"synthetic study of {runs} evaluate runs",
                                params={"evaluate.seeds": json.dumps(list(range(SEEDS)))}, yaml_text=None)
    plan = cells(runs)
    if workers <= 1:
        written = _write_cells(uri, study, parent, plan)
    else:
        parts = [plan[i::workers] for i in range(workers)]
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
            written = sum(pool.map(_write_cells, [uri] * workers, [study] * workers, [parent] * workers, parts))
    seal_plan(uri, study, parent)
    return written

