"""A cell's name is made and read by one grammar: the plan's variant labels, the record's, the report's rows."""
import pytest
from ndebench.platform import api
from ndebench.platform.common.labels import cell_label, is_extension, parse_label, variant_label
from ndebench.platform.spec.plan import sweep_cells


@pytest.mark.parametrize("label", ["none", "none[n_mc=5]", "continuum_dropout[p=0.1,m=5,scope=time]",
                                   "none[model.hidden_size=16,model.num_layers=2]"])
def test_a_name_reads_back_to_what_made_it(label):
    name, fixed = parse_label(label)
    assert variant_label(name, fixed) == label


def test_the_parser_reads_each_setting_and_refuses_a_name_outside_the_grammar():
    assert parse_label("continuum_dropout[p=0.3,m=50]") == ("continuum_dropout", {"p": "0.3", "m": "50"})
    for bad in ("[p=1]", "none[p=1", "none[p]"):
        with pytest.raises(ValueError, match="regularizer\\[key=value"):
            parse_label(bad)


def test_a_scope_time_run_carries_the_extension_in_its_name_once():
    assert cell_label("continuum_dropout", "", "time") == "continuum_dropout[scope=time]"
    assert cell_label("continuum_dropout", "continuum_dropout[p=0.1,m=5]", "time") == \
        "continuum_dropout[p=0.1,m=5,scope=time]"
    assert cell_label("continuum_dropout", "continuum_dropout[scope=time]", "time") == "continuum_dropout[scope=time]"
    assert cell_label("continuum_dropout", None, "increment") == "continuum_dropout"
    assert is_extension("continuum_dropout[p=0.1,scope=time]") and not is_extension("continuum_dropout[p=0.1]")


def test_the_plan_names_its_variant_cells_with_the_grammar():
    spec = api.load("tune_configs/quickstart.yaml", ["variants={none: {model.hidden_size: [16, 32]}}"])
    named = {c.name for c in sweep_cells(spec) if c.variant}
    assert named == {"none[model.hidden_size=16]", "none[model.hidden_size=32]"}
    assert all(variant_label(*parse_label(n)) == n for n in named)
