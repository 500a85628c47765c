import math

import numpy as np
import pandas as pd
import pytest
from ndebench.platform.report.statistics import significance, stats
from scipy import stats as sps
from statsmodels.stats.multitest import multipletests

pytestmark = pytest.mark.filterwarnings("error")

A = [0.91, 0.93, 0.90, 0.94, 0.92]
B = [0.88, 0.90, 0.86, 0.91, 0.87, 0.89]


def test_student_is_the_default_and_equals_scipy():
    res = stats.two_sample_test(A, B)
    ref = sps.ttest_ind(A, B)
    assert (res.t, res.p, res.df) == (ref.statistic, ref.pvalue, len(A) + len(B) - 2)
    assert (res.n_a, res.n_b, res.flag) == (5, 6, "")


def test_welch_equals_scipy_with_satterthwaite_df():
    res = stats.two_sample_test(A, B, "welch")
    ref = sps.ttest_ind(A, B, equal_var=False)
    va, vb = np.var(A, ddof=1) / 5, np.var(B, ddof=1) / 6
    assert (res.t, res.p) == (ref.statistic, ref.pvalue)
    assert res.df == pytest.approx((va + vb) ** 2 / (va**2 / 4 + vb**2 / 5))
    assert res.p != stats.two_sample_test(A, B).p


def test_paired_uses_the_common_seeds_in_seed_order():
    seeds_a = [4, 0, 2, 1, 3]
    seeds_b = [0, 1, 2, 3, 4, 5]
    res = stats.two_sample_test(A, B, "paired", seeds_a, seeds_b)
    by_seed = dict(zip(seeds_a, A, strict=True))
    ref = sps.ttest_rel([by_seed[s] for s in range(5)], B[:5])
    assert (res.t, res.p, res.df, res.n_a, res.n_b) == (ref.statistic, ref.pvalue, 4, 5, 5)
    with pytest.raises(ValueError, match=r"repeats seeds \[0\]"):
        stats.two_sample_test(A, B, "paired", [0, 0, 1, 2, 3], seeds_b)
    with pytest.raises(ValueError, match="needs seeds_a and seeds_b"):
        stats.two_sample_test(A, B, "paired")


def test_unknown_test_lists_the_valid_ones():
    with pytest.raises(ValueError, match="unknown test 'mann'.*student, welch, paired"):
        stats.two_sample_test(A, B, "mann")


@pytest.mark.parametrize("test", stats.TESTS)
def test_degenerate_samples_are_flagged_not_raised(test):
    seeds = list(range(5))
    same = stats.two_sample_test([0.9] * 5, [0.9] * 5, test, seeds, seeds)
    assert (same.t, same.p, same.flag) == (0.0, 1.0, "identical")
    few = stats.two_sample_test([0.9], [0.8, 0.7], test, [0], [0, 1])
    assert math.isnan(few.p) and math.isnan(few.t) and few.flag == "too few runs"
    apart = stats.two_sample_test([0.8] * 5, [0.9] * 5, test, seeds, seeds)
    assert (apart.t, apart.p, apart.flag) == (-math.inf, 0.0, "zero variance")


def test_paired_identical_means_every_difference_is_zero():
    res = stats.two_sample_test(A, A, "paired", range(5), range(5))
    assert (res.p, res.flag) == (1.0, "identical")
    assert stats.two_sample_test(A, A, "student").p == pytest.approx(1.0)


@pytest.mark.parametrize("p, alpha, marker", [
    (0.049, 0.05, "*"), (0.05, 0.05, ""), (0.0101, 0.05, "*"), (0.0099, 0.05, "**"), (0.01, 0.05, "*"),
    (math.nan, 0.05, ""), (0.09, 0.1, "*"), (0.019, 0.1, "**"), (0.04, 0.01, ""),
])
def test_markers_follow_the_thresholds(p, alpha, marker):
    assert stats.significance_marker(p, alpha) == marker


def test_marker_thresholds_are_checked():
    assert stats.significance_marker(0.02, 0.05, strong_alpha=0.025) == "**"
    with pytest.raises(ValueError, match="strong_alpha"):
        stats.significance_marker(0.02, 0.05, strong_alpha=0.1)


def test_metric_direction():
    assert stats.higher_is_better("test_accuracy") and stats.higher_is_better("val_auroc")
    assert not stats.higher_is_better("test_nll") and not stats.higher_is_better("ece")
    with pytest.raises(ValueError, match="unknown metric 'test_f1'; valid metrics: accuracy"):
        stats.higher_is_better("test_f1")


def _runs(cells: dict[tuple[str, str, str], list], status: dict | None = None, metric="test_accuracy") -> pd.DataFrame:
    rows = []
    for (model, dataset, regularizer), values in cells.items():
        for seed, value in enumerate(values):
            rows.append({"model": model, "dataset": dataset, "regularizer": regularizer, "seed": seed,
                         "status": (status or {}).get((model, dataset, regularizer, seed), "ok"), metric: value})
    return pd.DataFrame(rows)


def test_summarize_cells_counts_failed_runs_and_uses_ok_ones():
    runs = _runs({("m", "d", "none"): A, ("m", "d", "cd"): [0.5, 0.6, 0.7, math.nan, 0.9, 1.0]},
                 status={("m", "d", "cd", 0): "diverged", ("m", "d", "cd", 5): "error"})
    out = stats.summarize_cells(runs, "test_accuracy").set_index("regularizer")
    assert out.loc["none", "n"] == 5 and out.loc["none", "mean"] == pytest.approx(np.mean(A))
    assert out.loc["none", "std"] == pytest.approx(np.std(A, ddof=1))
    cd = out.loc["cd"]
    assert (cd["n"], cd["n_diverged"], cd["n_error"], cd["n_missing"], cd["n_runs"]) == (3, 1, 1, 1, 6)
    assert cd["mean"] == pytest.approx(np.mean([0.6, 0.7, 0.9]))
    with pytest.raises(ValueError, match="unknown run status"):
        stats.summarize_cells(runs.assign(status="crashed"), "test_accuracy")
    with pytest.raises(ValueError, match="metric column 'test_auroc' is not in the runs"):
        stats.summarize_cells(runs, "test_auroc")


def test_summarize_cells_groups_by_the_key_columns_it_is_given():
    runs = _runs({("m", "d", "cd"): [0.1, 0.2, 0.3, 0.4]}).assign(label="cd[p=0.3]", n_mc=[1, 1, 8, 8])
    out = stats.summarize_cells(runs, "test_accuracy", ["model", "label", "n_mc"])
    assert list(out.columns[:4]) == ["metric", "model", "label", "n_mc"] and "regularizer" not in out
    assert out.set_index("n_mc")["mean"].to_dict() == {1: pytest.approx(0.15), 8: pytest.approx(0.35)}
    assert out["n"].tolist() == [2, 2] and out["label"].tolist() == ["cd[p=0.3]"] * 2


def test_summarize_cell_where_every_run_failed():
    runs = _runs({("m", "d", "none"): A, ("m", "d", "cd"): [0.1, 0.2]},
                 status={("m", "d", "cd", 0): "diverged", ("m", "d", "cd", 1): "diverged"})
    cd = stats.summarize_cells(runs, "test_accuracy").set_index("regularizer").loc["cd"]
    assert cd["n"] == 0 and math.isnan(cd["mean"]) and cd["n_diverged"] == 2
    row = stats.compare_to_baseline(runs, "test_accuracy").iloc[0]
    assert (row["n"], row["flag"], row["direction"]) == (0, "too few runs", "")


def test_compare_to_baseline_direction_and_p_values():
    low = [0.30, 0.33, 0.29, 0.31, 0.32]
    high = [0.40, 0.42, 0.39, 0.41, 0.43]
    runs = _runs({("m", "d", "none"): high, ("m", "d", "cd"): low, ("m", "d", "jump"): [0.5, 0.52, 0.49, 0.51, 0.53],
                  ("m", "other", "cd"): low}, metric="test_nll")
    out = stats.compare_to_baseline(runs, "test_nll").set_index("regularizer")
    assert list(out.index) == ["cd", "jump"]  # "other" has no baseline, so no test
    assert out.loc["cd", "direction"] == "better" and out.loc["jump", "direction"] == "worse"
    ref = sps.ttest_ind(low, high)
    assert out.loc["cd", "p"] == ref.pvalue and out.loc["cd", "t"] == ref.statistic
    assert out.loc["cd", "marker"] == "**" and out.loc["cd", "difference"] == pytest.approx(-0.1)
    assert list(out["p_holm"]) == pytest.approx(list(multipletests(out["p"], method="holm")[1]))
    welch = stats.compare_to_baseline(runs, "test_nll", test="welch").set_index("regularizer")
    assert welch.loc["cd", "p"] == sps.ttest_ind(low, high, equal_var=False).pvalue
    paired = stats.compare_to_baseline(runs, "test_nll", test="paired").set_index("regularizer")
    assert paired.loc["cd", "p"] == sps.ttest_rel(low, high).pvalue and paired.loc["cd", "df"] == 4
    with pytest.raises(ValueError, match=r"repeated .*\('m', 'd', 'none', 0\)"):
        stats.compare_to_baseline(pd.concat([runs, runs.iloc[:1]]), "test_nll", test="paired")


def test_holm_matches_statsmodels_and_skips_nan():
    p = np.array([0.01, 0.04, math.nan, 0.03, 0.2])
    adjusted = significance.adjust(p, "holm")
    finite = ~np.isnan(p)
    assert adjusted[finite] == pytest.approx(multipletests(p[finite], method="holm")[1])
    assert math.isnan(adjusted[2])
    assert adjusted[finite] != pytest.approx(multipletests(p[finite])[1])  # statsmodels' default is Holm-Sidak


def _across_runs(n_datasets: int, gains: list[float]) -> tuple[pd.DataFrame, dict[str, str]]:
    cells = {}
    for i in range(n_datasets):
        base = 0.6 + 0.05 * i
        cells[("m", f"d{i}", "none")] = [base, base + 0.01, base - 0.01]
        cells[("m", f"d{i}", "cd")] = [base + gains[i], base + gains[i] + 0.01, base + gains[i] - 0.01]
        cells[("m", f"d{i}", "drop")] = [base - gains[i] / 2] * 3
    return _runs(cells), {f"d{i}": "test_accuracy" for i in range(n_datasets)}


def test_across_datasets_wilcoxon_holm_and_improvement():
    gains = [0.02, 0.03, 0.01, 0.04, -0.01, 0.05, 0.02]
    runs, metrics = _across_runs(7, gains)
    out = stats.compare_across_datasets(runs, metrics).set_index("regularizer")
    base = np.array([0.6 + 0.05 * i for i in range(7)])
    d = np.array(gains)
    cd = out.loc["cd"]
    assert cd["n_datasets"] == 7 and cd["wins"] == 6
    assert cd["mean_improvement"] == pytest.approx(d.mean())
    assert cd["se"] == pytest.approx(np.std(d, ddof=1) / math.sqrt(7))
    assert cd["pct_change"] == pytest.approx(np.mean(100 * d / base))
    assert cd["p"] == pytest.approx(sps.wilcoxon(base + d, base).pvalue)
    assert out.loc["drop", "mean_improvement"] == pytest.approx(-d.mean() / 2)
    assert list(out["p_holm"]) == pytest.approx(list(multipletests(out["p"], method="holm")[1]))
    assert (out["correction"] == "holm").all() and cd["note"] == ""


def test_across_datasets_lower_is_better_metric_flips_the_sign():
    runs = _runs({("m", "a", "none"): [0.5, 0.6], ("m", "a", "cd"): [0.3, 0.4]}, metric="test_nll")
    row = stats.compare_across_datasets(runs, {"a": "test_nll"}).iloc[0]
    assert row["mean_improvement"] == pytest.approx(0.2) and row["wins"] == 1


def test_across_datasets_says_when_wilcoxon_cannot_reach_alpha():
    runs, metrics = _across_runs(5, [0.02, 0.03, 0.01, 0.04, 0.05])
    row = stats.compare_across_datasets(runs, metrics).set_index("regularizer").loc["cd"]
    assert row["p"] == pytest.approx(stats.min_wilcoxon_p(5)) and row["p"] == pytest.approx(0.0625)
    assert "cannot reach p < 0.05 with 5 dataset" in row["note"] and "at least 6 datasets" in row["note"]
    assert not row["significant"]
    runs6, metrics6 = _across_runs(6, [0.02, 0.03, 0.01, 0.04, 0.05, 0.06])
    row6 = stats.compare_across_datasets(runs6, metrics6).set_index("regularizer").loc["cd"]
    assert row6["p"] == pytest.approx(sps.wilcoxon([0.02, 0.03, 0.01, 0.04, 0.05, 0.06]).pvalue)
    assert row6["p"] == pytest.approx(0.03125) and row6["note"] == ""


def test_across_datasets_identical_is_flagged():
    runs = _runs({("m", "a", "none"): A, ("m", "a", "cd"): A, ("m", "b", "none"): B, ("m", "b", "cd"): B})
    row = stats.compare_across_datasets(runs, {"a": "test_accuracy", "b": "test_accuracy"}).iloc[0]
    assert row["p"] == 1.0 and "identical" in row["note"]


def test_average_ranks_and_pairwise_wilcoxon():
    runs, metrics = _across_runs(6, [0.02, 0.03, 0.01, 0.04, 0.05, 0.06])
    ranks = stats.average_ranks(runs, metrics, "m")
    assert list(ranks.index) == ["cd", "none", "drop"] and list(ranks) == [1.0, 2.0, 3.0]
    pairs = stats.pairwise_wilcoxon(runs, metrics, "m").set_index(["a", "b"])
    assert len(pairs) == 3 and (pairs["n_datasets"] == 6).all()
    assert pairs["p"].to_numpy() == pytest.approx([0.03125] * 3)
    assert pairs["p_holm"].to_numpy() == pytest.approx(multipletests([0.03125] * 3, method="holm")[1])


@pytest.mark.parametrize("d", [
    [0.0, 1, 1, 2, -1, 3, 0, -2, 2, 5, 1, 1, -1],  # zeros and ties, n = 13: scipy permutes
    [0.1, -0.3, 0.3, 0.2, 0.2, -0.1, 0.4, 0.5, 0.6, -0.2, 0.7],  # ties, n = 11
    [1.0, 2, 3, -4, 5, 6, 7, 8],  # neither: scipy's exact distribution
    [0.5, -0.5, 1, 1, 2, -2, 3, 3, 4, -4, 5, 5, 6, 6],  # ties, n = 14: the normal approximation
])
def test_signed_rank_test_is_scipys_wilcoxon(d):
    expected = sps.wilcoxon(d)
    assert stats.signed_rank_test(np.array(d)) == (float(expected.statistic), float(expected.pvalue))
