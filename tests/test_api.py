"""The notebook API without Ray: load and validate a spec, read a study's results frame from MLflow, report it;
``run`` refuses to overwrite a recorded study before a cluster starts."""
import pandas as pd
import pytest
import yaml
from fakes import record_trial, study_frame
from ndebench.platform import api
from ndebench.platform.spec.config import ConfigError

SPEC = {
    "study": "nb", "models": ["neural_cde"], "datasets": ["synthetic"],
    "regularizers": {"none": {}, "continuum_dropout": {"p": [0.1, 0.3], "m": 10}},
    "training": {"epochs": 3, "lr": 0.01}, "evaluate": {"seeds": [0, 1]},
}


def test_load_from_a_dict_or_a_file_with_overrides_then_validate(tmp_path):
    spec = api.load(SPEC, ["training.epochs=1", "tune.num_samples=2", "evaluate.seeds=[0, 1, 2]"])
    assert spec.training["epochs"] == 1 and spec.tune.num_samples == 2 and spec.evaluate.seeds == (0, 1, 2)
    assert spec.overrides == ("training.epochs=1", "tune.num_samples=2", "evaluate.seeds=[0, 1, 2]")
    assert SPEC["training"]["epochs"] == 3  # the caller's mapping is left as it was
    path = tmp_path / "nb.yaml"
    path.write_text(yaml.safe_dump(SPEC))
    from_file = api.load(path, ["training.epochs=1", "tune.num_samples=2", "evaluate.seeds=[0, 1, 2]"])
    assert from_file.source == str(path.resolve())
    assert from_file.training == spec.training and from_file.regularizers == spec.regularizers
    # Two TPE samples never leave Optuna's 10 random start-up trials: a warning, not an error.
    assert len(api.validate(spec)) == 1 and "never leaves its random start-up phase" in api.validate(spec)[0]
    with pytest.raises(ConfigError, match=r"training.epochs=0"):
        api.load(SPEC, ["training.epochs=0"])
    with pytest.raises(ConfigError, match="expected KEY=VALUE"):
        api.load(SPEC, ["training.epochs"])


def test_report_from_a_results_frame_returns_its_tables_as_text(tmp_path):
    runs = study_frame()  # api.results' columns: the tables name their rows by `label`
    rep = api.report(runs, tmp_path)
    assert rep.files.directory == tmp_path / "crafted"
    assert rep.markdown == rep.files.table_md.read_text() and rep.latex == rep.files.table_tex.read_text()
    cell = runs[(runs["model"] == "neural_ode") & (runs["dataset"] == "GunPoint") & (runs["regularizer"] == "none")]
    mean, std = cell["test_accuracy"].mean(), cell["test_accuracy"].std(ddof=1)
    none_row = next(line for line in rep.markdown.splitlines() if line.startswith("| none |"))
    assert none_row.split(" | ")[-1].strip(" |*") == f"{mean:.3f} ({std:.3f})"  # the last column: neural_ode/GunPoint
    assert "Student's two-sample t-test" in rep.console and "jump_diffusion" in rep.console
    failed = api.report(runs, tmp_path / "failed", failed={"neural_cde x GunPoint x rnn_mask": "shape | mismatch"})
    assert failed.markdown.endswith("| neural_cde x GunPoint x rnn_mask | shape \\| mismatch |\n\n"
                                    "Cells with no ok run, each with its first error; `ndebench run ... --resume` "
                                    "runs them again.\n")
    assert r"neural\_cde x GunPoint x rnn\_mask & shape | mismatch \\" in failed.latex
    with pytest.raises(ValueError, match=r"name the study to report; the runs hold \['crafted', 'other'\]"):
        api.report(runs.assign(study=["crafted", "other"] * (len(runs) // 2)), tmp_path)


def _record(uri: str, regularizer: str, seed: int, accuracy: float, variant: str = "", p: float | None = None) -> str:
    return record_trial(uri, "nb", regularizer, seed, variant=variant,
                        params={"regularizer.p": p} if p is not None else {},
                        metrics={"test_accuracy": accuracy, "test_nll": 1 - accuracy}).run_id


def test_results_frame_from_mlflow_reports_like_the_command_line(tmp_path, uri):
    for seed in (0, 1):
        _record(uri, "none", seed, 0.6 + 0.02 * seed)
        _record(uri, "continuum_dropout", seed, 0.7 + 0.02 * seed, "continuum_dropout[p=0.3]", 0.3)
    runs = api.results("nb", uri)
    assert len(runs) == 4 and set(runs["status"]) == {"ok"} and set(runs["metric"]) == {"accuracy"}
    # The cell key as columns: the regularizer trained with, and the cell's name, which the tables show.
    assert set(runs["regularizer"]) == {"none", "continuum_dropout"}
    assert set(runs["label"]) == {"none", "continuum_dropout[p=0.3]"}
    variant = runs[runs["variant"] != ""]
    assert variant["p"].tolist() == [0.3] * 2
    assert variant["params.regularizer.p"].tolist() == [0.3] * 2
    rep = api.report(runs, tmp_path / "reports")
    assert "| continuum_dropout[p=0.3] | **0.710 (0.014)**" in rep.markdown
    with pytest.raises(ValueError, match=r"study 'missing' is not in sqlite:///.*; studies there: nb"):
        api.results("missing", uri)
    # A recorded study is never overwritten: run refuses before a Ray cluster starts.
    with pytest.raises(RuntimeError, match="already has 4 MLflow run"):
        api.run(api.load(SPEC), uri=uri, storage_path=tmp_path / "ray")
    # As `ndebench run`: an output folder that cannot be written is refused before the sweep (and the study) starts.
    (tmp_path / "afile").write_text("")
    with pytest.raises(ValueError, match=r"--out '.*afile' is a file; it must be a folder"):
        api.run(api.load(SPEC, ["study=fresh"]), uri=uri, out_dir=tmp_path / "afile", storage_path=tmp_path / "ray")


def _search_trial(uri: str, parent: str, lr: float, val_accuracy: float, selected: float) -> str:
    from ndebench.platform.record import tracking
    from ndebench.platform.record.bulk import write_trial

    config = {"study": "syn", "phase": "tune", "cell": "model-a__dataset-000__none", "regularizer": "none",
              "seed": 0, "training.lr": lr}
    tags = {"study": "syn", "phase": "tune", "model": "model-a", "dataset": "dataset-000", "regularizer": "none",
            "seed": "0", "cell": "model-a__dataset-000__none", "metric": "accuracy"}
    epochs = [{"val_accuracy": selected, "val_loss": 0.5}, {"val_accuracy": val_accuracy, "val_loss": 0.25}]
    return write_trial(tracking.client(uri), tracking.ensure_experiment(uri, "syn"), config=config,
                       config_hash=f"tune-{lr}", tags=tags, parent_run_id=parent, epochs=epochs, status="ok",
                       final={"result_val_accuracy": selected, "result_val_loss": 0.5}, final_tags={},
                       artifacts={})


def test_notebook_frames_studies_results_with_flat_params_search_trials_and_figures(uri):
    from matplotlib.figure import Figure
    from ndebench.platform.record import synthetic, tracking

    assert api.studies(uri).empty
    synthetic.write_study(uri, "syn", 10)  # model-a on dataset-000: none and continuum_dropout, 5 seeds each
    cell = tracking.cell_run(uri, "syn", "", "tune", "model-a__dataset-000__none", {"regularizer": "none"})
    first = _search_trial(uri, cell, 0.01, 0.5, 0.75)
    second = _search_trial(uri, cell, 0.001, 0.625, 0.625)
    assert api.studies(uri)["study"].tolist() == ["syn"]

    runs = api.results("syn", uri)
    assert "params" not in runs.columns and len(runs) == 10
    assert runs["params.training.lr"].tolist() == [0.001] * 10 and runs["params.seed"].tolist() == runs["seed"].tolist()
    cd = runs[runs["regularizer"] == "continuum_dropout"]
    assert cd["params.regularizer.p"].tolist() == [0.3] * 5 and runs.loc[runs["regularizer"] == "none",
                                                                            "params.regularizer.p"].isna().all()

    search = api.trials("syn", "tune", uri)
    assert search["run_id"].tolist() == [first, second]  # the cell run is not a trial; oldest first
    assert search["seed"].tolist() == [0, 0] and search["seed"].dtype.kind == "i"
    # The selected epoch's validation accuracy (result_val_accuracy), not the last epoch's.
    assert search["val_accuracy"].tolist() == [0.75, 0.625] and search["params.training.lr"].tolist() == [0.01, 0.001]
    assert set(search["cell_run_id"]) == {cell}
    assert api.trials("syn", "base", uri).empty
    with pytest.raises(ValueError, match="unknown search phase 'evaluate'; valid: base, tune"):
        api.trials("syn", "evaluate", uri)

    figs = api.figures(runs)
    assert sorted(figs) == ["reliability_model-a_dataset-000", "seeds_model-a_dataset-000"]
    assert all(isinstance(fig, Figure) for fig in figs.values())
    # One point per seed of each regularizer on the seed plot, at the runs' test accuracies.
    points = [c.get_offsets()[:, 1] for c in figs["seeds_model-a_dataset-000"].axes[0].collections]
    expected = [sorted(runs.loc[runs["regularizer"] == r, "test_accuracy"]) for r in ("none", "continuum_dropout")]
    assert [sorted(p) for p in points] == expected


def test_study_links_share_a_view_of_the_cells_and_their_shared_params(uri):
    import json

    from fakes import cell_study
    from ndebench.platform.record.tracking import client

    cells = cell_study(uri, "cmp")
    links = api.study_links("cmp", uri, "http://127.0.0.1:5055")
    assert sorted(links.cell_run_ids) == sorted(c["run_id"] for c in cells.values())
    assert links.runs == ("http://127.0.0.1:5055/#/experiments/1/runs?viewStateShareKey=ndebench-evaluate-cells"
                          "&compareRunsMode=TABLE&workflowType=machine_learning")
    assert links.compare == links.runs.replace("TABLE", "CHART")
    view = json.loads(client(uri).get_experiment("1").tags["mlflow.sharedViewState.ndebench-evaluate-cells"])
    assert view["searchFilter"] == "tags.`ndebench.kind` = 'cell' and tags.`ndebench.phase` = 'evaluate'"
    assert view["orderByKey"] == "metrics.`mean_test_accuracy`" and view["orderByAsc"] is False
    # Display copies at 3 significant digits first, then the raw metrics.
    assert view["selectedColumns"][:12] == ["tags.`accuracy`", "tags.`vs none`", "tags.`p vs none`",
                                            "tags.`CI low`", "tags.`CI high`", "tags.`sd accuracy`",
                                            "tags.`CI excludes 0`",
                                            "metrics.`mean_test_accuracy`", "metrics.`diff_vs_none`",
                                            "metrics.`diff_ci_low`", "metrics.`diff_ci_high`",
                                            "metrics.`p_value_vs_none`"]
    shown = {key: client(uri).get_run(c["run_id"]).data.tags for key, c in cells.items()}
    cd, none = shown["neural_lsde__synthetic__continuum_dropout"], shown["neural_lsde__synthetic__none"]
    keys = ("accuracy", "vs none", "p vs none", "CI low", "CI high", "sd accuracy", "CI excludes 0")
    assert [cd[k] for k in keys] == ["0.875", "+0.0625", "0.0234", "0.0156", "0.109", "0.0312", "yes"]
    assert [none[k] for k in keys] == ["0.812", "-", "-", "-", "-", "0.0312", "-"]
    # Trailing zeros stay, so that a column's values line up: none's 0.7 of the quickstart is 0.700.
    from types import SimpleNamespace

    from ndebench.platform.record.uiview import display_tags

    quickstart = SimpleNamespace(data=SimpleNamespace(metrics={"mean_test_accuracy": 0.7, "std_test_accuracy": 0.075}))
    assert display_tags(quickstart, ["mean_test_accuracy"]) == {
        "accuracy": "0.700", "vs none": "-", "p vs none": "-", "CI low": "-", "CI high": "-", "sd accuracy": "0.0750",
        "CI excludes 0": "-"}
    # An interval holding 0 (the quickstart's +0.067 at p = 0.18) reads "no", not a gain.
    unsure = SimpleNamespace(data=SimpleNamespace(metrics={"diff_ci_low": -0.0467, "diff_ci_high": 0.18}))
    assert display_tags(unsure, [])["CI excludes 0"] == "no"
    # Both cells ran at one learning rate: no param differs, so there is no parallel-coordinates plot.
    assert [c["type"] for c in view["compareRunCharts"]] == ["BAR", "BAR"]


def test_the_parallel_plot_has_an_axis_per_param_that_differs_between_the_cells(uri):
    import json

    from fakes import cell_study
    from ndebench.platform.record.tracking import client

    cell_study(uri, "cmp", lrs=(0.01, 0.005))
    api.study_links("cmp", uri)
    view = json.loads(client(uri).get_experiment("1").tags["mlflow.sharedViewState.ndebench-evaluate-cells"])
    parallel, = (c for c in view["compareRunCharts"] if c["type"] == "PARALLEL")
    # none's cell has no regularizer.p or regularizer.m: only training.lr, which both have and which differs.
    assert parallel["selectedParams"] == ["training.lr"] and parallel["selectedMetrics"] == ["mean_test_accuracy"]


def test_report_html_links_to_the_ui_of_the_tracking_uri_it_was_made_with(tmp_path, uri):
    from ndebench.platform.record import synthetic
    from ndebench.platform.report.study import report_ui

    assert report_ui("http://tracking.example:5050/") == {"ui_url": "http://tracking.example:5050", "ui_note": ""}
    synthetic.write_study(uri, "syn", 10)
    rep = api.report_study("syn", uri, tmp_path / "reports", figures="none")
    page = next(p for p in rep.paths if p.name == "report.html").read_text()
    run_id = api.results("syn", uri)["run_id"].iloc[0]
    assert f'<a href="http://127.0.0.1:5000/#/experiments/1/runs/{run_id}?workflowType=machine_learning">' in page
    assert f"start that UI with `ndebench ui --tracking-uri {uri}` (its default address)" in page
    # results.csv is the study frame: the regularizers' hyperparameters and every run's config beside the results
    written = pd.read_csv(tmp_path / "reports" / "syn" / "results.csv")
    assert {"p", "m", "rate", "params.training.lr", "params.regularizer.p"} <= set(written.columns)
    assert written["p"].notna().any() and written["params.training.lr"].notna().all()
