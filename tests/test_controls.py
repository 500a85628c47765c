"""The Monte-Carlo control of SDE rows in a report: which comparison isolates dropout from ensembling."""
import html
import json

import numpy as np
import pandas as pd
import pytest
from ndebench.platform.common.labels import cell_label
from ndebench.platform.report.analyses import write_analyses
from ndebench.platform.report.render.tables import table_rows
from ndebench.platform.report.report import build_report
from scipy import stats

CD = np.array([0.81, 0.84, 0.79, 0.86, 0.83])
CONTROL = np.array([0.80, 0.82, 0.78, 0.83, 0.80])
NONE = np.array([0.78, 0.80, 0.74, 0.79, 0.77])


def _runs(with_control: bool = True) -> pd.DataFrame:
    """A study frame as the record reads it: the control's runs are ``none`` runs whose cell fixes ``n_mc``."""
    cells = [("none", "", {}, NONE), ("continuum_dropout", "", {}, CD)]
    cells += [("none", "none[n_mc=5]", {"n_mc": 5}, CONTROL)] * with_control
    return table_rows(pd.DataFrame([{"run_id": f"{variant or name}-{seed}", "study": "s", "model": "neural_lsde",
                                     "dataset": "d", "regularizer": name, "variant": variant, "fixed": fixed,
                                     "label": cell_label(name, fixed), "seed": seed, "status": "ok",
                                     "metric": "accuracy", "test_accuracy": value}
                                    for name, variant, fixed, values in cells for seed, value in enumerate(values)]))


def _frame(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs as ``runs_frame`` reads them: with a column per registered regularizer parameter."""
    return runs.assign(p=np.nan, m=np.nan, rate=np.nan)


def test_the_report_compares_each_regularizer_with_the_mc_control_and_says_what_it_isolates(tmp_path):
    files = build_report(_runs(), tmp_path, "s")
    summary = json.loads(files.summary_json.read_text())
    control = summary["mc_control"]
    row, = control["comparisons"]
    assert (row["regularizer"], row["baseline"]) == ("continuum_dropout", "none[n_mc=5]")
    assert row["difference"] == pytest.approx(CD.mean() - CONTROL.mean(), rel=1e-12)
    ci = stats.ttest_ind(CD, CONTROL).confidence_interval(0.95)
    assert (row["diff_ci_low"], row["diff_ci_high"]) == pytest.approx((ci.low, ci.high), rel=1e-12)
    assert row["p"] == pytest.approx(stats.ttest_ind(CD, CONTROL).pvalue, rel=1e-12)
    assert "against none[n_mc=5] isolates the regularizer from ensembling" in control["sentence"]
    text = files.table_md.read_text()
    assert "## Dropout vs ensembling: against the Monte-Carlo control" in text and control["sentence"] in text
    write_analyses(_frame(_runs()), files, "s", alpha=0.05)
    page = (files.directory / "report.html").read_text()
    assert "Dropout vs ensembling: against the Monte-Carlo control" in page and html.escape(control["sentence"]) in page
    # The control is a row of the main table, tested against none there: the ensembling alone.
    main = {c["regularizer"]: c for c in summary["tables"][0]["comparisons"]}
    assert main["none[n_mc=5]"]["difference"] == pytest.approx(CONTROL.mean() - NONE.mean(), rel=1e-12)
    # A control is not a grid: the selection audit has nothing to audit.
    assert summary["selection_audit"] == [] and "selection_audit_skipped" in summary


def test_without_a_control_the_report_says_why_the_sde_difference_mixes_two_effects(tmp_path):
    files = build_report(_runs(with_control=False), tmp_path, "s")
    summary = json.loads(files.summary_json.read_text())
    assert summary["mc_control"] is None and "variants: {none: {n_mc: [5]}}" in summary["mc_control_skipped"]
    assert "Dropout vs ensembling" not in files.table_md.read_text()
    write_analyses(_frame(_runs(False)), files, "s", alpha=0.05)
    assert "Dropout vs ensembling: not in this report (no none[n_mc=N] control cell" in (
        files.directory / "report.html").read_text()


def test_a_report_computes_the_selection_audit_and_the_mc_control_once(tmp_path, monkeypatch):
    """``ndebench report`` shows the selection audit, the MC control and the check of which cells learned in table.md,
    summary.json, their own files and report.html: each is computed once per report and handed to every file that
    shows it."""
    from collections import Counter

    from ndebench.platform import api
    from ndebench.platform.record import synthetic
    from ndebench.platform.report import audit, controls, learning

    calls: Counter[str] = Counter()

    def counting(name, real):
        def counted(*args, **kwargs):
            calls[name] += 1
            return real(*args, **kwargs)
        return counted

    for module, name in ((audit, "selection_audit"), (controls, "control_comparisons"), (learning, "learning_check")):
        monkeypatch.setattr(module, name, counting(name, getattr(module, name)))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    synthetic.write_study(uri, "syn", 10)
    written = api.report_study("syn", uri, tmp_path / "reports", figures="none")
    assert {p.name for p in written.paths} >= {"table.md", "summary.json", "report.html"}
    assert calls == {"selection_audit": 1, "control_comparisons": 1, "learning_check": 1}
