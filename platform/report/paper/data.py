"""The Continuum Dropout paper's reported numbers, shipped as data (``platform/report/paper/*.csv``).

Transcribed from the paper's LaTeX source: every per-dataset cell "mean (std)" of Tables 2-7 and of the appendix
Tables 12-18 (:func:`paper_cells`), the across-dataset rows of Tables 9-11 (:func:`paper_summary`) and the 30
UEA/UCR sets of Table 8 (:func:`paper_datasets`). Each value keeps its table, metric and n (5 seeds, Appendix
D: "repeated for five iterations"). Names are ndebench's registry names (``Neural CDE`` -> ``neural_cde``,
``Baseline`` / ``X`` -> ``none``, ``O`` -> ``continuum_dropout``); a fixed parameter of a row is ``setting``
(``p=0.3,m=50``, ``n_mc=10``, ``rate=0.001``, ``oi=true``), so that ``regularizer[setting]`` is the label of
the matching variant cell; ``unit`` is ``fraction``, ``percent`` (Tables 14 and 17) or ``seconds``.
"""
from __future__ import annotations

from functools import cache
from pathlib import Path

import pandas as pd

FOLDER = Path(__file__).parent
PAPER_K = 20
"""Grid points the paper's Continuum Dropout rows select from: p in {0.1, ..., 0.5} x m in {5, 10, 50, 100}."""
PAPER_SEEDS = 5
SUMMARY_TABLES = {"all": 9, "univariate": 10, "multivariate": 11}


@cache
def _read(name: str) -> pd.DataFrame:
    return pd.read_csv(FOLDER / f"continuum_dropout_{name}.csv", keep_default_na=False, dtype={"setting": str})


def paper_cells() -> pd.DataFrame:
    """Per-dataset cells: ``table, label, metric, unit, model, dataset, regularizer, setting, mean, std, n,
    marker`` (``*``/``**``: the paper's t-test against the baseline)."""
    return _read("cells").copy()


def paper_summary() -> pd.DataFrame:
    """Tables 9-11, one row per model and ``split`` (``all`` 30, ``univariate`` 15, ``multivariate`` 15 sets):
    ``baseline_mean, baseline_std, proposed_mean, proposed_std`` (means over sets; std = mean of the per-set
    stds), ``improvement, improvement_se, pct_change, pct_se`` (mean +- standard error over sets)."""
    return _read("summary").copy()


def paper_datasets() -> pd.DataFrame:
    """Table 8: the 30 sets (``uea/<name>``) with samples, classes, ``channels``, length and ``split``."""
    return _read("datasets").copy()
