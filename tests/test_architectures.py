"""architectures.md: a cell with model.* settings is tested against none of the same settings, never the tuned none."""
import pandas as pd
import pytest
from ndebench.platform.common.labels import cell_label
from ndebench.platform.report.architectures import architecture, matched_comparisons, matched_section
from ndebench.platform.report.render.tables import table_rows
from scipy import stats

NONE16, CD16 = "none[model.hidden_size=16]", "continuum_dropout[p=0.1,model.hidden_size=16]"
NONE64, CD64 = "none[model.hidden_size=64]", "continuum_dropout[p=0.1,model.hidden_size=64]"
VALUES = {
    NONE16: [0.50, 0.60, 0.70], CD16: [0.70, 0.80, 0.90],
    NONE64: [0.80, 0.82, 0.84], CD64: [0.79, 0.80, 0.84],
    "none": [0.10, 0.10, 0.20], "continuum_dropout": [0.9, 0.9, 0.9],  # the tuned cells: no model.* settings
    "continuum_dropout[p=0.1,model.hidden_size=128]": [0.3, 0.4, 0.5],  # no none at 128: nothing to compare with
}
FIXED = {NONE16: {"model.hidden_size": 16}, CD16: {"p": 0.1, "model.hidden_size": 16},
         NONE64: {"model.hidden_size": 64}, CD64: {"p": 0.1, "model.hidden_size": 64}, "none": {},
         "continuum_dropout": {},
         "continuum_dropout[p=0.1,model.hidden_size=128]": {"p": 0.1, "model.hidden_size": 128}}


def _runs() -> pd.DataFrame:
    """A study frame as the record reads it: each cell's regularizer, the values it fixes and its label."""
    rows = [{"model": "neural_cde", "dataset": "uea/GunPoint", "regularizer": label.split("[")[0],
             "variant": label if FIXED[label] else "", "fixed": FIXED[label],
             "label": cell_label(label.split("[")[0], FIXED[label]), "seed": seed, "status": "ok",
             "test_accuracy": value} for label, values in VALUES.items() for seed, value in enumerate(values)]
    rows.append({**rows[0], "seed": 3, "status": "error", "test_accuracy": 0.0})  # not counted
    runs = table_rows(pd.DataFrame(rows))
    assert list(runs["label"].drop_duplicates()) == list(VALUES)  # the record names each cell as the plan did
    return runs


def test_the_settings_of_a_cell():
    assert architecture(FIXED[CD16]) == "model.hidden_size=16"
    assert architecture({"model.hidden_size": 16, "model.num_layers": 2}) == "model.hidden_size=16,model.num_layers=2"
    assert architecture({"p": 0.1, "m": 5}) == architecture({}) == ""


def test_each_cell_is_tested_against_none_of_its_own_settings():
    found = matched_comparisons(_runs(), {"uea/GunPoint": "test_accuracy"}, "student", 0.05)
    assert list(found["regularizer"]) == [CD16, CD64] and list(found["baseline"]) == [NONE16, NONE64]
    assert list(found["architecture"]) == ["model.hidden_size=16", "model.hidden_size=64"]
    p = []
    for cell, base in ((CD16, NONE16), (CD64, NONE64)):
        row = found[found["regularizer"] == cell].iloc[0]
        expected = stats.ttest_ind(VALUES[cell], VALUES[base])
        assert row["difference"] == pytest.approx(sum(VALUES[cell]) / 3 - sum(VALUES[base]) / 3, abs=1e-12)
        assert row["p"] == pytest.approx(expected.pvalue, rel=1e-12) and row["n_baseline"] == 3
        p.append(expected.pvalue)
    low, high = sorted(p)  # Holm over the two comparisons
    assert sorted(found["p_holm_all"]) == pytest.approx([min(1, 2 * low), min(1, max(2 * low, high))], rel=1e-12)
    section = matched_section(found, 0.05)
    # hidden 16: t = 0.2 / (0.1 * sqrt(2/3)) = 2.449, df 4, p = 0.070: not below 0.05
    assert "0 of 2 better, 0 of 2 worse; 0 of 2 below 0.05 after Holm" in section.caption
    assert [row[3].text for row in section.rows] == [CD16, CD64]


def test_no_pair_no_section():
    runs = _runs()
    variants_of_none = (runs["regularizer"] == "none") & (runs["variant"] != "")
    found = matched_comparisons(runs[~variants_of_none], {"uea/GunPoint": "test_accuracy"}, "student", 0.05)
    assert found.empty and matched_section(found, 0.05) is None
