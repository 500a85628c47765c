"""Selection audit: validation-selected results beside the best-of-grid test mean (the optimistic oracle)."""
import json

import numpy as np
import pandas as pd
import pytest
import scipy.stats
from ndebench.platform.report.audit import SKIPPED, selection_audit
from ndebench.platform.report.report import build_report

GRID = {"continuum_dropout[p=0.1,m=5]": 0.80, "continuum_dropout[p=0.3,m=50]": 0.86,
        "continuum_dropout[p=0.5,m=5]": 0.74}
SELECTED = 0.80  # the search chose (p=0.1, m=5) on validation; on test (p=0.3, m=50) is better


def _study(metric: str = "test_accuracy", with_grid: bool = True) -> pd.DataFrame:
    rng = np.random.default_rng(3)
    cells = [("none", "", 0.78), ("continuum_dropout", "", SELECTED)]
    cells += [("continuum_dropout", label, mean) for label, mean in GRID.items()] if with_grid else []
    rows = []
    for regularizer, variant, mean in cells:
        for seed in range(5):
            rows.append({"study": "s", "model": "neural_cde", "dataset": "uea/GunPoint", "regularizer": regularizer,
                         "variant": variant, "seed": seed, "status": "ok", "metric": metric.removeprefix("test_"),
                         metric: mean + rng.normal(0, 0.01)})
    return pd.DataFrame(rows)


def _means(runs: pd.DataFrame, metric: str) -> pd.Series:
    return runs.groupby(runs["variant"].where(runs["variant"] != "", runs["regularizer"]))[metric].mean()


def test_the_audit_sets_the_best_grid_point_on_test_beside_the_validation_choice():
    runs = _study()
    audit = selection_audit(runs, {"uea/GunPoint": "test_accuracy"})
    means = _means(runs, "test_accuracy")
    grid = means[list(GRID)]
    row = audit.iloc[0]
    assert (row["model"], row["dataset"], row["regularizer"]) == ("neural_cde", "uea/GunPoint", "continuum_dropout")
    assert row["validation_selected"] == pytest.approx(means["continuum_dropout"], rel=1e-12)
    assert row["oracle"] == pytest.approx(np.max(grid.to_numpy()), rel=1e-12)
    assert row["oracle_variant"] == grid.idxmax() == "continuum_dropout[p=0.3,m=50]"
    assert row["gap"] == pytest.approx(row["oracle"] - row["validation_selected"], rel=1e-12) and row["gap"] > 0


def test_for_a_lower_is_better_metric_the_oracle_is_the_smallest_mean():
    runs = _study("test_nll")
    audit = selection_audit(runs, {"uea/GunPoint": "test_nll"})
    grid = _means(runs, "test_nll")[list(GRID)]
    assert audit.loc[0, "oracle"] == pytest.approx(grid.min()) and audit.loc[0, "oracle_variant"] == grid.idxmin()
    assert audit.loc[0, "gap"] == pytest.approx(_means(runs, "test_nll")["continuum_dropout"] - grid.min())


def test_the_report_shows_the_audit_and_says_the_oracle_is_optimistic(tmp_path):
    files = build_report(_study(), tmp_path, "s")
    summary = json.loads(files.summary_json.read_text())
    [entry] = summary["selection_audit"]
    assert set(entry) == {"model", "dataset", "regularizer", "validation_selected", "oracle", "oracle_variant", "gap",
                          "oracle_difference", "oracle_plain_p", "selection_adjusted_p"}
    assert entry["oracle_variant"] == "continuum_dropout[p=0.3,m=50]" and entry["gap"] > 0
    # the oracle beats none by 0.08 with seed noise 0.01: both tests see it, the adjusted one less surely
    assert entry["oracle_plain_p"] < entry["selection_adjusted_p"] < 0.05
    text = files.table_md.read_text()
    assert "## Selection audit" in text and "so it is optimistic" in text
    assert "The tables use the validation-selected configuration" in text
    assert "selection-adjusted p" in text and "Westfall-Young" in text


def test_the_plain_p_is_the_paired_t_test_the_permutation_test_beside_it_pairs_like():
    runs = _study()
    [row] = selection_audit(runs, {"uea/GunPoint": "test_accuracy"}).to_dict("records")
    oracle = runs[runs["variant"] == "continuum_dropout[p=0.3,m=50]"].sort_values("seed")
    none = runs[runs["regularizer"] == "none"].sort_values("seed")
    paired = scipy.stats.ttest_rel(oracle["test_accuracy"].to_numpy(), none["test_accuracy"].to_numpy())
    unpaired = scipy.stats.ttest_ind(oracle["test_accuracy"].to_numpy(), none["test_accuracy"].to_numpy())
    assert row["oracle_plain_p"] == pytest.approx(paired.pvalue, rel=1e-12)
    assert row["oracle_plain_p"] != pytest.approx(unpaired.pvalue, rel=1e-3)


def test_without_variant_cells_the_audit_is_skipped_with_a_reason(tmp_path):
    files = build_report(_study(with_grid=False), tmp_path, "s")
    summary = json.loads(files.summary_json.read_text())
    assert summary["selection_audit"] == [] and summary["selection_audit_skipped"] == SKIPPED
    assert "variants: {<regularizer>: grid}" in SKIPPED
