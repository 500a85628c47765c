"""Learning dynamics in reports: the "did not learn" flag against chance level and the learning-curve figures."""
import json
import math
import re

import pandas as pd
import pytest
from fakes import record_trial
from ndebench.platform.cli.main import main
from ndebench.platform.record.recorder import TrialRecorder
from ndebench.platform.report.learning import chance_loss, class_counts, flags, learning_check, mean_curves
from ndebench.platform.report.render.studyfigures import curve_title
from scipy import stats as sps

STUDY = "learning"


def _runs(accuracies: dict[str, list[float]], num_classes: int = 2) -> pd.DataFrame:
    return pd.DataFrame([{"model": "neural_cde", "dataset": "uea/GunPoint", "regularizer": reg, "seed": seed,
                          "status": "ok", "test_accuracy": accuracy, "final_train_loss": 0.5,
                          "num_classes": num_classes}
                         for reg, values in accuracies.items() for seed, accuracy in enumerate(values)])


def test_a_cell_learned_when_its_test_accuracy_is_shown_above_one_over_k():
    assert chance_loss(2) == math.log(2) and chance_loss(10) == math.log(10)
    with pytest.raises(ValueError, match="num_classes=1"):
        chance_loss(1)
    # Car-like: 4 classes, chance 0.25; a mean of 0.267 over 5 seeds is not shown above it, 0.40 is.
    cells = {"none": [0.40, 0.42, 0.38, 0.41, 0.39], "near": [0.22, 0.30, 0.27, 0.25, 0.295],
             "below": [0.233, 0.2, 0.25, 0.22, 0.26], "one": [0.26], "flat": [0.25] * 5}
    check = learning_check(_runs(cells, num_classes=4)).set_index("regularizer")
    assert (check["chance_accuracy"] == 0.25).all() and check.loc["none", "chance"] == pytest.approx(math.log(4))
    for name in ("none", "near", "below"):
        expected = sps.ttest_1samp(cells[name], 0.25, alternative="greater").pvalue
        assert check.loc[name, "p_above_chance"] == pytest.approx(expected, rel=1e-12)
        assert check.loc[name, "learned"] == (expected < 0.05)
    assert check.loc["none", "learned"] and not check.loc["near", "learned"] and not check.loc["below", "learned"]
    # One seed or no spread: no test, the mean against chance.
    assert check.loc["one", "learned"] and math.isnan(check.loc["one", "p_above_chance"])
    assert not check.loc["flat", "learned"] and check.loc["flat", "test_accuracy"] == pytest.approx(0.25)
    assert set(flags(check.reset_index())) == {("neural_cde", "uea/GunPoint", r) for r in ("near", "below", "flat")}
    assert flags(check.reset_index())[("neural_cde", "uea/GunPoint", "near")].startswith(
        "did not learn: test accuracy 0.267 over 5 seed(s) vs chance 1/K = 0.250 (one-sided p ")


def test_unknown_class_counts_come_from_the_registry_or_leave_the_cell_unjudged():
    runs = _runs({"none": [0.9]}, num_classes=-1)
    assert class_counts(runs) == {"uea/GunPoint": 2}
    unknown = runs.assign(dataset="plugin_without_facts")
    check = learning_check(unknown)
    assert check.loc[0, "learned"] is None and flags(check) == {}


def test_mean_curves_average_the_seeds_that_reached_each_epoch():
    runs = pd.DataFrame({"run_id": ["a", "b"], "model": "m", "dataset": "d", "regularizer": "r", "status": "ok"})
    curves = pd.DataFrame({"run_id": ["a", "a", "b"], "epoch": [1, 2, 1], "train_loss": [1.0, 0.5, 0.8],
                           "val_loss": [1.2, 0.9, 1.0]})
    mean = mean_curves(curves, runs).set_index("epoch")
    assert mean.loc[1, "train_loss"] == pytest.approx(0.9) and mean.loc[1, "n"] == 2
    assert mean.loc[2, "val_loss"] == pytest.approx(0.9) and mean.loc[2, "n"] == 1


def _font_types(pdf) -> frozenset[str]:
    """The /Subtype of every font dictionary of a PDF (matplotlib writes them uncompressed): Type3, TrueType, ..."""
    objects = re.split(rb"\bendobj\b", pdf.read_bytes())
    return frozenset(m.group(1).decode() for o in objects if re.search(rb"/Type\s*/Font\b", o)
                     for m in [re.search(rb"/Subtype\s*/(\w+)", o)] if m)


def _record(uri: str, regularizer: str, seed: int, train: list[float], accuracy: float) -> None:
    record_trial(uri, STUDY, regularizer, seed, dataset="uea/GunPoint",
                 epochs=[{"train_loss": loss, "val_loss": loss + 0.05} for loss in train],
                 metrics={"test_accuracy": accuracy}, tags={"num_classes": 2})


def test_a_report_flags_the_cell_that_did_not_learn_and_draws_its_learning_curves(tmp_path, uri, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    for seed in range(3):
        _record(uri, "none", seed, [0.80, 0.60, 0.45, 0.38 + 0.01 * seed], 0.90 + 0.01 * seed)
        _record(uri, "continuum_dropout", seed, [0.85, 0.74, 0.70, 0.69 - 0.01 * seed], 0.47 + 0.04 * seed)
    assert main(["report", "--study", STUDY, "--tracking-uri", uri]) == 0
    assert "did not learn" in capsys.readouterr().out
    folder = tmp_path / "reports" / STUDY
    table = (folder / "table.md").read_text()
    row = {line.split("|")[1].strip(): line for line in table.splitlines() if line.startswith("| ")}
    assert "did not learn" in row["continuum_dropout"] and "did not learn" not in row["none"]
    assert "- neural_cde / uea/GunPoint / continuum_dropout: did not learn: test accuracy 0.510 over 3" in table
    assert "not shown above chance 1/K" in table and "did not learn" in (folder / "table.tex").read_text()
    summary = json.loads((folder / "summary.json").read_text())
    p = sps.ttest_1samp([0.47, 0.51, 0.55], 0.5, alternative="greater").pvalue
    flagged = summary["did_not_learn"]
    assert [(c["regularizer"], round(c["test_accuracy"], 3), c["p_above_chance"]) for c in flagged] == [
        ("continuum_dropout", 0.51, pytest.approx(p))]
    cells = {c["regularizer"]: c for c in summary["learning"]["cells"]}
    assert cells["none"]["learned"] is True and cells["none"]["chance"] == pytest.approx(math.log(2))
    assert cells["continuum_dropout"]["final_train_loss"] == pytest.approx(0.68)
    figure = folder / "learning_neural-cde_uea-GunPoint.png"
    assert figure.stat().st_size > 0 and figure.with_suffix(".pdf").exists()
    pdfs = sorted(folder.glob("*.pdf"))
    # Type 42: TrueType outlines, embedded by matplotlib as a composite (Type0) font over a CIDFontType2 one.
    assert [p.stem.split("_")[0] for p in pdfs] == ["forest", "learning", "seeds"]
    assert {_font_types(p) for p in pdfs} == {frozenset({"Type0", "CIDFontType2"})}, pdfs
    html = (folder / "report.html").read_text()
    assert 'alt="learning_neural-cde_uea-GunPoint"' in html and "<b class='flag'>did not learn</b>" in html


def test_final_values_add_no_point_to_a_per_epoch_history_and_old_step_0_points_are_not_drawn(tmp_path, uri,
                                                                                                monkeypatch):
    from ndebench.platform.record.tracking import client
    from ndebench.platform.report import learning
    from ndebench.platform.report.render import figures

    identity = {"study": STUDY, "phase": "evaluate", "model": "neural_cde", "dataset": "uea/GunPoint",
                "regularizer": "none", "seed": "0", "metric": "accuracy"}
    recorder = TrialRecorder(uri, STUDY, {"seed": 0}, "none-0", identity)
    for epoch, loss in enumerate([0.9, 0.5, 0.7], start=1):
        recorder.log_metrics({"train_loss": loss, "val_loss": loss + 0.05}, step=epoch)
    recorder.finish("ok", {"val_loss": 0.55, "result_val_loss": 0.55, "test_accuracy": 0.8}, {}, {})
    mlflow_client = client(uri)
    run_id = recorder.run_id
    history = {key: [(p.step, p.value) for p in mlflow_client.get_metric_history(run_id, key)]
               for key in ("train_loss", "val_loss", "result_val_loss", "test_accuracy")}
    assert [step for step, _ in history["val_loss"]] == [1, 2, 3] == [step for step, _ in history["train_loss"]]
    assert history["result_val_loss"] == [(0, 0.55)] and history["test_accuracy"] == [(0, 0.8)]
    assert mlflow_client.get_run(run_id).data.metrics["val_loss"] == pytest.approx(0.75)  # the last epoch's
    mlflow_client.log_metric(run_id, "val_loss", 0.55, step=0)  # what a run of an earlier version holds
    curves = learning.read_curves(mlflow_client, [run_id])
    assert curves["epoch"].tolist() == [1, 2, 3] and curves["val_loss"].tolist() == pytest.approx([0.95, 0.55, 0.75])

    labels = []
    monkeypatch.setattr(figures, "save_png_pdf", lambda fig, path: labels.append(fig.axes[0].get_ylabel()))
    runs = pd.DataFrame({"run_id": [run_id], "model": "m", "dataset": "d", "regularizer": "none", "status": "ok"})
    figures.learning_curve_figure(mean_curves(curves, runs), ["none"], tmp_path / "one.png", "t")
    two = pd.concat([curves, curves.assign(run_id="b")])
    figures.learning_curve_figure(mean_curves(two, pd.concat([runs, runs.assign(run_id="b")])), ["none"],
                                   tmp_path / "two.png", "t")
    assert labels == ["loss (one seed per regularizer)", "loss (mean over up to 2 seeds)"]
    assert curve_title("m", "d", mean_curves(curves, runs)) == \
        "m on d: loss per epoch of one seed per regularizer (its lowest ok seed)"
    assert curve_title("m", "d", mean_curves(two, pd.concat([runs, runs.assign(run_id="b")]))) == \
        "m on d: mean loss per epoch over up to 2 seeds"
