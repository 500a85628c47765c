"""architectures.md: a cell with model.* settings is tested against none of the same settings, never the tuned none."""
import pandas as pd
import pytest
from ndebench.platform.report.architectures import architecture, matched_comparisons, matched_section
from scipy import stats

NONE16, CD16 = "none[model.hidden_size=16]", "continuum_dropout[p=0.1,model.hidden_size=16]"
NONE64, CD64 = "none[model.hidden_size=64]", "continuum_dropout[p=0.1,model.hidden_size=64]"
VALUES = {
    NONE16: [0.50, 0.60, 0.70], CD16: [0.70, 0.80, 0.90],
    NONE64: [0.80, 0.82, 0.84], CD64: [0.79, 0.80, 0.84],
    "none": [0.10, 0.10, 0.20], "continuum_dropout": [0.9, 0.9, 0.9],  # the tuned cells: no model.* settings
    "continuum_dropout[p=0.1,model.hidden_size=128]": [0.3, 0.4, 0.5],  # no none at 128: nothing to compare with
}


def _runs() -> pd.DataFrame:
    rows = [{"model": "neural_cde", "dataset": "uea/GunPoint", "regularizer": label, "seed": seed, "status": "ok",
             "test_accuracy": value} for label, values in VALUES.items() for seed, value in enumerate(values)]
    rows.append({**rows[0], "seed": 3, "status": "error", "test_accuracy": 0.0})  # not counted
    return pd.DataFrame(rows)


def test_the_settings_of_a_label():
    assert architecture(CD16) == "model.hidden_size=16"
    assert architecture("none[model.hidden_size=16,model.num_layers=2]") == "model.hidden_size=16,model.num_layers=2"
    assert architecture("continuum_dropout[p=0.1,m=5]") == architecture("none") == ""


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
    found = matched_comparisons(runs[~runs["regularizer"].str.startswith("none[")], {"uea/GunPoint": "test_accuracy"},
                                "student", 0.05)
    assert found.empty and matched_section(found, 0.05) is None
