"""The paper comparison on the committed reproduction's results.csv: paired per-set tests, no verdict from float
noise, the ceiling verdict and the Holm families, checked against scipy and statsmodels directly."""
import math
import warnings
from functools import cache
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from ndebench.platform.report.paper import comparison
from ndebench.platform.report.paper.agreement import CEILING
from ndebench.platform.report.statistics import agreement as agr
from ndebench.platform.report.statistics import power
from scipy import stats as sps
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.power import TTestIndPower, TTestPower

RESULTS = Path(__file__).resolve().parents[1] / "docs/reproduction/report/reproduction_large/results.csv"


@cache
def _committed(test: str = "student") -> dict:
    runs = pd.read_csv(RESULTS, keep_default_na=False, na_values=[""]).assign(variant=lambda f: f["variant"].fillna(""))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        _, found = comparison.paper_comparison(runs, dict.fromkeys(sorted(set(runs["dataset"])), "test_accuracy"),
                                               test=test)
    return found["paper_comparison"]


def _arms(model: str, dataset: str) -> tuple[np.ndarray, np.ndarray]:
    runs = pd.read_csv(RESULTS)
    cell = runs[(runs["model"] == model) & (runs["dataset"] == dataset)]
    arm = {r: cell[cell["regularizer"] == r].sort_values("seed")["test_accuracy"].to_numpy()
           for r in ("continuum_dropout", "none")}
    return arm["continuum_dropout"], arm["none"]


def test_the_neural_cde_arrowhead_loss_is_significant_paired_and_not_unpaired():
    tests = pd.DataFrame(_committed()["per_set_tests"])
    a, b = _arms("neural_cde", "uea/ArrowHead")
    row = tests[(tests["model"] == "neural_cde") & (tests["dataset"] == "uea/ArrowHead")].iloc[0]
    assert row["difference"] == pytest.approx(-0.1375, abs=1e-12) and (a < b).all()
    assert row["p_paired"] == pytest.approx(sps.ttest_rel(a, b).pvalue, rel=1e-12)
    assert round(row["p_paired"], 4) == 0.0010 and round(row["p_unpaired"], 4) == 0.0641
    testable = tests["p_paired"].dropna()
    assert len(testable) == 15  # BasicMotions twice and the LNSDE on GunPoint have equal arms on every seed
    holm = multipletests(testable.to_numpy(), method="holm")[1]
    assert row["p_paired_holm"] == pytest.approx(holm[testable.index.get_loc(row.name)], rel=1e-12)
    assert round(row["p_paired_holm"], 3) == 0.015


def test_the_multivariate_neural_cde_row_gives_no_verdict_from_float_noise():
    across = {(r["model"], r["split"]): r for r in _committed()["agreement_across_datasets"]}
    row = across[("neural_cde", "multivariate")]
    assert row["study_se_missing"] and math.isnan(row["p_difference"])
    assert row["verdict"] == row["verdict_table"] == CEILING
    # the LNSDE multivariate spread (0.001) is below what its sets' seed noise alone gives
    assert across[("neural_lnsde", "multivariate")]["study_se_missing"]
    assert not any(r["study_se_missing"] for k, r in across.items() if k[1] != "multivariate")


def test_the_holm_families_over_the_rows_and_over_table_9():
    across = pd.DataFrame(_committed()["agreement_across_datasets"])
    row = across[(across["model"] == "neural_cde") & (across["split"] == "all")].iloc[0]
    tested = across["p_difference"].dropna()
    assert row["p_difference_holm"] == pytest.approx(
        multipletests(tested.to_numpy(), method="holm")[1][tested.index.get_loc(row.name)], rel=1e-12)
    table9 = across[across["table"] == 9]["p_difference"].dropna()
    assert row["p_difference_holm_table"] == pytest.approx(
        multipletests(table9.to_numpy(), method="holm")[1][table9.index.get_loc(row.name)], rel=1e-12)
    assert round(row["p_difference_holm_table"], 3) == 0.019
    report = RESULTS.parent
    assert "Holm family (a choice)" in (report / "paper_comparison.md").read_text()
    assert "Holm family (a choice)" in (report / "paper_comparison.tex").read_text()


def test_row_4_uses_the_observed_correlation_of_the_paired_design():
    count = _committed()["per_set_count"]
    assert count["r"] == pytest.approx(0.70, abs=0.005) and count["test"] == "student"
    # with independent arms the 12 free sets reproduce the Student-t powers of statsmodels
    powers = pd.DataFrame(_committed()["per_set_power"])
    for p in powers.itertuples():
        assert p.power_independent == pytest.approx(TTestIndPower().power(p.paper_d, nobs1=5, alpha=0.05), rel=1e-12)
    assert count["free_chance"] > agr.ALPHA > count["free_chance_independent"]
    assert count["verdict"] == "inconclusive"
    assert count["free_sets"] == 12  # LNSDE ItalyPowerDemand: room 0.0533 for the paper's 0.053 is none


def test_the_paired_test_power_is_statsmodels_ttestpower_at_d_over_sqrt_2_1_minus_r():
    d, r = 0.74, 0.7
    assert power.per_set_power(d, r, "paired", 5) == pytest.approx(
        TTestPower().power(d / math.sqrt(2 * (1 - r)), nobs=5, alpha=0.05), rel=1e-12)
    # Student's t on correlated arms loses power against its nominal, independent-arms value
    assert power.per_set_power(d, r, "student", 5) < power.per_set_power(d, 0.0, "student", 5)
    # arms moving together (r = 0.99): the power is 1, not statsmodels' NaN of the far lower tail
    assert power.per_set_power(1.35, 0.99, "paired", 5) == pytest.approx(1.0, abs=1e-9)
    with pytest.raises(ValueError, match="valid: student, welch, paired"):
        power.per_set_power(d, r, "wilcoxon", 5)


def test_welch_treats_a_float_noise_se_as_missing():
    assert math.isnan(agr.welch(1.1e-16, 5.6e-17, 1, 0.047, 0.010, 14)["p"])
    assert math.isfinite(agr.welch(-0.030, 0.024, 5, 0.072, 0.012, 29)["p"])
