"""``base.scope``: the base stage shared by every regularizer (the paper's frozen base) or searched per regularizer
with it switched on at its grid's middle point; planned without Ray."""
import copy

import pytest
from ndebench.platform import api
from ndebench.platform.spec.config import ConfigError, parse_spec
from ndebench.platform.spec.plan import base_key, middle_point, plan_stages, sweep_cells, tune_stage
from ndebench.platform.spec.sweepspec import Space

RAW = {
    "study": "b",
    "models": ["neural_cde"],
    "datasets": ["synthetic"],
    "regularizers": {"none": {}, "continuum_dropout": {"p": [0.1, 0.2, 0.3, 0.4, 0.5], "m": [5, 10, 50, 100]},
                     "steer": {"b": {"uniform": [0.1, 0.5]}}},
    "model": {"hidden_size": [16, 32]},
    "training": {"epochs": 2, "lr": [0.01, 0.005]},
    "tune": {"sampler": "random", "num_samples": 3},
}


def _spec(**base):
    raw = copy.deepcopy(RAW)
    raw["base"] = base
    return parse_spec(raw)


def test_shared_is_the_default_and_searches_none_once_per_pair():
    spec = _spec()
    assert spec.base_scope == "shared"
    base, _ = plan_stages(spec)
    assert [c.cell.regularizer for c in base.cells] == ["none"]
    assert {base_key(spec, c) for c in sweep_cells(spec)} == {"neural_cde__synthetic__none"}


def test_per_regularizer_searches_the_base_with_each_regularizer_on_at_its_middle_point():
    spec = _spec(scope="per_regularizer")
    base, tune = plan_stages(spec)
    by = {c.cell.regularizer: c for c in base.cells}
    assert sorted(by) == ["continuum_dropout", "none", "steer"]
    for search in by.values():
        assert sorted(search.space) == ["model.hidden_size", "training.lr"] and search.budget == 3
    assert (by["continuum_dropout"].template["regularizer.p"], by["continuum_dropout"].template["regularizer.m"]) \
        == (0.3, 10)
    assert by["steer"].template["regularizer.b"] == pytest.approx(0.3)
    # each regularizer's own search then runs on its own base values
    chosen = {f"neural_cde__synthetic__{r}": {"model.hidden_size": h, "training.lr": 0.01}
              for r, h in (("none", 16), ("continuum_dropout", 32), ("steer", 16))}
    frozen = {c.cell.regularizer: c for c in tune_stage(spec, chosen).cells}
    assert frozen["continuum_dropout"].template["model.hidden_size"] == 32
    assert frozen["none"].template["model.hidden_size"] == 16
    assert sorted(frozen["continuum_dropout"].space) == ["regularizer.m", "regularizer.p"]


def test_the_middle_point_of_each_kind_of_space():
    assert middle_point(Space("choice", (1, 2, 3))) == 2 and middle_point(Space("choice", (5, 10, 50, 100))) == 10
    assert middle_point(Space("loguniform", (1e-4, 1e-2))) == pytest.approx(1e-3)
    assert middle_point(Space("uniform", (0.0, 1.0))) == 0.5 and middle_point(Space("randint", (1, 10))) == 5


def test_a_bad_scope_is_refused_with_the_valid_ones():
    with pytest.raises(ConfigError, match=r"base.scope='per_model'; valid: shared, per_regularizer"):
        _spec(scope="per_model")


def test_the_hidden_size_config_validates_and_plans_its_variants_and_both_kinds_of_sets():
    from ndebench.platform.report.summary import channel_count

    spec = api.load("tune_configs/cd_ncde_hidden_sizes.yaml")
    assert spec.models == ("neural_cde",) and spec.base_scope == "per_regularizer"
    assert {channel_count(d) == 1 for d in spec.datasets} == {True, False}
    cells = [c for c in sweep_cells(spec) if c.variant and c.dataset == "uea/GunPoint"]
    hidden = {dict(c.fixed)["model.hidden_size"] for c in cells}
    assert hidden == {16, 32, 64, 128} and len(cells) == 4 + 2 * 2 * 4
    assert {c.regularizer for c in cells} == {"none", "continuum_dropout"}
    base, tune = plan_stages(spec)
    assert sum(c.budget for c in base.cells) == 2 * 8 * 5 and sum(c.budget for c in tune.cells) == 20 * 5


def test_a_variant_fixes_a_model_value_only_of_the_model_section():
    raw = copy.deepcopy(RAW)
    raw["variants"] = {"continuum_dropout": {"p": [0.1], "m": [5], "model.width": [3]}}
    with pytest.raises(ConfigError, match=r"unknown key\(s\) \['model.width'\] in variants.continuum_dropout"):
        parse_spec(raw)


def test_the_report_says_which_protocol_produced_the_rows(tmp_path):
    import json

    import pandas as pd
    from ndebench.platform.report.report import build_report
    from ndebench.platform.report.study import protocol_note

    assert protocol_note({"protocol": "paper"})["base_scope"] == "shared"  # recorded before base.scope existed
    note = protocol_note({"protocol": "paper", "base.scope": "per_regularizer"})
    assert "ndebench's extension" in note["rows"] and note["base_scope"] == "per_regularizer"
    assert "together" in protocol_note({"protocol": "joint", "base.scope": "per_regularizer"})["rows"]
    runs = pd.DataFrame([{"study": "s", "model": "neural_cde", "dataset": "uea/GunPoint", "regularizer": r,
                          "seed": s, "status": "ok", "test_accuracy": 0.8 + 0.01 * s} for r in ("none", "steer")
                         for s in range(3)])
    files = build_report(runs, tmp_path, "s", figures="none", protocol=note)
    assert note["rows"] in files.table_md.read_text()
    assert json.loads(files.summary_json.read_text())["protocol"] == note


def test_under_the_paper_protocol_the_report_pairs_by_seed_unless_told(tmp_path):
    import json

    import numpy as np
    import pandas as pd
    from ndebench.platform.report.study import PAIRED_BY_DESIGN, ReportSettings, design_test, protocol_note, report
    from scipy import stats

    paper, joint = protocol_note({"protocol": "paper"}), protocol_note({"protocol": "joint"})
    assert design_test(None, paper) == ("paired", paper | {"tests": PAIRED_BY_DESIGN})
    assert design_test("student", paper) == ("student", paper)
    assert design_test(None, joint) == ("student", joint) and design_test(None, None) == ("student", None)
    # seed s moves both cells alike; steer is 0.004 better on every seed but seed 4, which none lacks
    shift = np.array([0.0, 0.05, -0.03, 0.08, 0.02])
    rows = [{"study": "s", "model": "neural_cde", "dataset": "uea/GunPoint", "regularizer": r, "seed": s,
             "status": "ok", "test_accuracy": 0.8 + shift[s] + (0.004 + 0.001 * (s % 2) if r == "steer" else 0.0)}
            for r in ("none", "steer") for s in range(5) if (r, s) != ("none", 4)]
    runs = pd.DataFrame(rows)
    written = report(runs, tmp_path, "s", ReportSettings(figures="none", protocol=paper))
    [comparison] = json.loads(written.files.summary_json.read_text())["tables"][0]["comparisons"]
    steer = runs[runs["regularizer"] == "steer"].sort_values("seed")["test_accuracy"].to_numpy()[:4]
    none = runs[runs["regularizer"] == "none"].sort_values("seed")["test_accuracy"].to_numpy()
    assert comparison["p"] == pytest.approx(stats.ttest_rel(steer, none).pvalue, rel=1e-9)
    assert comparison["p"] < 0.001 < stats.ttest_ind(steer, none).pvalue
    assert PAIRED_BY_DESIGN in written.markdown and "ttest_rel" in written.markdown
    unpaired = report(runs, tmp_path / "student", "s", ReportSettings(figures="none", protocol=paper, test="student"))
    [comparison] = json.loads(unpaired.files.summary_json.read_text())["tables"][0]["comparisons"]
    assert comparison["p"] == pytest.approx(stats.ttest_ind(runs[runs["regularizer"] == "steer"]["test_accuracy"],
                                                            none).pvalue, rel=1e-9)
    assert PAIRED_BY_DESIGN not in unpaired.markdown
