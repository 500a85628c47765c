"""A cell's name is made by one grammar from the values its cell fixes: the plan's variant labels, the record's, the
report's rows; a run that predates the ``fixed`` param is named by looking its tag up among the names its own
recorded values make."""
import re

import pytest
from ndebench.platform import api
from ndebench.platform.common.labels import cell_label, variant_label
from ndebench.platform.record.runs import fixed_values
from ndebench.platform.spec.config import config_hash
from ndebench.platform.spec.plan import cell_template, sweep_cells


def test_a_scope_time_run_carries_the_extension_in_its_name_once():
    assert cell_label("continuum_dropout", {}, "time") == "continuum_dropout[scope=time]"
    assert cell_label("continuum_dropout", {"p": 0.1, "m": 5}, "time") == "continuum_dropout[p=0.1,m=5,scope=time]"
    assert cell_label("continuum_dropout", {"scope": "time"}, "time") == "continuum_dropout[scope=time]"
    assert cell_label("continuum_dropout", {}, "increment") == "continuum_dropout"


def test_the_plan_names_its_variant_cells_with_the_grammar_and_records_what_each_fixes():
    spec = api.load("tune_configs/quickstart.yaml",
                    ["variants={none: {model.hidden_size: [16, 32]}, continuum_dropout: {p: [0.1], m: [5]}}"])
    variants = [c for c in sweep_cells(spec) if c.variant]
    assert {c.name for c in variants} == {"none[model.hidden_size=16]", "none[model.hidden_size=32]",
                                          "continuum_dropout[p=0.1,m=5]"}
    for cell in variants:
        config = cell_template(spec, cell)
        assert config["fixed"] == dict(cell.fixed)
        # The param as the store returns it names the cell as the plan did, without reading the label.
        params = {k: str(v) for k, v in config.items()}
        recorded = fixed_values(params, cell.regularizer, config["variant"])
        assert recorded == dict(cell.fixed) and cell_label(cell.regularizer, recorded) == cell.name
        # Naming the values changes no hash: a study recorded before the key keeps its runs on --resume.
        assert config_hash(config) == config_hash({k: v for k, v in config.items() if k != "fixed"})


def _legacy(config: dict) -> dict[str, str]:
    """A trial config's params as a run recorded before the ``fixed`` param holds them (strings, no ``fixed``)."""
    return {k: str(v) for k, v in config.items() if k != "fixed"}


def test_a_run_recorded_before_the_fixed_param_is_named_by_its_own_recorded_values():
    spec = api.load("tune_configs/quickstart.yaml",
                    ["variants={none: {model.hidden_size: [16, 32], n_mc: [5]},"
                     " continuum_dropout: {p: [0.1, 0.15, 0.5], m: [5, 50]}}"])
    variants = [c for c in sweep_cells(spec) if c.variant]
    assert len(variants) == (2 + 3 * 2) * len(spec.models) * len(spec.datasets)
    for cell in variants:
        config = cell_template(spec, cell)
        found = fixed_values(_legacy(config), cell.regularizer, cell.variant)
        # The values themselves, in plan order and of their types (0.1 a float, 5 an int), not their texts.
        assert list(found.items()) == list(cell.fixed)
        assert [type(v) for v in found.values()] == [type(v) for _, v in cell.fixed]
        assert cell_label(cell.regularizer, found, "time") == variant_label(cell.regularizer,
                                                                               {**dict(cell.fixed), "scope": "time"})
    assert fixed_values({}, "none", "") == {} and fixed_values({"fixed": "{'n_mc': 5}"}, "none", "none[n_mc=5]") == \
        {"n_mc": 5}


def test_a_variant_tag_its_run_recorded_values_do_not_make_is_refused_by_name():
    spec = api.load("tune_configs/quickstart.yaml", ["variants={continuum_dropout: {p: [0.1], m: [5]}}"])
    cell = next(c for c in sweep_cells(spec) if c.variant)
    params = _legacy(cell_template(spec, cell))
    # A name its values make in another order, or with fewer of them, is that cell's: its values in the name's order.
    assert list(fixed_values(params, "continuum_dropout", "continuum_dropout[m=5,p=0.1]").items()) == [("m", 5),
                                                                                                  ("p", 0.1)]
    assert fixed_values(params, "continuum_dropout", "continuum_dropout[p=0.1]") == {"p": 0.1}
    for tag in ("continuum_dropout[p=0.3,m=5]", "continuum_dropout[p=0.1,m=50]", "continuum_dropout[p=0.1,m=5,m=5]",
                "continuum_dropout[p=0.1,m=5", "none[p=0.1,m=5]"):
        with pytest.raises(ValueError, match=re.escape(repr(tag))):
            fixed_values(params, "continuum_dropout", tag)


def test_a_variant_cell_run_is_named_by_its_own_fixed_else_by_its_trials_else_left_out_until_they_start(uri):
    from fakes import record_trial
    from ndebench.platform.record import tracking
    from ndebench.platform.record.runs import runs_frame

    parent = ""
    identity = {"model": "neural_cde", "dataset": "synthetic", "regularizer": "none"}
    # Today's cell run carries the values its cell fixes; an older one carries none, and names itself by its
    # trials' (a legacy trial: its own recorded regularizer.n_mc); one whose trials have not started is left out.
    tracking.cell_run(uri, "cells", parent, "evaluate", "c-new", identity | {"variant": "none[n_mc=5]"},
                      {"fixed": {"n_mc": 5}})
    tracking.cell_run(uri, "cells", parent, "evaluate", "c-old", identity | {"variant": "none[n_mc=3]"})
    tracking.cell_run(uri, "cells", parent, "evaluate", "c-idle", identity | {"variant": "none[n_mc=7]"})
    record_trial(uri, "cells", "none", 0, variant="none[n_mc=3]", params={"regularizer.n_mc": 3},
                 tags={"cell": "c-old"}, metrics={"test_accuracy": 0.5})
    frame = runs_frame(uri, "cells", histories=False)
    named = {(row.variant, row.seed): (row.fixed, row.label) for row in frame.itertuples()}
    assert named == {("none[n_mc=5]", -1): ({"n_mc": 5}, "none[n_mc=5]"),
                     ("none[n_mc=3]", -1): ({"n_mc": 3}, "none[n_mc=3]"),
                     ("none[n_mc=3]", 0): ({"n_mc": 3}, "none[n_mc=3]")}
