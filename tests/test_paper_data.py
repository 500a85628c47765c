"""The paper's numbers as data: a few values against the paper's LaTeX source lines, and internal consistency."""
import re

import numpy as np
import pandas as pd
import pytest
from ndebench.platform.report.paper.data import PAPER_K, paper_cells, paper_datasets, paper_summary

# Lines copied verbatim from the paper's .tex (Tables 4, 9, 10, 11, 12, 16a).
TEX = {
    (4, "neural_lsde", "continuum_dropout"):
        r"& O & \phantom{$^{*}$}\textbf{0.932 (0.000)}$^{*}$    \\",
    (9, "neural_cde"): r"\textbf{Neural CDE}   & 0.709 (0.061)     & 0.781 (0.048)     & 0.072  ± 0.012       & "
                       r"13.39  ± 2.70      \\",
    (10, "neural_cde"): r"\textbf{Neural CDE}   & 0.628 (0.079)     & 0.725 (0.065)     & 0.098  ± 0.020       & "
                        r"19.33  ± 4.63      \\",
    (11, "neural_lsde"): r"\textbf{Neural LSDE}  & 0.798 (0.031)     & 0.800 (0.032)     & 0.002  ± 0.013       & "
                         r"0.27  ± 1.88       \\",
    (12, "p=0.4"): r"0.4 & \textcolor{red}{0.914 (0.005)}  & 0.931 (0.003) & 0.934 (0.003) & 0.933 (0.003) & "
                   r"0.931 (0.003) \\",
    (16, "rate=0.001"): r"$10^{-3}$ & 0.606 (0.043) & 0.862 (0.014)  & 0.850 (0.036) &  \textbf{0.609 (0.031)}  \\",
}
NUMBER = re.compile(r"\d+\.\d+")
UEA4 = ["uea/SmoothSubspace", "uea/ArticularyWordRecognition", "uea/ERing", "uea/RacketSports"]


def _cell(**where) -> pd.DataFrame:
    cells = paper_cells()
    for key, value in where.items():
        cells = cells[cells[key] == value]
    return cells


def test_values_match_the_tex_source_lines():
    [row] = _cell(table=4, model="neural_lsde", regularizer="continuum_dropout").itertuples()
    assert (row.mean, row.std, row.marker) == (0.932, 0.0, "*")
    summary = paper_summary().set_index(["table", "model"])
    columns = ["baseline_mean", "baseline_std", "proposed_mean", "proposed_std", "improvement", "improvement_se",
               "pct_change", "pct_se"]
    for key in [(9, "neural_cde"), (10, "neural_cde"), (11, "neural_lsde")]:
        assert list(summary.loc[key, columns]) == [float(x) for x in NUMBER.findall(TEX[key])]
    sensitivity = _cell(table=12)
    row = [float(x) for x in NUMBER.findall(TEX[12, "p=0.4"])][1:]
    assert [sensitivity.set_index("setting").loc[f"p=0.4,m={m}", c] for m in (3, 5, 10, 50, 100)
            for c in ("mean", "std")] == row
    jump = _cell(table=16, regularizer="jump_diffusion", setting="rate=0.001").set_index("dataset")
    assert [jump.loc[d, c] for d in UEA4 for c in ("mean", "std")] == [float(x) for x in
                                                                       NUMBER.findall(TEX[16, "rate=0.001"])]


def test_every_table_has_its_cells_and_each_value_its_table_metric_and_n():
    counts = paper_cells().groupby("table").size().to_dict()
    # rows x columns of each table: e.g. Table 2 is 8 methods x 4 sets, Table 16 two panels of 10 rates x 4 sets
    assert counts == {2: 32, 3: 32, 4: 10, 5: 28, 6: 24, 7: 10, 12: 25, 13: 30, 14: 18, 15: 65, 16: 80, 17: 80,
                      18: 4}
    cells = paper_cells()
    assert set(cells["n"]) == {5} and cells["metric"].ne("").all() and cells["std"].ge(0).all()
    assert set(paper_summary().groupby("split")["n_datasets"].first().items()) == {
        ("all", 30), ("univariate", 15), ("multivariate", 15)}
    datasets = paper_datasets()
    assert datasets.groupby("split").size().to_dict() == {"multivariate": 15, "univariate": 15}
    assert datasets.set_index("dataset").loc["uea/JapaneseVowels", "channels"] == 12
    assert PAPER_K == 20


def test_the_summary_rows_are_consistent():
    summary = paper_summary()
    # improvement = proposed - baseline, each rounded to 0.001
    assert np.abs(summary["proposed_mean"] - summary["baseline_mean"] - summary["improvement"]).max() <= 0.0015 + 1e-9
    assert (np.sign(summary["pct_change"]) == np.sign(summary["improvement"])).all()
    # 15 + 15 sets: each all-sets value is the average of the two halves, up to rounding
    by = summary.set_index(["split", "model"])
    for column, step in [("baseline_mean", 1e-3), ("baseline_std", 1e-3), ("proposed_mean", 1e-3),
                         ("proposed_std", 1e-3), ("improvement", 1e-3), ("pct_change", 1e-2)]:
        half = (by.loc["univariate", column] + by.loc["multivariate", column]) / 2
        assert np.abs(by.loc["all", column] - half).max() <= step + 1e-9, column


def test_the_main_tables_repeat_the_appendix_tables_where_they_share_cells():
    table2 = _cell(table=2).set_index(["regularizer", "dataset"])
    for regularizer in ("jump_diffusion", "jump_diffusion_ttn"):
        rates = _cell(table=16, regularizer=regularizer)
        best = rates.loc[rates.groupby("dataset")["mean"].idxmax()].set_index("dataset")
        for dataset in UEA4:
            assert table2.loc[(regularizer, dataset), "mean"] == best.loc[dataset, "mean"]
    baseline = _cell(table=16, regularizer="none").drop_duplicates("dataset").set_index("dataset")
    assert [table2.loc[("none", d), "mean"] for d in UEA4] == list(baseline.loc[UEA4, "mean"])
    speech = _cell(table=4).set_index(["model", "regularizer"])["mean"]
    mc5 = _cell(table=13, setting="n_mc=5").set_index("model")["mean"]
    assert all(speech[(m, "continuum_dropout")] == mc5[m] for m in mc5.index)
    assert _cell(table=18, regularizer="none")["mean"].item() == speech[("neural_cde", "none")]


@pytest.mark.parametrize("table", [14, 17])
def test_percent_tables_are_marked_as_percent(table):
    cells = _cell(table=table)
    assert set(cells["unit"]) == {"percent"} and cells["mean"].between(50, 100).all()


# --- selection measured on the paper's own numbers (platform/report/paper/evidence.py) ---

def test_the_chance_gain_at_the_papers_spread_exceeds_only_the_neural_cde_rows():
    from ndebench.platform.report.paper.evidence import paper_chance_gains
    from ndebench.platform.report.statistics.agreement import expected_max

    chance = paper_chance_gains()
    assert len(chance) == 18
    factor = expected_max(20) / np.sqrt(5)
    assert factor == pytest.approx(0.835, abs=5e-4)
    assert chance["chance_gain"].to_numpy() == pytest.approx(factor * paper_summary()["baseline_std"].to_numpy())
    above = chance[~chance["within_chance"]]
    assert set(above["model"]) == {"neural_cde"} and len(above) == 3
    studied = chance[chance["model"].isin(["neural_cde", "neural_ode", "neural_lnsde"]) & (chance["split"] != "all")]
    assert int(studied["within_chance"].sum()) == 4  # 4 of 6, not 3 of 6
    # Table 10, Neural LNSDE: +0.053 against 0.835 x 0.065 = 0.0543
    row = chance[(chance["model"] == "neural_lnsde") & (chance["split"] == "univariate")].iloc[0]
    assert row["chance_gain"] == pytest.approx(factor * 0.065) and row["within_chance"]


def test_every_reported_jump_diffusion_and_table_4_cell_is_its_grids_maximum():
    from ndebench.platform.report.paper.evidence import column_maxima, per_method

    maxima = column_maxima()
    assert len(maxima) == 17 and maxima["at_max"].all()
    methods = per_method(maxima).set_index("regularizer")
    assert methods.loc["jump_diffusion", "k"] == methods.loc["jump_diffusion_ttn", "k"] == 9
    assert methods.loc["jump_diffusion", "cells"] == 8 and methods.loc["continuum_dropout", "k"] == 25
    # Table 16a's SmoothSubspace column (the .tex line above is the rate 1e-3 row: 0.606): max 0.617 at 1e-4
    row = maxima[(maxima["table"] == 2) & (maxima["dataset"] == "uea/SmoothSubspace")
                 & (maxima["regularizer"] == "jump_diffusion")].iloc[0]
    assert (row["reported"], row["grid_max"], row["grid_min"]) == (0.617, 0.617, 0.589)
    # Table 17 is in percent: CIFAR-100 jump diffusion 76.083 at rate 1e-4 rounds to Table 3's 0.761
    row = maxima[(maxima["table"] == 3) & (maxima["dataset"] == "cifar100")
                 & (maxima["regularizer"] == "jump_diffusion")].iloc[0]
    assert row["grid_max"] == pytest.approx(0.76083) and row["reported"] == 0.761


def test_a_reported_cell_below_its_grids_maximum_is_not_counted(monkeypatch):
    from ndebench.platform.report.paper import evidence

    cells = paper_cells()
    lower = (cells["table"] == 2) & (cells["dataset"] == "uea/ERing") & (cells["regularizer"] == "jump_diffusion")
    monkeypatch.setattr(evidence, "paper_cells", lambda: cells.assign(mean=cells["mean"].where(~lower, 0.850)))
    maxima = evidence.column_maxima()
    assert int(maxima["at_max"].sum()) == 16
    assert maxima.loc[~maxima["at_max"], "dataset"].tolist() == ["uea/ERing"]
