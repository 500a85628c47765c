"""Effect sizes against the baseline: difference intervals from scipy's tests, Hedges' g by hand, and the report."""
import math

import numpy as np
import pandas as pd
import pytest
from ndebench.platform.report.cellstats import cell_statistics
from ndebench.platform.report.render.html_report import write_html
from ndebench.platform.report.report import build_report
from ndebench.platform.report.statistics.effects import effect_sizes, mean_interval
from ndebench.platform.report.statistics.stats import compare_across_datasets, compare_to_baseline
from scipy import stats

A = np.array([0.81, 0.84, 0.79, 0.86, 0.83])
B = np.array([0.78, 0.80, 0.74, 0.79, 0.77])
Z = stats.norm.ppf(0.975)


def _two_sample_by_hand(scale: float) -> tuple[float, float]:
    n_a, n_b = len(A), len(B)
    g = (A.mean() - B.mean()) / scale * (1 - 3 / (4 * (n_a + n_b - 2) - 1))
    return g, math.sqrt(1 / n_a + 1 / n_b + g * g / (2 * (n_a + n_b)))


def test_student_interval_is_the_pooled_t_interval_and_g_uses_the_pooled_sd():
    out = effect_sizes(A, B, "student")
    diff = A.mean() - B.mean()
    pooled = math.sqrt(((len(A) - 1) * A.var(ddof=1) + (len(B) - 1) * B.var(ddof=1)) / (len(A) + len(B) - 2))
    half = stats.t.ppf(0.975, len(A) + len(B) - 2) * pooled * math.sqrt(1 / len(A) + 1 / len(B))
    assert out["diff_ci_low"] == pytest.approx(diff - half, rel=1e-12)
    assert out["diff_ci_high"] == pytest.approx(diff + half, rel=1e-12)
    g, se = _two_sample_by_hand(pooled)
    assert out["hedges_g"] == pytest.approx(g, rel=1e-12)
    assert (out["hedges_g_ci_low"], out["hedges_g_ci_high"]) == pytest.approx((g - Z * se, g + Z * se), rel=1e-12)


def test_welch_interval_uses_the_satterthwaite_df_and_g_the_average_variance():
    out = effect_sizes(A, B, "welch")
    va, vb = A.var(ddof=1) / len(A), B.var(ddof=1) / len(B)
    df = (va + vb) ** 2 / (va**2 / (len(A) - 1) + vb**2 / (len(B) - 1))
    half = stats.t.ppf(0.975, df) * math.sqrt(va + vb)
    diff = A.mean() - B.mean()
    assert (out["diff_ci_low"], out["diff_ci_high"]) == pytest.approx((diff - half, diff + half), rel=1e-12)
    g, se = _two_sample_by_hand(math.sqrt((A.var(ddof=1) + B.var(ddof=1)) / 2))
    assert out["hedges_g"] == pytest.approx(g, rel=1e-12)
    assert out["hedges_g_ci_high"] == pytest.approx(g + Z * se, rel=1e-12)


def test_paired_interval_and_g_come_from_the_differences():
    out = effect_sizes(A, B, "paired")
    d = A - B
    half = stats.t.ppf(0.975, len(d) - 1) * d.std(ddof=1) / math.sqrt(len(d))
    assert (out["diff_ci_low"], out["diff_ci_high"]) == pytest.approx((d.mean() - half, d.mean() + half), rel=1e-12)
    g = d.mean() / d.std(ddof=1) * (1 - 3 / (4 * (len(d) - 1) - 1))
    se = math.sqrt(1 / len(d) + g * g / (2 * len(d)))
    assert out["hedges_g"] == pytest.approx(g, rel=1e-12)
    assert out["hedges_g_ci_low"] == pytest.approx(g - Z * se, rel=1e-12)


def test_degenerate_samples_give_no_interval():
    assert all(math.isnan(v) for v in effect_sizes([0.5], B).values())
    assert all(math.isnan(v) for v in effect_sizes([0.5, 0.5], [0.5, 0.5]).values())
    with pytest.raises(ValueError, match="equal lengths, got 2 and 3"):
        effect_sizes([1, 2], [1, 2, 3], "paired")
    assert all(math.isnan(v) for v in mean_interval([1.0]))


def _study() -> pd.DataFrame:
    rows = []
    for dataset, shift in (("d1", 0.0), ("d2", 0.01), ("d3", -0.02)):
        for reg, values in (("none", B), ("continuum_dropout", A)):
            rows += [{"study": "s", "model": "m", "dataset": dataset, "regularizer": reg, "seed": seed,
                      "status": "ok", "test_accuracy": v + shift, "metric": "accuracy"}
                     for seed, v in enumerate(values)]
    return pd.DataFrame(rows)


@pytest.mark.parametrize("test", ["student", "welch", "paired"])
def test_comparisons_carry_the_effect_sizes_of_their_test(test):
    out = compare_to_baseline(_study(), "test_accuracy", test=test).set_index("dataset")
    assert out.loc["d2", "hedges_g"] == pytest.approx(effect_sizes(A, B, test)["hedges_g"], rel=1e-9)
    assert out.loc["d1", "diff_ci_low"] == pytest.approx(effect_sizes(A, B, test)["diff_ci_low"], rel=1e-9)


def test_across_datasets_has_the_t_interval_of_the_mean_improvement():
    across = compare_across_datasets(_study(), dict.fromkeys(("d1", "d2", "d3"), "test_accuracy"))
    d = np.full(3, A.mean() - B.mean())
    row = across.iloc[0]
    assert row["mean_improvement"] == pytest.approx(d.mean()) and math.isnan(row["ci_low"])  # no spread
    study = _study()
    study.loc[(study["dataset"] == "d3") & (study["regularizer"] == "none"), "test_accuracy"] -= 0.03
    row = compare_across_datasets(study, dict.fromkeys(("d1", "d2", "d3"), "test_accuracy")).iloc[0]
    d = np.array([A.mean() - B.mean()] * 2 + [A.mean() - B.mean() + 0.03])
    half = stats.t.ppf(0.975, 2) * stats.sem(d)
    assert (row["ci_low"], row["ci_high"]) == pytest.approx((d.mean() - half, d.mean() + half), rel=1e-9)


def test_the_report_shows_the_effect_sizes(tmp_path):
    files = build_report(_study(), tmp_path, "s")
    text = files.table_md.read_text()
    g = effect_sizes(A, B)["hedges_g"]
    assert "## Tests against none" in text and f"{g:+.2f} [" in text
    assert "Hedges' g" in (files.directory / "table_full.tex").read_text()


def test_every_tested_cell_has_its_t_df_and_p_in_table_md_table_tex_and_report_html(tmp_path):
    study = _study().assign(test_nll=lambda frame: 1 - frame["test_accuracy"])
    files = build_report(study, tmp_path, "s", correction="holm", figures="none")
    result = stats.ttest_ind(A, B)
    # Holm over the table's 3 equal p-values multiplies each by 3.
    p, holm, t = f"{result.pvalue:.4f}", f"{min(1.0, 3 * result.pvalue):.4f}", f"{result.statistic:.2f}"
    md, tex = files.table_md.read_text(), (files.directory / "table_full.tex").read_text()
    page = write_html(tmp_path / "report.html", "s", study, list(files.shown), [], [], {}).read_text()
    assert "## Tests against none\n" in md and "## Tests against none: NLL\n" in md
    assert "| t (df) | p | p (holm) | Hedges' g [95% CI] |" in md
    for dataset in ("d1", "d2", "d3"):  # a row in both tables (accuracy, NLL)
        assert md.count(f"| m | {dataset} | continuum_dropout | 5 vs 5 |") == 2
    # The same shift on every dataset: 3 rows with +t (accuracy) and 3 with -t (NLL), in each format.
    assert md.count(f" | +{t} (8) | {p} | {holm} | ") == md.count(f" | -{t} (8) | {p} | {holm} | ") == 3
    assert tex.count(f"& +{t} (8) & {p} & {holm} &") == tex.count(f"& -{t} (8) & {p} & {holm} &") == 3
    assert page.count(f"<td>+{t} (8)</td><td>{p}</td><td>{holm}</td>") == 3
    assert page.count(f"<td>-{t} (8)</td><td>{p}</td><td>{holm}</td>") == 3
    assert md.count("the two-sided Student's two-sample t-test") == 2 and "Each cell's p-value: \"Tests against" in md


@pytest.mark.parametrize("test", ["student", "welch", "paired"])
def test_cell_runs_get_the_difference_its_interval_and_g_of_the_report_test(test):
    # The baseline's rows are listed in reverse seed order: the paired test must match runs by seed, not by row.
    # A variant cell of none (its own label, regularizer none) is a cell of its own, compared with none.
    rows = ([("continuum_dropout", "continuum_dropout", s, a) for s, a in enumerate(A)]
            + [("none", "none[n_mc=8]", s, a) for s, a in enumerate(A)]
            + [("none", "none", s, B[s]) for s in reversed(range(5))])
    runs = pd.DataFrame([{"model": "m", "dataset": "d", "regularizer": r, "label": label, "seed": s, "status": "ok",
                          "metric": "accuracy", "test_accuracy": v, "test_nll": 1 - v} for r, label, s, v in rows])
    out = cell_statistics(runs, [("m", "d", "continuum_dropout"), ("m", "d", "none"), ("m", "d", "none[n_mc=8]")],
                          test)
    cd, base = out[("m", "d", "continuum_dropout")], out[("m", "d", "none")]
    assert out[("m", "d", "none[n_mc=8]")] == pytest.approx(cd, rel=1e-12)
    if test == "paired":
        result, d = stats.ttest_rel(A, B), A - B
        g = d.mean() / d.std(ddof=1) * (1 - 3 / (4 * (len(d) - 1) - 1))
        se = math.sqrt(1 / len(d) + g * g / (2 * len(d)))
    else:
        result = stats.ttest_ind(A, B, equal_var=test == "student")
        pooled = math.sqrt((A.var(ddof=1) + B.var(ddof=1)) / 2)  # equal n: the pooled and the average-variance SD agree
        g, se = _two_sample_by_hand(pooled)
    ci = result.confidence_interval(0.95)
    assert cd["diff_vs_none"] == pytest.approx(A.mean() - B.mean(), rel=1e-12)
    assert (cd["diff_ci_low"], cd["diff_ci_high"]) == pytest.approx((ci.low, ci.high), rel=1e-12)
    assert cd["p_value_vs_none"] == pytest.approx(result.pvalue, rel=1e-12)
    assert cd["hedges_g"] == pytest.approx(g, rel=1e-12)
    assert (cd["hedges_g_ci_low"], cd["hedges_g_ci_high"]) == pytest.approx((g - Z * se, g + Z * se), rel=1e-12)
    # The primary metric's numbers come first: MLflow's compare page plots the first metric the runs share.
    assert list(cd)[:2] == ["mean_test_accuracy", "std_test_accuracy"]
    assert cd["mean_test_accuracy"] == pytest.approx(A.mean())
    assert cd["n"] == 5 and cd["mean_test_nll"] == pytest.approx(1 - A.mean())
    assert "diff_vs_none" not in base and base["std_test_accuracy"] == pytest.approx(B.std(ddof=1))


def test_a_regularizer_on_one_dataset_gets_no_wilcoxon_row_and_the_report_says_why(tmp_path):
    study = _study()
    one = build_report(study[study["dataset"] == "d1"], tmp_path / "one", "s", figures="none").table_md.read_text()
    across = one.split("## Across datasets")[1]
    assert "Wilcoxon p" not in across and "No table: a (model, regularizer) that shares a single dataset" in across
    # jump_diffusion shares d1 only: its row is left out, continuum_dropout's (3 datasets) stays.
    jump = study[study["dataset"] == "d1"].assign(regularizer=lambda f: f["regularizer"].where(
        f["regularizer"] == "none", "jump_diffusion"))
    mixed = build_report(pd.concat([study, jump[jump["regularizer"] != "none"]]), tmp_path / "mixed", "s",
                         figures="none").table_md.read_text().split("## Across datasets")[1]
    assert "| m | continuum_dropout | 3 |" in mixed and "| m | jump_diffusion |" not in mixed
    assert "- 1 row(s) left out: a (model, regularizer) that shares a single dataset" in mixed
