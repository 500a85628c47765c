"""A cell's name is made by one grammar from the values its cell fixes: the plan's variant labels, the record's, the
report's rows; the parser reads only records that predate the ``fixed`` param."""
import pytest
from ndebench.platform import api
from ndebench.platform.common.labels import cell_label, parse_label, variant_label
from ndebench.platform.record.runs import fixed_values, parse_param
from ndebench.platform.spec.config import config_hash
from ndebench.platform.spec.plan import cell_template, sweep_cells


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
        recorded = fixed_values(parse_param(str(config["fixed"])), config["variant"])
        assert recorded == dict(cell.fixed) and cell_label(cell.regularizer, recorded) == cell.name
        # Naming the values changes no hash: a study recorded before the key keeps its runs on --resume.
        assert config_hash(config) == config_hash({k: v for k, v in config.items() if k != "fixed"})


def test_a_run_recorded_before_the_fixed_param_is_named_from_its_variant_label():
    assert fixed_values(None, "continuum_dropout[p=0.1,m=5]") == {"p": "0.1", "m": "5"}
    assert cell_label("continuum_dropout", fixed_values(None, "continuum_dropout[p=0.1,m=5]"), "time") == \
        "continuum_dropout[p=0.1,m=5,scope=time]"
    assert fixed_values(None, "") == {} and fixed_values({"n_mc": 5}, "none[n_mc=5]") == {"n_mc": 5}
