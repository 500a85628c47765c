"""The protocol without Ray: stages and budgets, the per-cell searcher, per-cell ASHA, stopped trials, storage."""
import copy
from types import SimpleNamespace

import optuna
import pyarrow.fs as pafs
import pytest
from ndebench.platform.cluster.storage import Storage
from ndebench.platform.engine.searcher import CellSearcher, PerCellASHA
from ndebench.platform.engine.trainable import full_config
from ndebench.platform.spec.config import ConfigError, parse_spec
from ndebench.platform.spec.plan import cell_template, chosen_keys, plan_stages, sweep_cells, tune_stage

GRID = {
    "study": "g",
    "models": ["neural_cde"],
    "datasets": ["synthetic"],
    "regularizers": {"none": {}, "continuum_dropout": {"p": [0.1, 0.3], "m": [5, 10]}},
    "model": {"hidden_size": 8},
    "training": {"epochs": 2, "lr": [0.01, 0.005]},
    "tune": {"sampler": "grid", "num_samples": 3},
}


def spec_with(**changes):
    raw = copy.deepcopy(GRID)
    raw.update(changes)
    return parse_spec(raw)


def _drain(searcher):
    configs, ids = [], []
    while (config := searcher.suggest(f"t{len(ids)}")) not in (None, CellSearcher.FINISHED):
        configs.append(config)
        ids.append(f"t{len(ids)}")
    return configs, ids


def test_joint_grid_runs_every_point_once_whatever_num_samples_says():
    stage, = plan_stages(spec_with(protocol="joint"))
    searches = [c for c in stage.cells if c.budget]
    assert [(c.cell.regularizer, c.budget) for c in stage.cells] == [("none", 2), ("continuum_dropout", 8)]
    searcher = CellSearcher("tune", searches, stage.tune)
    configs, ids = _drain(searcher)
    # A suggestion holds what varies; the trainable completes it with its cell's fixed values.
    assert all(set(c) == {"cell", "phase", "seed", *searcher._searches[c["cell"]].space} for c in configs)
    configs = [full_config(c, None, searcher.templates) for c in configs]
    cd = [c for c in configs if c["regularizer"] == "continuum_dropout"]
    assert len(cd) == 8 and len({(c["regularizer.p"], c["regularizer.m"], c["training.lr"]) for c in cd}) == 8
    assert len({(c["regularizer.p"], c["regularizer.m"]) for c in cd}) == 4
    assert {c["cell"] for c in configs} == {"neural_cde__synthetic__none", "neural_cde__synthetic__continuum_dropout"}
    assert configs[0]["cell"] != configs[1]["cell"], "cells take turns"
    for trial_id in ids:
        searcher.on_trial_complete(trial_id, {"status": "ok", "val_loss": 1.0})
    assert searcher.suggest("more") == CellSearcher.FINISHED


def test_paper_protocol_searches_base_then_the_regularizer_on_the_frozen_base():
    spec = spec_with()
    base, tune = plan_stages(spec)
    assert [(c.cell.regularizer, c.budget, sorted(c.space)) for c in base.cells] == [("none", 2, ["training.lr"])]
    assert [(c.cell.regularizer, c.budget) for c in tune.cells] == [("none", 0), ("continuum_dropout", 4)]
    frozen = tune_stage(spec, {"neural_cde__synthetic__none": {"training.lr": 0.005}})
    cd = frozen.cells[1]
    assert sorted(cd.space) == ["regularizer.m", "regularizer.p"] and cd.template["training.lr"] == 0.005


def test_base_stage_settings_and_epochs():
    spec = spec_with(tune={"sampler": "grid"}, training={"epochs": 50, "lr": {"loguniform": [1e-4, 1e-2]}},
                     base={"sampler": "tpe", "num_samples": 20, "epochs": 10, "scheduler": "asha",
                           "n_startup_trials": 5})
    base, tune = plan_stages(spec)
    assert base.cells[0].budget == 20 and base.cells[0].template["training.epochs"] == 10
    assert base.tune.scheduler == "asha" and base.tune.n_startup_trials == 5 and tune.tune.sampler == "grid"
    assert tune.cells[1].template["training.epochs"] == 50


@pytest.mark.parametrize("change, message", [
    ({"protocol": "staged"}, "valid: paper, joint"),
    ({"tune": {"sampler": "cmaes"}}, "tune.sampler='cmaes' must be one of 'tpe', 'random', 'grid'"),
    ({"tune": {"scheduler": "hyperband"}}, "tune.scheduler='hyperband' must be one of 'fifo', 'asha'"),
    ({"tune": {"asha": {"reduction_factor": 1}}}, "tune.asha.reduction_factor"),
    ({"training": {"lr": {"loguniform": [1e-4, 1e-2]}}}, "continuous ['training.lr']"),
    ({"variants": {"steer": "grid"}}, "not one of the sweep's regularizers"),
    ({"variants": {"none": "all"}}, "variants.none='all'; valid: grid or a mapping"),
    ({"variants": {"none": {"n_mc": [5]}}}, "differ from none only on SDE models"),
    ({"models": ["neural_lsde"], "variants": {"none": {"n_mc": [1]}}}, "is the none cell itself"),
    ({"models": ["neural_lsde"], "variants": {"none": {"n_mc": [0]}}}, "variants.none.n_mc=0"),
    ({"models": ["neural_lsde"], "variants": {"none": {"n_mc": [5, 5]}}}, "must list distinct values"),
    ({"models": ["neural_lsde"], "variants": {"none": {"p": [5]}}}, "['p'] in variants.none; valid keys: ['n_mc']"),
    ({"variants": {"continuum_dropout": {"p": [0.1]}}}, "every hyperparameter it searches"),
    ({"base": {"select": "final"}}, "base.select='final' must be one of 'best_epoch', 'last_epoch'"),
    ({"tune": {"select": "final"}}, "tune.select='final' must be one of 'best_epoch', 'last_epoch'"),
    ({"base": {"training": {"lr_stepp": 5}}}, "['lr_stepp'] in base.training"),
    ({"base": {"training": {"epochs": 5}}}, "set the base stage's epochs with base.epochs"),
    ({"base": {"training": {"lr_step": [5, 10]}}}, "fixed, not searched"),
    ({"base": {"training": {"lr_step": 0}}}, "base.training.lr_step"),
    ({"base": {"training": {"lr": 0.1}}}, "['lr'] are searched in training:"),
    ({"base": {"epochs": 0}}, "base.epochs"),
])
def test_protocol_settings_errors_name_the_key(change, message):
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        spec_with(**change)


def test_variants_expand_a_grid_into_fixed_cells():
    spec = spec_with(variants={"continuum_dropout": "grid"})
    variants = [c for c in sweep_cells(spec) if c.variant]
    assert [c.variant for c in variants] == [
        "continuum_dropout[p=0.1,m=5]", "continuum_dropout[p=0.1,m=10]",
        "continuum_dropout[p=0.3,m=5]", "continuum_dropout[p=0.3,m=10]"]
    assert dict(variants[1].fixed) == {"p": 0.1, "m": 10}
    assert all(c.cell.variant is None for stage in plan_stages(spec) for c in stage.cells)


def test_a_none_variant_is_an_mc_control_cell_on_sde_models_only():
    spec = spec_with(models=["neural_cde", "neural_lsde"], variants={"none": {"n_mc": [5]}})
    controls = [c for c in sweep_cells(spec) if c.variant]
    assert [(c.model, c.regularizer, c.variant, c.fixed) for c in controls] == [
        ("neural_lsde", "none", "none[n_mc=5]", (("n_mc", 5),))]
    assert cell_template(spec, controls[0])["regularizer.n_mc"] == 5
    assert all(c.cell.variant is None for stage in plan_stages(spec) for c in stage.cells)
    assert chosen_keys(spec, controls[0]) == ["regularizer.n_mc", "training.lr"]
    assert chosen_keys(spec, sweep_cells(spec)[1]) == ["regularizer.m", "regularizer.p", "training.lr"]


def test_base_training_and_selection_reach_only_their_stages_trials():
    spec = spec_with(base={"sampler": "random", "select": "last_epoch", "training": {"lr_step": 5}})
    base, tune = plan_stages(spec)
    assert spec.base.sampler == "random" and spec.tune.select == "best_epoch"
    assert base.cells[0].template["select"] == "last_epoch" and base.cells[0].template["training.lr_step"] == 5
    assert "select" not in tune.cells[1].template and "training.lr_step" not in tune.cells[1].template
    evaluated = cell_template(spec, sweep_cells(spec)[0])
    assert "select" not in evaluated and "training.lr_step" not in evaluated
    tuned = spec_with(tune={"sampler": "grid", "select": "last_epoch"})
    assert [c.template["select"] for stage in plan_stages(tuned) for c in stage.cells] == ["last_epoch"] * 3


def test_per_model_blocks_merge_over_shared_keys():
    spec = spec_with(models=["neural_cde", "gru_ode"], datasets=["synthetic"],
                     model={"hidden_size": [8, 16], "num_layers": 2, "gru_ode": {"num_layers": 1}})
    assert spec.model_params("gru_ode")["num_layers"] == 1 and spec.model_params("neural_cde")["num_layers"] == 2
    assert spec.base_config("gru_ode", "synthetic", "none")["model.num_layers"] == 1
    with pytest.raises(ConfigError, match="model.ode_rnn: a block for model 'ode_rnn'"):
        spec_with(model={"ode_rnn": {"num_layers": 1}})


def test_tpe_concurrency_is_limited_per_cell_and_stopped_trials_are_pruned():
    spec = spec_with(tune={"sampler": "tpe", "num_samples": 6, "max_concurrent": 2, "n_startup_trials": 2})
    stage = plan_stages(spec)[1]
    cd = [c for c in stage.cells if c.budget]
    searcher = CellSearcher("tune", cd, stage.tune)
    assert searcher.max_live == 2
    first, second = searcher.suggest("a"), searcher.suggest("b")
    assert first and second and searcher.suggest("c") is None
    searcher.on_trial_complete("a", {"status": "running", "val_loss": 0.01})
    searcher.on_trial_complete("b", {"status": "ok", "val_loss": 0.5})
    study = searcher._studies[cd[0].key]
    assert [t.state for t in study.trials] == [optuna.trial.TrialState.PRUNED, optuna.trial.TrialState.COMPLETE]
    assert study.best_value == 0.5


def _trial(trial_id, cell):
    return SimpleNamespace(trial_id=trial_id, config={"cell": cell})


def test_asha_compares_trials_only_within_their_cell():
    from ndebench.platform.spec.config import AshaConfig
    from ray.tune.schedulers import TrialScheduler

    scheduler = PerCellASHA("val_loss", "min", AshaConfig(grace_period=1, reduction_factor=2), {"a": 4, "b": 4})
    a1, a2, b1 = _trial("a1", "a"), _trial("a2", "a"), _trial("b1", "b")
    for trial in (a1, a2, b1):
        scheduler.on_trial_add(None, trial)
    assert scheduler.on_trial_result(None, a1, {"epoch": 1, "val_loss": 0.1}) == TrialScheduler.CONTINUE
    assert scheduler.on_trial_result(None, b1, {"epoch": 1, "val_loss": 5.0}) == TrialScheduler.CONTINUE
    assert scheduler.on_trial_result(None, a2, {"epoch": 1, "val_loss": 1.0}) == TrialScheduler.STOP
    assert scheduler.on_trial_result(None, a1, {"val_loss": 0.1, "status": "ok"}) == TrialScheduler.CONTINUE


def test_a_stopped_trial_ends_its_mlflow_run_as_stopped(uri):
    from ndebench.platform.engine.progress import MarkStopped
    from ndebench.platform.record.recorder import TrialRecorder
    from ndebench.platform.record.tracking import TAG, client

    tags = {"phase": "tune", "model": "m", "dataset": "d", "regularizer": "r", "seed": "0"}
    recorder = TrialRecorder(uri, "s", {"x": 1}, "h", tags)
    trial = SimpleNamespace(last_result={"status": "running", "run_id": recorder.run_id, "val_loss": 0.1})
    MarkStopped(uri).on_trial_complete(0, [], trial)
    run = client(uri).get_run(recorder.run_id)
    assert run.data.tags[f"{TAG}status"] == "stopped" and run.info.status == "KILLED"


def test_storage_file_uri_and_local_path_are_the_same_place(tmp_path):
    by_uri, by_path = Storage((tmp_path / "ray").as_uri()), Storage(tmp_path / "ray")
    assert isinstance(by_uri.fs, pafs.LocalFileSystem) and by_uri.root == by_path.root
    by_uri.write_bytes(b"hello", "study", "x.log")
    assert (tmp_path / "ray" / "study" / "x.log").read_bytes() == b"hello" and by_path.exists("study")


def test_s3_storage_goes_through_the_pyarrow_filesystem(tmp_path, monkeypatch):
    from ndebench.platform.engine.sweep import Sweep

    seen = []
    fake = pafs.SubTreeFileSystem(str(tmp_path), pafs.LocalFileSystem())

    def from_uri(uri):
        seen.append(uri)
        return fake, uri.removeprefix("s3://")

    monkeypatch.setattr(pafs, "FileSystem", SimpleNamespace(from_uri=from_uri))
    spec = spec_with(study="s3study")
    sweep = Sweep(spec, tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}", storage_path="s3://bucket/ray",
                  data_dir=str(tmp_path))
    assert seen == ["s3://bucket/ray"] and sweep.ctx.storage.display("s3study") == "s3://bucket/ray/s3study"
    sweep.preflight()
    sweep.ctx.storage.write_bytes(b"{}", "s3study", "state.json")
    assert (tmp_path / "bucket" / "ray" / "s3study" / "state.json").is_file()
    with pytest.raises(RuntimeError, match="results in s3://bucket/ray/s3study; pass --resume"):
        sweep.preflight()


def _sweep(spec, tmp_path):
    from ndebench.platform.engine.sweep import Sweep

    sweep = Sweep(spec, tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}", storage_path=tmp_path / "ray",
                  data_dir=str(tmp_path))
    sweep.ctx.place(0.0)
    return sweep


def test_evaluated_configs_take_base_values_and_variants_keep_their_point(tmp_path):
    spec = spec_with(variants={"continuum_dropout": "grid"})
    cells = sweep_cells(spec)
    sweep = _sweep(spec, tmp_path)
    base = {"neural_cde__synthetic__none": {"training.lr": 0.005}}
    tuned = {"neural_cde__synthetic__continuum_dropout": {"regularizer.p": 0.3, "regularizer.m": 10}}
    configs = sweep.ctx.final_configs(cells, base, tuned)
    assert len(configs) == 6 and {c["training.lr"] for c in configs.values()} == {0.005}
    assert configs["neural_cde__synthetic__continuum_dropout"]["regularizer.p"] == 0.3
    variant = configs["neural_cde__synthetic__continuum_dropout[p=0.1,m=5]"]
    assert ((variant["regularizer.p"], variant["regularizer.m"], variant["variant"])
            == (0.1, 5, "continuum_dropout[p=0.1,m=5]"))
    assert variant["training.epochs"] == 2 and variant["device"] == "cpu"


def test_a_failed_base_stage_fails_every_cell_of_its_pair(tmp_path):
    spec = spec_with()
    sweep = _sweep(spec, tmp_path)
    sweep.ctx.failed = {"neural_cde__synthetic__none": "base: ValueError: no"}
    assert sweep.ctx.final_configs(sweep_cells(spec), {}, {}) == {}
    assert sweep.ctx.failed["neural_cde__synthetic__continuum_dropout"] == (
        "base stage of neural_cde x synthetic failed: base: ValueError: no")
