"""``ndebench report --paper``: a study of known values beside the paper's numbers, every difference and interval
flag checked against an independent computation."""
import json
import math

import numpy as np
import pandas as pd
import pytest
from ndebench.platform.report.analyses import write_analyses
from ndebench.platform.report.paper import comparison as paper
from ndebench.platform.report.paper.data import paper_cells
from ndebench.platform.report.report import build_report
from ndebench.platform.report.statistics import selection
from scipy import stats as sps

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
    rows = [{"study": "s", "model": m, "dataset": d, "regularizer": r, "variant": r if "[" in r else "", "seed": s,
             "status": "ok", "metric": "accuracy", "test_accuracy": mean + OFFSETS[s] * H}
            for (m, d, r), mean in MEANS.items() for s in range(5)]
    return pd.DataFrame(rows)


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
    assert len(files.paper) == 2
    runs = _study()
    write_analyses(runs.assign(run_id=range(len(runs)), p=np.nan, m=np.nan, rate=np.nan), runs, files, "s",
                   alpha=0.05)
    page = (files.directory / "report.html").read_text()
    assert "The paper&#x27;s cells beside the study" in page
    assert "Across datasets beside the paper&#x27;s Tables" in page
    plain = build_report(_study(), tmp_path / "plain", "s", figures="none")
    assert "paper_comparison" not in json.loads(plain.summary_json.read_text()) and not plain.paper


def test_the_report_command_takes_paper():
    from ndebench.platform.cli.arguments import build_parser

    args = build_parser().parse_args(["report", "--study", "s", "--paper"])
    assert args.paper is True and build_parser().parse_args(["report", "--study", "s"]).paper is False
