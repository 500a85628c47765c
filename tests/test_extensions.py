"""`scope: time` is ndebench's extension: validate says so, and a report never shows it under the paper's name."""
import pandas as pd
from ndebench.platform import api
from ndebench.platform.report.render.tables import table_rows
from ndebench.platform.report.statistics.rows import ROW
from ndebench.platform.spec.extensions import SCOPE_TIME, extension_warnings

CONFIG = "tune_configs/quickstart.yaml"


def test_validate_names_scope_time_an_extension():
    assert extension_warnings(api.load(CONFIG)) == []
    assert extension_warnings(api.load(CONFIG, ["regularizers.continuum_dropout.scope=time"])) == [SCOPE_TIME]
    searched = api.load(CONFIG, ["regularizers.continuum_dropout.scope=[increment, time]"])
    assert extension_warnings(searched) == [SCOPE_TIME] and "extension, not the paper's method" in SCOPE_TIME


def test_the_report_labels_scope_time_runs_as_the_extension():
    runs = pd.DataFrame({"run_id": ["a", "b", "c", "d"], "regularizer": ["continuum_dropout"] * 3 + ["none"],
                         "label": ["continuum_dropout", "continuum_dropout", "continuum_dropout[p=0.1,m=5]", "none"],
                         "params.regularizer.scope": ["time", "increment", "time", None]})
    named = table_rows(runs)
    assert list(named[ROW]) == [
        "continuum_dropout[scope=time]", "continuum_dropout", "continuum_dropout[p=0.1,m=5,scope=time]", "none"]
    assert list(named["label"]) == list(runs["label"])  # the frame's own key stays as it was read
    assert list(named["regularizer"]) == list(runs["regularizer"])  # and so does each run's regularizer
