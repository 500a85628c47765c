"""The many-method comparison of a crafted study (4 methods, 7 sets, 5 seeds): every number against the library
that defines it (numpy, scipy.stats, statsmodels, baycomp), the Friedman statistic against its closed form, and the
report files it writes."""
from __future__ import annotations

import json
import math

import baycomp
import numpy as np
import pandas as pd
import pytest
from ndebench.platform.report import analyses
from ndebench.platform.report.methods.comparison import ROPE, compare_models
from ndebench.platform.report.methods.sections import methods_sections
from ndebench.platform.report.render.sections import to_markdown
from ndebench.platform.report.report import build_report
from ndebench.platform.report.statistics import bayes
from scipy import stats
from statsmodels.stats.multitest import multipletests

METHODS = {"none": 0.0, "naive_dropout_drift": 0.01, "steer": -0.02, "continuum_dropout": 0.04}
DATASETS = [f"uea/Set{i}" for i in range(7)]
SEEDS = range(5)
PRIMARY = dict.fromkeys(DATASETS, "test_accuracy")


def crafted(seed: int = 3) -> pd.DataFrame:
    """Continuum Dropout 0.04 above none, naive dropout 0.01, STEER 0.02 below, each seed's noise shared by the
    methods (a seed fixes the split and the initialisation) plus its own noise; plus a fixed-parameter variant cell
    that the comparison must leave out."""
    rng = np.random.default_rng(seed)
    rows = []
    for j, dataset in enumerate(DATASETS):
        shared = rng.normal(0, 0.02, len(SEEDS))
        variant = ("continuum_dropout", "continuum_dropout[p=0.5,m=5]", -0.3)
        cells = [(m, "", shift) for m, shift in METHODS.items()] + [variant]
        for method, variant, shift in cells:
            for s in SEEDS:
                rows.append({"run_id": f"{dataset}-{variant or method}-{s}", "study": "many", "model": "neural_ode",
                             "dataset": dataset, "regularizer": method, "variant": variant,
                             "label": variant or method, "seed": s, "status": "ok", "n_mc": 0,
                             "test_accuracy": 0.5 + 0.05 * j + shift + shared[s] + rng.normal(0, 0.01)})
    return pd.DataFrame(rows)


@pytest.fixture(scope="module")
def comparison():
    frame = crafted()
    (found,) = compare_models(frame, PRIMARY, "paired", 0.05)
    return frame[frame["variant"] == ""], found


def _values(frame, dataset, method):
    part = frame[(frame["dataset"] == dataset) & (frame["regularizer"] == method)].sort_values("seed")
    return part["test_accuracy"].to_numpy()


def _means(frame):
    return frame.groupby(["regularizer", "dataset"])["test_accuracy"].mean().unstack()


def test_per_set_means_stds_ranks_and_best_leave_out_the_variant_cells(comparison):
    frame, c = comparison
    assert c.methods == ["none", "naive_dropout_drift", "steer", "continuum_dropout"]
    assert len(c.cells) == len(DATASETS) * len(METHODS)
    for row in c.cells.itertuples(index=False):
        values = _values(frame, row.dataset, row.method)
        assert row.n == 5 and row.mean == pytest.approx(values.mean(), abs=1e-15)
        assert row.std == pytest.approx(values.std(ddof=1), rel=1e-12)
    means = _means(frame)
    for dataset in DATASETS:
        here = c.cells[c.cells["dataset"] == dataset].set_index("method")
        expected = stats.rankdata(-means[dataset].reindex(here.index).to_numpy())
        assert here["rank"].tolist() == expected.tolist()
        assert here.index[here["best"]].tolist() == [means[dataset].idxmax()]


def test_paired_tests_against_both_references_are_scipys_with_holm_per_set_and_reference(comparison):
    frame, c = comparison
    for reference in ("none", "continuum_dropout"):
        for dataset in DATASETS:
            found = c.tests[(c.tests["dataset"] == dataset) & (c.tests["baseline"] == reference)].set_index("method")
            others = [m for m in METHODS if m != reference]
            assert sorted(found.index) == sorted(others) and set(found["family"]) == {3}
            expected = [stats.ttest_rel(_values(frame, dataset, m), _values(frame, dataset, reference)) for m in others]
            assert found.loc[others, "p"].to_numpy() == pytest.approx([r.pvalue for r in expected], rel=1e-12)
            assert found.loc[others, "t"].to_numpy() == pytest.approx([r.statistic for r in expected], rel=1e-12)
            holm = multipletests([r.pvalue for r in expected], method="holm")[1]
            assert found.loc[others, "p_holm"].to_numpy() == pytest.approx(holm, rel=1e-12)


def test_average_ranks_and_friedman_match_scipy_and_the_closed_form(comparison):
    frame, c = comparison
    means = _means(frame).reindex(c.methods)
    ranks = np.column_stack([stats.rankdata(-means[d].to_numpy()) for d in DATASETS])
    expected = pd.Series(ranks.mean(axis=1), index=c.methods).sort_values()
    assert c.ranks.index.tolist() == expected.index.tolist()
    assert c.ranks.to_numpy() == pytest.approx(expected.to_numpy(), abs=1e-15)
    scipy_result = stats.friedmanchisquare(*means.to_numpy())
    assert c.friedman["chi2"] == pytest.approx(scipy_result.statistic, rel=1e-12)
    assert c.friedman["p"] == pytest.approx(scipy_result.pvalue, rel=1e-12)
    # Without ties: chi2 = 12 n / (k (k + 1)) * sum_j (R_j - (k + 1) / 2)^2 over the average ranks R_j.
    n, k = len(DATASETS), len(METHODS)
    closed = 12 * n / (k * (k + 1)) * float(((ranks.mean(axis=1) - (k + 1) / 2) ** 2).sum())
    assert c.friedman["chi2"] == pytest.approx(closed, rel=1e-12)
    assert (c.friedman["n_datasets"], c.friedman["n_methods"]) == (7, 4)
    assert c.friedman["p"] < 0.05 and c.ranks.index[0] == "continuum_dropout" and c.ranks.index[-1] == "steer"


def test_pairwise_wilcoxon_is_scipys_with_holm_over_all_pairs(comparison):
    frame, c = comparison
    means = _means(frame)
    pairs = [(a, b) for i, a in enumerate(c.methods) for b in c.methods[i + 1:]]
    found = c.pairs.set_index(["a", "b"])
    p = [stats.wilcoxon((means.loc[a] - means.loc[b]).to_numpy()).pvalue
         for a, b in (pair if pair in found.index else pair[::-1] for pair in pairs)]
    ordered = [found.loc[pair] if pair in found.index else found.loc[pair[::-1]] for pair in pairs]
    assert [row["p"] for row in ordered] == pytest.approx(p, rel=1e-12)
    assert [row["p_holm"] for row in ordered] == pytest.approx(multipletests(p, method="holm")[1], rel=1e-12)


def test_the_bayesian_signed_rank_is_baycomps_own_output(comparison):
    frame, c = comparison
    means = _means(frame)
    assert sorted(c.bayes) == ["naive_dropout_drift", "none", "steer"]
    for other, result in c.bayes.items():
        expected = baycomp.SignedRankTest.probs(means.loc["continuum_dropout"].to_numpy(), means.loc[other].to_numpy(),
                                                rope=ROPE, nsamples=bayes.NSAMPLES, random_state=bayes.SEED)
        assert (result.better, result.equivalent, result.worse) == tuple(float(x) for x in expected)
        assert result.better + result.equivalent + result.worse == pytest.approx(1.0, abs=1e-12)
    # 0.04 and 0.06 above on every set, far outside the 0.01 rope: decided; 0.03 above naive dropout, close to it.
    assert c.bayes["none"].decision == c.bayes["steer"].decision == "better"
    assert c.bayes["steer"].better > 0.99


def test_the_decision_rule_reads_each_probability_against_095():
    assert bayes.decision(0.96, 0.04, 0.0) == "better"
    assert bayes.decision(0.01, 0.96, 0.03) == "equivalent"
    assert bayes.decision(0.0, 0.04, 0.96) == "worse"
    assert bayes.decision(0.5, 0.45, 0.05) == "no decision"
    equal = bayes.signed_rank(np.linspace(0.6, 0.9, 8), np.linspace(0.6, 0.9, 8) + 0.001, rope=0.01)
    assert equal.decision == "equivalent" and equal.n == 8
    assert math.isnan(bayes.signed_rank(np.array([0.5]), np.array([0.4]), 0.01).better)


def test_sections_bold_the_best_mark_against_none_and_draw_the_diagram(comparison, tmp_path):
    frame, c = comparison
    sections = methods_sections(crafted(), PRIMARY, "paired", 0.05, tmp_path)
    per_set, tests, ranks, bayesian, claims = sections
    assert [row[0].text for row in claims.rows] == ["continuum_dropout is better than every baseline",
                                                    "the paper's ranking of the 4 methods"]
    assert per_set.header == ["dataset", *c.methods]
    for row, dataset in zip(per_set.rows, DATASETS, strict=False):
        bold = [h for h, cell in zip(per_set.header[1:], row[1:], strict=True) if cell.bold]
        assert bold == [_means(frame)[dataset].idxmax()]
        found = c.tests[(c.tests["dataset"] == dataset) & (c.tests["baseline"] == "none")].set_index("method")
        cd = row[-1]
        assert (cd.marker != "") == (found.loc["continuum_dropout", "p_holm"] < 0.05)
    assert per_set.rows[-1][0].text == "average rank"
    assert len(tests.rows) == len(DATASETS) * len(METHODS)
    assert [r[0].text for r in ranks.rows] == c.ranks.index.tolist()
    assert f"chi2 = {c.friedman['chi2']:.3f}" in ranks.caption
    png, pdf = ranks.figures
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and pdf.read_bytes()[:4] == b"%PDF"
    assert [r[0].text for r in bayesian.rows] == ["none", "naive_dropout_drift", "steer"]
    saved = json.loads((tmp_path / "methods.json").read_text())["models"]["neural_ode"]
    assert saved["friedman"]["chi2"] == pytest.approx(c.friedman["chi2"])
    assert saved["bayes"]["none"]["better"] == c.bayes["none"].better
    assert "every method on every set" in to_markdown(per_set)


def test_the_report_writes_methods_files_and_a_two_method_study_gets_none(tmp_path):
    frame = crafted()
    files = build_report(frame, tmp_path, "many", test="paired", alpha=0.05, figures="none")
    written = analyses.write_analyses(frame, files, "many", alpha=0.05)
    names = {p.name for p in written}
    assert {"methods.md", "methods.tex"} <= names and (tmp_path / "many" / "methods.json").exists()
    two = frame[frame["regularizer"].isin(["none", "continuum_dropout"])]
    files = build_report(two, tmp_path / "two", "many", test="paired", alpha=0.05, figures="none")
    written = analyses.write_analyses(two, files, "many", alpha=0.05)
    assert "methods.md" not in {p.name for p in written}
    assert "Many methods over many sets: not in this report" in (tmp_path / "two" / "many" / "report.html").read_text()


def test_the_papers_table2_ranks_are_the_transcribed_means_ranked_per_set():
    from ndebench.platform.report.methods.claims import paper_ranks
    from ndebench.platform.report.paper.data import paper_cells

    cells = paper_cells()
    cells = cells[(cells["table"] == 2) & (cells["setting"] == "")]
    means = cells.pivot(index="regularizer", columns="dataset", values="mean").astype(float)
    expected = np.mean([stats.rankdata(-means[d].to_numpy()) for d in means.columns], axis=0)
    ranks = paper_ranks()
    assert len(ranks) == 8 and ranks.index[0] == "continuum_dropout" and ranks.iloc[0] == 1.0
    assert ranks[means.index].to_numpy() == pytest.approx(expected, abs=1e-15)


def test_table2_claims_hold_fail_or_stay_open_by_their_stated_rules(comparison):
    from ndebench.platform.report.methods.claims import paper_ranks, ranking, superiority

    _, c = comparison
    assert superiority(c).verdict == ("holds" if all(r.decision == "better" for r in c.bayes.values())
                                      else "inconclusive")
    frame = crafted()
    tied = frame[frame["regularizer"] == "continuum_dropout"].assign(regularizer="naive_dropout_drift")
    tied = tied.assign(label=tied["regularizer"], test_accuracy=tied["test_accuracy"] - 0.001)
    frame = pd.concat([frame[frame["regularizer"] != "naive_dropout_drift"], tied[tied["variant"] == ""]])
    (equal,) = compare_models(frame, PRIMARY, "paired", 0.05)
    assert equal.bayes["naive_dropout_drift"].decision == "equivalent"
    assert superiority(equal).verdict == "fails" and "naive_dropout_drift" in superiority(equal).study
    claim = ranking(c, 0.05)
    common = [m for m in c.ranks.index if m in paper_ranks().index]
    expected = stats.kendalltau(paper_ranks()[common].to_numpy(), c.ranks[common].to_numpy())
    assert f"tau = {expected.statistic:+.3f}" in claim.study
    assert claim.verdict == ("agrees" if expected.pvalue < 0.05 and expected.statistic > 0 else
                             "reversed" if expected.pvalue < 0.05 else "inconclusive")
