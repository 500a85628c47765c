"""`scope: time` is ndebench's extension: validate says so, and a report never shows it under the paper's name."""
from fakes import record_trial
from ndebench.platform import api
from ndebench.platform.record.runs import evaluate_runs
from ndebench.platform.report.render.tables import table_rows
from ndebench.platform.report.statistics.rows import ROW
from ndebench.platform.spec.extensions import SCOPE_TIME, extension_warnings

CONFIG = "tune_configs/quickstart.yaml"


def test_validate_names_scope_time_an_extension():
    assert extension_warnings(api.load(CONFIG)) == []
    assert extension_warnings(api.load(CONFIG, ["regularizers.continuum_dropout.scope=time"])) == [SCOPE_TIME]
    searched = api.load(CONFIG, ["regularizers.continuum_dropout.scope=[increment, time]"])
    assert extension_warnings(searched) == [SCOPE_TIME] and "extension, not the paper's method" in SCOPE_TIME


def test_the_record_names_scope_time_runs_as_the_extension_and_the_report_keys_on_that_name(uri):
    cases = [("continuum_dropout", "", "time"), ("continuum_dropout", "", "increment"),
             ("continuum_dropout", "continuum_dropout[p=0.1,m=5]", "time"), ("none", "", None)]
    for seed, (regularizer, variant, scope) in enumerate(cases):
        params = ({"regularizer.scope": scope} if scope else {}) | ({"fixed": {"p": 0.1, "m": 5}} if variant else {})
        record_trial(uri, "ext", regularizer, seed, variant=variant, params=params)
    runs = evaluate_runs(uri, "ext", variants=True).sort_values("seed", ignore_index=True)
    assert list(runs["label"]) == [
        "continuum_dropout[scope=time]", "continuum_dropout", "continuum_dropout[p=0.1,m=5,scope=time]", "none"]
    named = table_rows(runs)
    assert list(named[ROW]) == list(runs["label"])
    assert list(named["regularizer"]) == ["continuum_dropout"] * 3 + ["none"]  # each run's regularizer stays
