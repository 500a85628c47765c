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


def test_each_sets_paired_and_unpaired_p_are_scipys_with_holm_over_the_testable_sets():
    tests = pd.DataFrame(_committed()["per_set_tests"])
    assert len(tests) == 18  # the Neural CDE and ODE on 9 sets
    for row in tests.itertuples():
        a, b = _arms(row.model, row.dataset)
        assert row.difference == pytest.approx(a.mean() - b.mean(), abs=1e-12)
        if np.all(a == b) or np.all(a - b == (a - b)[0]):
            assert math.isnan(row.p_paired)  # equal (or constant) differences on every seed: no paired test
            continue
        assert row.p_paired == pytest.approx(sps.ttest_rel(a, b).pvalue, rel=1e-12)
        assert row.p_unpaired == pytest.approx(sps.ttest_ind(a, b).pvalue, rel=1e-12)
    for column in ("p_paired", "p_unpaired"):
        testable = tests[column].dropna()
        holm = multipletests(testable.to_numpy(), method="holm")[1]
        assert tests.loc[testable.index, f"{column}_holm"].to_numpy() == pytest.approx(holm, rel=1e-12)


def test_a_study_se_below_the_sets_seed_noise_gives_no_verdict():
    """A row's study SE counts as missing where it is float noise or below the SE its mean has from the sets' seed
    noise alone; such a row has no test, and a row all of whose sets are near ceiling reads 'inconclusive
    (ceiling)'."""
    found = _committed()
    tests = pd.DataFrame(found["per_set_tests"])
    powers = {(r["model"], r["split"]): r for r in found["per_set_power"]}
    for row in found["agreement_across_datasets"]:
        sets = tests[(tests["model"] == row["model"]) & tests["dataset"].isin(powers[(row["model"], row["split"])][
            "sets"])]
        floor = math.sqrt((sets["se_within"] ** 2).sum()) / len(sets)
        spread = sets["difference"].std(ddof=1) / math.sqrt(len(sets))
        assert row["study_se_missing"] == (spread < floor or not agr.measured(spread, row["study_improvement"]))
        assert math.isnan(row["p_difference"]) == row["study_se_missing"]
        ceiling = set(powers[(row["model"], row["split"])]["ceiling_sets"])
        assert (row["verdict"] == CEILING) == (ceiling == set(sets["dataset"]))


def test_the_holm_families_over_the_rows_and_over_each_table():
    across = pd.DataFrame(_committed()["agreement_across_datasets"])
    tested = across["p_difference"].dropna()
    assert across.loc[tested.index, "p_difference_holm"].to_numpy() == pytest.approx(
        multipletests(tested.to_numpy(), method="holm")[1], rel=1e-12)
    for table in (9, 10, 11):
        family = across[across["table"] == table]["p_difference"].dropna()
        assert across.loc[family.index, "p_difference_holm_table"].to_numpy() == pytest.approx(
            multipletests(family.to_numpy(), method="holm")[1], rel=1e-12)
    report = RESULTS.parent
    assert "Holm family (a choice)" in (report / "paper_comparison.md").read_text()
    assert "Holm family (a choice)" in (report / "paper_comparison.tex").read_text()


@pytest.mark.parametrize("test", ["student", "paired"])
def test_row_4_uses_the_observed_correlation_of_the_paired_design(test):
    found = _committed(test)
    count, tests = found["per_set_count"], pd.DataFrame(found["per_set_tests"])
    assert count["test"] == test and count["r"] == pytest.approx(tests["r"].dropna().median(), abs=1e-12)
    powers = pd.DataFrame(found["per_set_power"])
    for p in powers.itertuples():
        assert p.power_independent == pytest.approx(TTestIndPower().power(p.paper_d, nobs1=5, alpha=0.05), rel=1e-12)
        assert p.power == pytest.approx(power.per_set_power(p.paper_d, count["r"], test, 5), rel=1e-12)
    splits = powers[powers["split"] != "all"]
    free = [(p.power, d in p.significant_sets) for p in splits.itertuples() for d in p.sets if d not in p.ceiling_sets]
    assert count["free_sets"] == len(free)
    assert count["free_chance"] == pytest.approx(agr.at_most(sum(h for _, h in free), [q for q, _ in free]),
                                                 rel=1e-12)
    assert count["verdict"] == ("differs" if count["free_chance"] < agr.ALPHA else "inconclusive")
    # the paired reading states the paper's Student t on the same arms beside it
    assert (count["student"] is None) == (test == "student")
    if test == "paired":
        student = _committed("student")["per_set_count"]
        assert count["student"]["free_chance"] == pytest.approx(student["free_chance"], rel=1e-12)
        assert count["student"]["verdict"] == student["verdict"]


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
