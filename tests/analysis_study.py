"""A crafted study frame for the analysis tests: two models, three datasets, ``none``, Continuum Dropout
variants over a 2 x 2 (p, m) grid and jump diffusion over two rates, two seeds each."""
from __future__ import annotations

import numpy as np
import pandas as pd

MODELS = ("neural_cde", "neural_ode")
DATASETS = ("ArrowHead", "BasicMotions", "GunPoint")
CHANNELS = {"ArrowHead": 1, "BasicMotions": 6, "GunPoint": 1}
GRID = [(0.1, 5.0), (0.1, 50.0), (0.5, 5.0), (0.5, 50.0)]
RATES = (0.01, 0.1)
SEEDS = (0, 1)


def _variant(p: float, m: float) -> str:
    return f"continuum_dropout[p={p:g},m={m:g}]"


def study_frame(seed: int = 0) -> pd.DataFrame:
    """One row per evaluate run with the columns of :func:`ndebench.platform.record.runframe.runs_frame`. The
    (p=0.5, m=5) variant is 0.1 worse than ``none`` (a red cell); the others are 0.02-0.05 better."""
    rng = np.random.default_rng(seed)
    rows = []
    for i, model in enumerate(MODELS):
        for j, dataset in enumerate(DATASETS):
            base = 0.6 + 0.05 * i + 0.03 * j
            cells = [("none", "", np.nan, np.nan, np.nan, 0.0, 10.0)]
            cells += [("continuum_dropout", _variant(p, m), p, m, np.nan,
                       -0.1 if (p, m) == (0.5, 5.0) else 0.02 + 0.03 * (m == 50.0), 11.0 + p)
                      for p, m in GRID]
            cells += [("jump_diffusion", f"jump_diffusion[rate={r:g}]", np.nan, np.nan, r, 0.01 * k, 10.5)
                      for k, r in enumerate(RATES)]
            for regularizer, variant, p, m, rate, shift, seconds in cells:
                for s in SEEDS:
                    acc = base + shift + rng.normal(0, 0.01)
                    rows.append({
                        "run_id": f"{model}-{dataset}-{variant or regularizer}-{s}", "parent_run_id": "",
                        "study": "crafted", "model": model, "dataset": dataset, "regularizer": regularizer,
                        "variant": variant, "label": variant or regularizer, "seed": s, "status": "ok",
                        "n_mc": 0, "p": p, "m": m, "rate": rate, "test_accuracy": acc,
                        "test_nll": 1.0 - acc + rng.normal(0, 0.01),
                        "train_time_s": seconds * (1 + 0.2 * i) + rng.normal(0, 0.1),
                        "epoch_time_s": seconds * (1 + 0.2 * i) + 2.0,
                        "channels": CHANNELS[dataset],
                    })
    return pd.DataFrame(rows)
