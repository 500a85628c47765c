"""``ndebench report --paper``: a study of known values beside the paper's numbers, every difference and interval
flag checked against an independent computation."""
import json
import math

import numpy as np
import pandas as pd
import pytest
from ndebench.platform.report.analyses import write_analyses
from ndebench.platform.report.paper import agreement, pairing
from ndebench.platform.report.paper import comparison as paper
from ndebench.platform.report.paper.data import paper_cells
from ndebench.platform.report.render.tables import table_rows
from ndebench.platform.report.report import build_report
from ndebench.platform.report.statistics import agreement as agreement_stats
from ndebench.platform.report.statistics import power as power_stats
from ndebench.platform.report.statistics import selection
from scipy import stats as sps
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.power import TTestPower
from statsmodels.stats.weightstats import ttost_ind

OFFSETS = np.array([-2.0, -1.0, 0.0, 1.0, 2.0])
H = 0.01
# (model, dataset, regularizer) -> study mean; the seeds are mean + OFFSETS * H
MEANS = {
    ("neural_ode", "uea/SmoothSubspace", "none"): 0.60,  # paper 0.569 (Tables 2, 16a, 16b): outside
    ("neural_ode", "uea/SmoothSubspace", "continuum_dropout"): 0.63,  # paper 0.629: inside
    ("neural_ode", "uea/SmoothSubspace", "steer"): 0.58,  # paper 0.578: inside
    ("neural_ode", "uea/ERing", "none"): 0.80,  # paper 0.839 (Tables 2, 16a, 16b): outside
    ("neural_ode", "uea/ERing", "continuum_dropout"): 0.85,  # paper 0.881: outside
    ("neural_cde", "uea/GunPoint", "none"): 0.90,  # the paper has no per-dataset GunPoint cell
    ("neural_cde", "uea/GunPoint", "continuum_dropout"): 0.86,
    ("neural_cde", "uea/ItalyPowerDemand", "none"): 0.90,  # not among the paper's 30 sets
    ("neural_cde", "uea/ItalyPowerDemand", "continuum_dropout"): 0.93,
    ("neural_cde", "uea/BasicMotions", "none"): 0.70,
    ("neural_cde", "uea/BasicMotions", "continuum_dropout"): 0.75,
    ("neural_cde", "uea/BasicMotions", "continuum_dropout[scope=time]"): 0.95,  # our extension
}


def _study() -> pd.DataFrame:
    """The study frame as the record reads it: the extension's runs are ``continuum_dropout`` runs whose
    ``regularizer.scope`` is ``time``, which names their row."""
    rows = [{"study": "s", "model": m, "dataset": d, "regularizer": r.split("[")[0], "variant": "", "fixed": {},
             "label": r, "params.regularizer.scope": "time" if "scope=time" in r else "increment", "seed": s,
             "status": "ok", "metric": "accuracy", "test_accuracy": mean + OFFSETS[s] * H}
            for (m, d, r), mean in MEANS.items() for s in range(5)]
    return table_rows(pd.DataFrame(rows))


def _primary(runs: pd.DataFrame) -> dict[str, str]:
    return dict.fromkeys(sorted(set(runs["dataset"])), "test_accuracy")


def test_every_cell_the_paper_reports_gets_its_difference_and_interval_flag():
    runs = _study()
    cells, missing = paper.compare_cells(runs, _primary(runs))
    half = sps.t.ppf(0.975, 4) * np.std(OFFSETS * H, ddof=1) / math.sqrt(5)
    reference = paper_cells()
    expected = 0
    for (model, dataset, regularizer), mean in MEANS.items():
        ref = reference[(reference["model"] == model) & (reference["dataset"] == dataset)
                        & (reference["regularizer"] == regularizer) & (reference["setting"] == "")
                        & (reference["metric"] == "accuracy")].drop_duplicates(["table", "mean", "std"])
        got = cells[(cells["model"] == model) & (cells["dataset"] == dataset) & (cells["regularizer"] == regularizer)]
        assert sorted(got["table"]) == sorted(ref["table"])
        expected += len(ref)
        for row, paper_mean in zip(got.sort_values("table").itertuples(), ref.sort_values("table")["mean"],
                                   strict=True):
            assert row.paper_mean == paper_mean
            assert row.difference == pytest.approx(mean - paper_mean, abs=1e-12)
            assert (row.ci_low, row.ci_high) == pytest.approx((mean - half, mean + half), abs=1e-12)
            assert row.paper_inside == (mean - half <= paper_mean <= mean + half)
    assert len(cells) == expected == 2 + 1 + 1 + 2 + 1  # Table 16's two panels repeat the baseline
    inside = cells.groupby(["dataset", "regularizer"])["paper_inside"].agg(set).to_dict()
    assert inside == {("uea/SmoothSubspace", "none"): {False}, ("uea/SmoothSubspace", "continuum_dropout"): {True},
                      ("uea/SmoothSubspace", "steer"): {True}, ("uea/ERing", "none"): {False},
                      ("uea/ERing", "continuum_dropout"): {False}}
    reasons = {(m["dataset"], m["regularizer"]): m["reason"] for m in missing}
    assert len(missing) == len(reasons) == 7
    assert reasons[("uea/GunPoint", "none")] == "the paper reports no accuracy for this cell"
    assert [r for (_, label), r in reasons.items() if label == "continuum_dropout[scope=time]"][0].startswith(
        "an extension")
    # the report groups them: one line per (model, dataset) and reason, naming every cell on it
    notes = paper.missing_notes(missing)
    assert sum(n.count(",") + 1 for n in notes) >= len(missing)
    assert all(any(f"{m['model']} / {m['dataset']}: " in n and m["regularizer"] in n for n in notes) for m in missing)


def test_the_across_dataset_improvement_stands_beside_tables_9_to_11():
    runs = _study()
    across, notes = paper.compare_summary(runs, _primary(runs))
    rows = across.set_index(["model", "split"])
    # neural_cde: univariate GunPoint (-0.04) and ItalyPowerDemand (+0.03), multivariate BasicMotions (+0.05)
    d = {"all": [-0.04, 0.03, 0.05], "univariate": [-0.04, 0.03], "multivariate": [0.05]}
    for split, values in d.items():
        row = rows.loc[("neural_cde", split)]
        assert row["study_improvement"] == pytest.approx(np.mean(values), abs=1e-12)
        assert row["study_se"] == pytest.approx(sps.sem(values), abs=1e-12) if len(values) > 1 else \
            math.isnan(row["study_se"])
        assert row["study_n_datasets"] == len(values)
        assert row["table"] == {"all": 9, "univariate": 10, "multivariate": 11}[split]
    assert rows.loc[("neural_cde", "univariate"), "paper_improvement"] == 0.098
    assert rows.loc[("neural_cde", "all"), "study_datasets_in_paper"] == 2  # ItalyPowerDemand is not one of the 30
    pct = [100 * -0.04 / 0.90, 100 * 0.03 / 0.90]
    assert rows.loc[("neural_cde", "univariate"), "study_pct_change"] == pytest.approx(np.mean(pct), abs=1e-9)
    assert rows.loc[("neural_ode", "multivariate"), "study_improvement"] == pytest.approx(0.05, abs=1e-12)
    assert any("neural_cde, all: the study's 3 sets are not the paper's 30 (among the paper's: 2)" in n for n in notes)
    # the chance gain of best-of-20 on 5 seeds, from each set's per-seed residuals (every cell has the same ones)
    residuals = OFFSETS * H * math.sqrt(5 / 4)
    per_set = selection.chance_gain(np.concatenate([residuals, residuals]), 20, 5)
    with_extension = selection.chance_gain(np.concatenate([residuals] * 3), 20, 5)
    assert rows.loc[("neural_cde", "univariate"), "chance_gain_best_of_k"] == pytest.approx(per_set, abs=1e-12)
    assert rows.loc[("neural_cde", "multivariate"), "chance_gain_best_of_k"] == pytest.approx(with_extension,
                                                                                           abs=1e-12)
    assert 0 < per_set < 3 * H


def test_the_report_writes_the_comparison_into_table_md_and_summary_json(tmp_path):
    files = build_report(_study(), tmp_path, "s", paper=True, figures="none")
    text = files.table_md.read_text()
    assert "## The paper's cells beside the study" in text and "## Across datasets beside the paper's Tables 9-11" \
        in text
    assert ("Not reported by the paper: neural_cde / uea/GunPoint: the paper reports no accuracy for "
            "continuum_dropout, none") in text
    comparison = json.loads(files.summary_json.read_text())["paper_comparison"]
    assert len(comparison["cells"]) == 7 and comparison["chance_gain"]["k"] == 20
    assert {r["split"] for r in comparison["across_datasets"]} == {"all", "univariate", "multivariate"}
    assert [s.title for s in files.paper] == [
        "The paper's cells beside the study", "Across datasets beside the paper's Tables 9-11",
        "Agreement with the paper across datasets", "Agreement with the paper without the sets near ceiling",
        "Per-set tests, paired by seed", "Agreement with the paper per cell",
        "Per-set power at the paper's effect", "Sets a study needs to decide",
        "Chance gain of best-of-20 at the paper's own spread",
        "Test selection in the paper's tables: reported cells at their grid's maximum"]
    assert {r["verdict"] for r in comparison["agreement_cells"]} <= {"agrees", "differs", "inconclusive"}
    assert "Verdict rule" in text and "TOST margin" in text
    runs = _study()
    write_analyses(runs.assign(run_id=range(len(runs)), p=np.nan, m=np.nan, rate=np.nan), files, "s", alpha=0.05)
    page = (files.directory / "report.html").read_text()
    assert "The paper&#x27;s cells beside the study" in page
    assert "Across datasets beside the paper&#x27;s Tables" in page
    plain = build_report(_study(), tmp_path / "plain", "s", figures="none")
    assert "paper_comparison" not in json.loads(plain.summary_json.read_text()) and not plain.paper


def test_a_study_of_no_cell_the_paper_reports_gets_a_line_not_an_empty_table(tmp_path):
    from ndebench.platform.report.render.sections import to_html, to_latex

    runs = _study()
    runs = runs[runs["dataset"] == "uea/ItalyPowerDemand"]
    files = build_report(runs, tmp_path, "s", paper=True, figures="none")
    assert all(s.rows or not s.header for s in files.paper)
    assert "Agreement with the paper per cell" not in [s.title for s in files.paper]
    text = files.table_md.read_text()
    line = "The paper reports none of the study's cells per dataset, so there is no table of them."
    assert f"## The paper's cells beside the study\n\n{line}\n- Not reported by the paper" in text
    assert "| table | model |" not in text
    first = files.paper[0]
    assert "<table>" not in to_html(first, {}) and line.replace("'", "&#x27;") in to_html(first, {})
    assert to_latex(first).startswith("\\paragraph{The paper's cells beside the study} The paper reports none")


@pytest.mark.parametrize("test", ["paired", "welch"])
def test_the_report_passes_its_test_to_the_paper_comparison(tmp_path, test):
    files = build_report(_study(), tmp_path, "s", paper=True, figures="none", test=test)
    count = json.loads(files.summary_json.read_text())["paper_comparison"]["per_set_count"]
    assert count["test"] == test
    assert f"The report's --test is {test}" in files.table_md.read_text()


def test_the_report_command_takes_paper():
    from ndebench.platform.cli.arguments import build_parser

    args = build_parser().parse_args(["report", "--study", "s", "--paper"])
    assert args.paper is True and build_parser().parse_args(["report", "--study", "s"]).paper is False


# --- agreement with the paper's values: studies of known values that land in each verdict ---

def _improvement_study(model: str, improvements: list[float], base: float = 0.5) -> pd.DataFrame:
    """One set per improvement, none at ``base`` and continuum_dropout at ``base + improvement`` (seeds
    ``+ OFFSETS * H``), so that each set's improvement is exactly the given one."""
    rows = [{"study": "s", "model": model, "dataset": f"uea/Set{i}", "regularizer": r, "variant": "", "seed": s,
             "status": "ok", "metric": "accuracy", "test_accuracy": base + (d if r == "continuum_dropout" else 0)
             + OFFSETS[s] * H} for i, d in enumerate(improvements) for r in ("none", "continuum_dropout")
            for s in range(5)]
    return pd.DataFrame(rows)


def _paper_sample(mean: float, std: float, n: int) -> np.ndarray:
    """n values with exactly this mean and sample std: a stand-in for the paper's unpublished seeds or sets."""
    z = np.linspace(-1, 1, n)
    return mean + std * (z - z.mean()) / z.std(ddof=1)


def _across(improvements: list[float]) -> pd.Series:
    runs = _improvement_study("neural_cde", improvements)
    channels = dict.fromkeys(sorted(set(runs["dataset"])), 1)
    across, _ = paper.compare_summary(runs, _primary(runs), channels)
    rows = agreement.across_agreement(across).set_index("split")
    assert math.isnan(rows.loc["multivariate", "p_difference"])  # no multivariate set: outside the Holm family
    return rows.loc["univariate"]


@pytest.mark.parametrize(("improvements", "verdict"), [
    ([0.098 + 0.004 * k for k in (-2, -1, 0, 1, 2, -1.5, 1.5, 0)], "agrees"),   # 8 sets at the paper's +0.098
    ([-0.05 + 0.004 * k for k in (-2, -1, 0, 1, 2, -1.5, 1.5, 0)], "differs"),  # 8 sets at -0.05
    ([0.0, 0.2], "inconclusive"),                                               # 2 sets: t(df = 1) = 12.7
])
def test_an_across_dataset_row_lands_in_its_verdict(improvements, verdict):
    row = _across(improvements)
    k = len(improvements)
    study, ref = np.array(improvements), _paper_sample(0.098, 0.020 * math.sqrt(15), 15)  # Table 10: 0.098 +- 0.020
    assert row["study_improvement"] == pytest.approx(study.mean(), abs=1e-12)
    half = sps.t.ppf(0.975, k - 1) * sps.sem(study)
    assert (row["study_ci_low"], row["study_ci_high"]) == pytest.approx((study.mean() - half, study.mean() + half))
    paper_half = sps.t.ppf(0.975, 14) * 0.020
    assert (row["paper_ci_low"], row["paper_ci_high"]) == pytest.approx((0.098 - paper_half, 0.098 + paper_half))
    welch = sps.ttest_ind(study, ref, equal_var=False)
    assert row["p_difference"] == pytest.approx(welch.pvalue, rel=1e-9)
    ci = welch.confidence_interval()
    assert (row["diff_ci_low"], row["diff_ci_high"]) == pytest.approx((ci.low, ci.high), rel=1e-9)
    margin = 0.5 * 0.098
    assert row["margin"] == pytest.approx(margin)
    assert row["p_tost"] == pytest.approx(ttost_ind(study, ref, -margin, margin, usevar="unequal")[0], rel=1e-9)
    # the univariate row's p-values are adjusted with the "all" row's (Holm over the finite ones)
    assert row["p_difference_holm"] >= row["p_difference"] and row["p_tost_holm"] >= row["p_tost"]
    assert row["verdict"] == verdict
    assert agreement_stats.power(row["study_mde"], sps.sem(study), k - 1) == pytest.approx(0.8, abs=1e-9)
    if verdict == "inconclusive":  # the study cannot tell the paper's effect from none
        assert row["power_at_paper"] < 0.8 < 1 and row["study_mde"] > 0.098
    if verdict == "agrees":
        assert row["power_at_paper"] > 0.99


def test_a_row_below_its_seed_noise_floor_is_also_read_with_the_floor_as_its_se():
    """The rule drops a row whose SE over sets is below the SE its sets' seed noise gives (a choice); the other
    reading takes the floor as the SE: a Welch test of study minus paper on SE sqrt(floor^2 + paper SE^2) with
    Welch-Satterthwaite df, Holm over the rows then tested, and its verdict, written beside the rule's."""
    improvements = [-0.05 + 0.004 * k for k in (-2, -1, 0, 1, 2, -1.5, 1.5, 0)]
    runs = _improvement_study("neural_cde", improvements)
    across, _ = paper.compare_summary(runs, _primary(runs), dict.fromkeys(sorted(set(runs["dataset"])), 1))
    study = np.array(improvements)
    floor = 2 * sps.sem(study)
    rows = agreement.across_agreement(across, {("neural_cde", "univariate"): floor}).set_index("split")
    uni, every = rows.loc["univariate"], rows.loc["all"]
    assert uni["study_se_missing"] and math.isnan(uni["p_difference"]) and uni["floor_se"] == floor
    se_paper, k = 0.020, len(improvements)
    se = math.hypot(floor, se_paper)
    df = se**4 / (floor**4 / (k - 1) + se_paper**4 / 14)
    t = (study.mean() - 0.098) / se
    assert uni["p_difference_floored"] == pytest.approx(2 * sps.t.sf(abs(t), df), rel=1e-9)
    assert math.isnan(every["floor_se"]) and every["p_difference_floored"] == every["p_difference"]
    holm = multipletests([every["p_difference"], uni["p_difference_floored"]], method="holm")[1]
    assert (every["p_difference_holm_floored"], uni["p_difference_holm_floored"]) == pytest.approx(tuple(holm))
    assert uni["verdict"] == "inconclusive" and uni["verdict_floored"] == "differs"
    powers = pd.DataFrame({"model": ["neural_cde"] * 2, "split": ["all", "univariate"], "ceiling_sets": [[], []]})
    section = agreement.across_section(agreement.with_ceilings(rows.reset_index(), powers))
    note = next(n for n in section.notes if n.startswith("Seed-noise floor (a choice)"))
    assert f"neural_cde univariate: floor {floor:.4f}, p {uni['p_difference_floored']:.3g}" in note
    assert "over the 2 rows then tested: differs (this table: inconclusive)" in note


def test_a_study_mde_matches_statsmodels_one_sample_power():
    se, k = 0.01, 8
    d = TTestPower().solve_power(effect_size=None, nobs=k, alpha=0.05, power=0.8)
    assert agreement_stats.mde(se, k - 1) == pytest.approx(d * se * math.sqrt(k), rel=1e-6)


def _cell_study(means: dict[str, tuple[float, float]]) -> pd.DataFrame:
    """neural_ode none cells on Table 2's sets: dataset -> (mean, spread per OFFSETS step)."""
    return pd.DataFrame([{"study": "s", "model": "neural_ode", "dataset": d, "regularizer": "none", "variant": "",
                          "seed": s, "status": "ok", "metric": "accuracy", "test_accuracy": m + OFFSETS[s] * h}
                         for d, (m, h) in means.items() for s in range(5)])


def test_each_cell_lands_in_its_verdict_with_holm_over_the_cells():
    # paper (Tables 2 and 16, none): ArticularyWordRecognition 0.859 (0.005), ERing 0.839 (0.018),
    # RacketSports 0.565 (0.065); margin 0.5 x Table 9's neural_ode +0.047
    means = {"uea/ArticularyWordRecognition": (0.859, 0.001), "uea/ERing": (0.70, 0.01),
             "uea/RacketSports": (0.585, 0.05)}
    runs = _cell_study(means)
    cells, _ = paper.compare_cells(runs, _primary(runs))
    got = agreement.cell_agreement(cells)
    assert len(got) == 6  # each set's none cell in Table 2 and in Table 16
    margin = 0.5 * 0.047
    raw_d, raw_e = [], []
    for row in got.itertuples(index=False):
        mean, h = means[row.dataset]
        study = mean + OFFSETS * h
        ref = _paper_sample(row.paper_mean, float(cells.loc[cells["dataset"] == row.dataset, "paper_std"].iloc[0]), 5)
        assert row.margin == pytest.approx(margin)
        assert row.p_difference == pytest.approx(sps.ttest_ind(study, ref, equal_var=False).pvalue, rel=1e-9)
        assert row.p_tost == pytest.approx(ttost_ind(study, ref, -margin, margin, usevar="unequal")[0], rel=1e-9)
        raw_d.append(row.p_difference)
        raw_e.append(row.p_tost)
    assert got["p_difference_holm"].to_numpy() == pytest.approx(multipletests(raw_d, method="holm")[1])
    assert got["p_tost_holm"].to_numpy() == pytest.approx(multipletests(raw_e, method="holm")[1])
    assert got.groupby("dataset")["verdict"].agg(set).to_dict() == {
        "uea/ArticularyWordRecognition": {"agrees"}, "uea/ERing": {"differs"}, "uea/RacketSports": {"inconclusive"}}
    assert (got["mde"] > 0).all()


def test_per_set_power_counts_significant_sets_and_ceilings():
    # neural_cde univariate (Table 10): d = 0.098 / sqrt((0.079^2 + 0.065^2) / 2)
    runs = _improvement_study("neural_cde", [0.05, 0.0], base=0.93)
    channels = dict.fromkeys(sorted(set(runs["dataset"])), 1)
    across, _ = paper.compare_summary(runs, _primary(runs), channels)
    tests = pairing.set_tests(runs, _primary(runs), [("neural_cde", d) for d in sorted(set(runs["dataset"]))],
                              "continuum_dropout", "none", "student")
    power = agreement.per_set_power(runs, _primary(runs), across, "none", tests, "student").set_index("split")
    d = 0.098 / math.sqrt((0.079 ** 2 + 0.065 ** 2) / 2)
    row = power.loc["univariate"]
    assert row["paper_d"] == pytest.approx(d)
    nc, crit = d * math.sqrt(5 / 2), sps.t.ppf(0.975, 8)
    assert row["power_independent"] == pytest.approx(sps.nct.sf(crit, 8, nc) + sps.nct.cdf(-crit, 8, nc),
                                                     rel=1e-9)
    # the seeds pair the cells and both arms move together (r = 1, clipped to 0.99): Student's t at that r
    assert pairing.median_correlation(tests) == 0.99
    assert row["power"] == power_stats.per_set_power(d, 0.99, "student", 5)
    # Set0: +0.05 at seed std 0.0158 is significant; Set1: no difference
    assert row["study_significant"] == 1 and row["expected_significant"] == pytest.approx(2 * row["power"])
    assert row["significant_sets"] == ["uea/Set0"] and row["sets"] == ["uea/Set0", "uea/Set1"]
    assert row["ceiling_sets"] == ["uea/Set0", "uea/Set1"]  # 1 - 0.93 < 0.098


def test_the_chance_of_so_few_significant_sets_is_the_poisson_binomial():
    import itertools

    powers = [0.47, 0.18, 0.11, 0.4]
    for observed in range(5):
        brute = sum(np.prod([q if hit else 1 - q for q, hit in zip(powers, hits, strict=True)])
                    for hits in itertools.product([0, 1], repeat=4) if sum(hits) <= observed)
        assert agreement_stats.at_most(observed, powers) == pytest.approx(brute, abs=1e-15)
    assert agreement_stats.at_most(2, [0.3] * 12) == pytest.approx(sps.binom.cdf(2, 12, 0.3), abs=1e-15)
    assert agreement_stats.at_most(0, []) == 1.0


def test_the_count_reads_the_free_sets_under_the_papers_student_t_beside_the_design_test():
    """Three free sets, none significant: at paired power 0.9 each the chance of none is 0.1^3 = 0.001 (differs);
    at the Student t's power 0.4 on the same arms it is 0.6^3 = 0.216 (inconclusive), and the note says the verdict
    turns on the test. A ceiling set is left out of both readings."""
    sets = ["uea/A", "uea/B", "uea/C", "uea/D"]
    powers = pd.DataFrame([{"model": "neural_cde", "split": "univariate", "paper_d": 1.35, "power": 0.9,
                            "power_independent": 0.5, "study_sets": 4, "study_significant": 0,
                            "expected_significant": 3.6, "ceiling_sets": ["uea/D"], "significant_sets": [],
                            "sets": sets, "power_student": 0.4, "significant_sets_student": []}],
                          columns=agreement.POWER_COLUMNS)
    count = agreement.count_summary(powers, "paired", 0.7)
    assert count["free_sets"] == 3 and count["free_chance"] == pytest.approx(0.1 ** 3, rel=1e-12)
    assert count["verdict"] == "differs"
    assert count["student"] == pytest.approx({"free_significant": 0, "free_expected": 1.2,
                                              "free_chance": 0.6 ** 3, "verdict": "inconclusive"})
    cells = pd.DataFrame(columns=agreement.CELL_COLUMNS)
    note = agreement.agreement_sections(pd.DataFrame(), cells, powers, count)[1].notes[0]
    assert note.endswith("Under the paper's unpaired Student t on the same arms: 0 of the 3 sets not near ceiling "
                         "significant, expected 1.20, chance of at most 0: 0.216, inconclusive (the verdict turns on "
                         "the test).")
    # one set significant under Student's t only: its count and chance follow its own hits
    student = agreement.count_summary(powers.assign(significant_sets_student=[["uea/A"]]), "paired", 0.7)["student"]
    assert student["free_significant"] == 1
    assert student["free_chance"] == pytest.approx(0.6 ** 3 + 3 * 0.4 * 0.6 ** 2, rel=1e-12)
    assert agreement.count_summary(powers.assign(power_student=0.9), "student", 0.7)["student"] is None


def test_a_row_whose_sets_are_all_near_ceiling_is_inconclusive_ceiling():
    """8 univariate sets at none 0.97 and no gain: the Welch test alone would differ from the paper's +0.098, but
    every set leaves 0.03 < 0.098 to 1, so the row counts 8 of 8 near ceiling and reads 'inconclusive (ceiling)'."""
    gains = [0.004 * k for k in (-2, -1, 0, 1, 2, -1.5, 1.5, 0)]
    runs = _improvement_study("neural_cde", gains, base=0.97)
    channels = dict.fromkeys(sorted(set(runs["dataset"])), 1)
    sections, found = paper.paper_comparison(runs, _primary(runs), channels)
    across = {r["split"]: r for r in found["paper_comparison"]["agreement_across_datasets"]}
    assert across["univariate"]["p_difference_holm"] < 0.05
    assert across["univariate"]["verdict"] == across["univariate"]["verdict_table"] == agreement.CEILING
    assert across["univariate"]["ceiling_sets"] == sorted(set(runs["dataset"]))
    section = next(s for s in sections if s.title == "Agreement with the paper across datasets")
    column = section.header.index("near ceiling")
    row = next(r for r in section.rows if r[1].text == "univariate (Table 10)")
    assert row[column].text == "8 of 8" and row[-1].text == agreement.CEILING
    assert "Verdicts: agrees 0 of 3, differs 0 of 3, inconclusive 3 of 3 (2 of them at ceiling)" in section.notes
    # without the ceiling sets the rows have no set left
    free = {r["split"]: r for r in found["paper_comparison"]["agreement_without_ceiling"]}
    assert free["univariate"]["study_n_datasets"] == 0
    # the same sets with room to 1 (none at 0.5): none of them near ceiling, and no row named
    runs = _improvement_study("neural_cde", gains, base=0.5)
    sections, found = paper.paper_comparison(runs, _primary(runs), channels)
    section = next(s for s in sections if s.title == "Agreement with the paper across datasets")
    assert next(r for r in section.rows if r[1].text == "univariate (Table 10)")[column].text == "0 of 8"
    assert next(n for n in section.notes if n.startswith("Near ceiling:")).endswith(
        "No row that differs is such a row.")
    assert next(r for r in section.rows if r[1].text == "univariate (Table 10)")[-1].text == "differs"


def test_a_verdict_that_turns_on_the_holm_family_is_named():
    """8 univariate sets around +0.05: the univariate row's p (0.034) is below 0.05 over Table 10's one row but
    not after Holm with Table 9's row of the same sets; both verdicts are kept and the note names the row."""
    runs = _improvement_study("neural_cde", [0.05 + 0.01 * k for k in (-2, -1, 0, 1, 2, -1.5, 1.5, 0)])
    sections, found = paper.paper_comparison(runs, _primary(runs), dict.fromkeys(sorted(set(runs["dataset"])), 1))
    rows = {r["split"]: r for r in found["paper_comparison"]["agreement_across_datasets"]}
    uni, tested = rows["univariate"], [r["p_difference"] for r in rows.values() if not math.isnan(r["p_difference"])]
    assert uni["p_difference_holm"] == pytest.approx(
        multipletests(tested, method="holm")[1][tested.index(uni["p_difference"])], rel=1e-12)
    assert uni["p_difference_holm_table"] == uni["p_difference"] < 0.05 < uni["p_difference_holm"]
    assert (uni["verdict"], uni["verdict_table"]) == ("inconclusive", "differs")
    section = next(s for s in sections if s.title == "Agreement with the paper across datasets")
    assert "Holm family (a choice)" in section.caption
    note = next(n for n in section.notes if n.startswith("Holm family:"))
    assert "the verdict turns on the choice for neural_cde univariate: p 0.0337" in note
