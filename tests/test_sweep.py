"""End to end on a local Ray through `ndebench run`: the paper protocol's stages, the MLflow hierarchy, a cell
that fails in every trial (the others finish, exit 1, the report names it), and `--resume` after the fix.

The sweep's dataset, its broken model and one of its regularizers come from a package outside ndebench that
declares them as entry points; it is put on the path only now, so the registries find it at the lookup of a
name they lack, in the driver and in every Ray worker."""
import contextlib
import io
import json
import math
import os
from importlib.metadata import version
from pathlib import Path

import pytest
import yaml
from fakes import local_ray_arguments, make_plugin
from ndebench.models.registry import list_models
from ndebench.platform.cli.main import main
from ndebench.platform.record.runs import evaluate_runs
from ndebench.platform.record.tracking import TAG, search
from ndebench.platform.report.statistics.effects import effect_sizes

pytestmark = pytest.mark.system
PARENT = "mlflow.parentRunId"
SPEC = {
    "study": "e2e",
    "description": "two models, one broken",
    "protocol": "paper",
    "models": ["neural_cde", "broken_cde"],
    "datasets": ["plugin_waves"],
    "regularizers": {"none": {}, "continuum_dropout": {"p": [0.1, 0.3], "m": [5, 10]}, "plugin_damped": {}},
    "model": {"hidden_size": 8},
    "training": {"epochs": 2, "min_epochs": 1, "patience": 1, "lr": [0.01, 0.005]},
    # The search stages run one trial at a time (one trial worker each, about 6 s of CPU less per stage); evaluate
    # runs two side by side (test_trials_of_different_cells_run_at_the_same_time).
    "base": {"max_concurrent": 1},
    "tune": {"sampler": "grid", "seed": 0, "max_concurrent": 1},
    "evaluate": {"seeds": [0, 1]},
    "resources": {"cpu": 1},
}


PLUGIN = '''
import os

import torch
from ndebench.datasets.registry import register_dataset
from ndebench.datasets.synthetic import synthetic
from ndebench.models.neural_cde import NeuralCDE
from ndebench.models.registry import register_model
from ndebench.regularizers.base import Regularizer
from ndebench.regularizers.registry import register_regularizer

register_dataset("plugin_waves", summary="the synthetic set, from a plugin")(synthetic)


@register_model("broken_cde", summary="raises while the file named by $NDEBENCH_TEST_BROKEN exists", paper="test")
class BrokenCDE(NeuralCDE):
    def latent(self, inputs, rng):
        if os.path.exists(os.environ["NDEBENCH_TEST_BROKEN"]):
            raise ValueError("broken_cde is broken")
        return super().latent(inputs, rng)


@register_regularizer("plugin_damped", summary="the drift times 0.9 in training")
class Damped(Regularizer):
    def modulate(self, draw, t, z, out, role):
        return 0.9 * out if role == "drift" else out
'''


def _run(args):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(args)
    return code, out.getvalue()


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    import ray

    root = tmp_path_factory.mktemp("sweep")
    flag = root / "broken.flag"
    flag.write_text("broken")
    assert "broken_cde" not in list_models()  # the registries are loaded before the plugin is installed
    pythonpath = make_plugin(root / "plugin", PLUGIN)["PYTHONPATH"]
    # Only the workers see this distribution record: trial runs must report the workers' torchcde version.
    (root / "workers" / "torchcde-0.0.0+worker.dist-info").mkdir(parents=True)
    (root / "workers" / "torchcde-0.0.0+worker.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: torchcde\nVersion: 0.0.0+worker\n")
    pythonpath = os.pathsep.join([str(root / "workers"), pythonpath])
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("NDEBENCH_TEST_BROKEN", str(flag))
        patch.syspath_prepend(str(root / "plugin"))
        ray.init(**local_ray_arguments(
            2, runtime_env={"env_vars": {"NDEBENCH_TEST_BROKEN": str(flag), "PYTHONPATH": pythonpath}}))
        config = root / "e2e.yaml"
        config.write_text(yaml.safe_dump(SPEC))
        uri = f"sqlite:///{root / 'mlflow.db'}"
        args = ["run", str(config), "--tracking-uri", uri, "--storage-path", (root / "ray").as_uri(),
                "--out", str(root / "reports")]
        code, out = _run(args)
        yield root, uri, args, code, out, flag
        ray.shutdown()


def _trials(uri, phase=None):
    runs = [r for r in search(uri, "e2e") if r.data.tags.get(f"{TAG}kind") == "trial"]
    return [r for r in runs if phase is None or r.data.tags[f"{TAG}phase"] == phase]


def _cell_runs(uri):
    return [r for r in search(uri, "e2e") if r.data.tags.get(f"{TAG}kind") == "cell"]


def test_grid_sampler_counts_under_the_paper_protocol(sweep):
    root, uri, args, code, out, flag = sweep
    base = [r for r in _trials(uri, "base") if r.data.tags[f"{TAG}model"] == "neural_cde"]
    assert sorted(float(r.data.params["training.lr"]) for r in base) == [0.005, 0.01]
    assert all(r.data.tags[f"{TAG}regularizer"] == "none" for r in base)
    tune = _trials(uri, "tune")
    assert len(tune) == 4 and {r.data.tags[f"{TAG}regularizer"] for r in tune} == {"continuum_dropout"}
    assert {(r.data.params["regularizer.p"], r.data.params["regularizer.m"]) for r in tune} == {
        ("0.1", "5"), ("0.1", "10"), ("0.3", "5"), ("0.3", "10")}


def test_trial_runs_record_the_regularizer_description_as_tags(sweep):
    root, uri, args, code, out, flag = sweep
    for run in _trials(uri, "tune"):
        tags = run.data.tags
        assert float(tags[f"{TAG}regularizer.p"]) == float(run.data.params["regularizer.p"])
        assert float(tags[f"{TAG}regularizer.m"]) == float(run.data.params["regularizer.m"])
        protocol = (tags[f"{TAG}regularizer.test_time"], tags[f"{TAG}n_mc"], tags[f"{TAG}test_protocol"])
        assert protocol == ("mc", "5", "mc5")
    none = [r for r in _trials(uri, "evaluate") if r.data.tags[f"{TAG}regularizer"] == "none"]
    assert none and all(r.data.tags[f"{TAG}regularizer.test_time"] == "deterministic" for r in none)


def test_trial_runs_record_their_own_workers_provenance(sweep):
    """The driver writes the study and cell runs with its libraries; each trial run, its worker's."""
    import torch

    root, uri, args, code, out, flag = sweep
    for run in _trials(uri):
        tags = run.data.tags
        assert tags[f"{TAG}lib.torchcde"] == "0.0.0+worker", run.info.run_name
        assert (tags[f"{TAG}torch_build"], tags[f"{TAG}cuda"]) == (torch.__version__, torch.version.cuda or "none")
        # Where its floating-point work ran: a rerun is bit-identical only with the same capability and threads.
        assert tags[f"{TAG}cpu_capability"] == torch.backends.cpu.get_cpu_capability()
        assert (tags[f"{TAG}threads"], tags[f"{TAG}gpu"]) == ("1", "none")
    for run in _cell_runs(uri):
        assert run.data.tags[f"{TAG}lib.torchcde"] == version("torchcde")


def test_every_regularizer_evaluates_with_the_base_stage_hyperparameters(sweep):
    root, uri, args, code, out, flag = sweep
    base = [r for r in _trials(uri, "base") if r.data.tags[f"{TAG}model"] == "neural_cde"]
    best_base = min(base, key=lambda r: r.data.metrics["val_loss"])
    best_tune = min(_trials(uri, "tune"), key=lambda r: r.data.metrics["val_loss"])
    evaluate = [r for r in _trials(uri, "evaluate") if r.data.tags[f"{TAG}model"] == "neural_cde"]
    assert sorted(r.data.tags[f"{TAG}regularizer"] for r in evaluate) == [
        "continuum_dropout", "continuum_dropout", "none", "none", "plugin_damped", "plugin_damped"]
    for run in evaluate:
        assert run.data.params["training.lr"] == best_base.data.params["training.lr"]
        assert run.data.params["model.hidden_size"] == "8" and run.data.params["training.epochs"] == "2"
        if run.data.tags[f"{TAG}regularizer"] == "continuum_dropout":
            assert run.data.params["regularizer.p"] == best_tune.data.params["regularizer.p"]
            assert run.data.params["regularizer.m"] == best_tune.data.params["regularizer.m"]


def test_mlflow_hierarchy_study_cell_trial(sweep):
    root, uri, args, code, out, flag = sweep
    runs = search(uri, "e2e")
    study = [r for r in runs if r.data.tags.get(f"{TAG}kind") == "study"]
    assert len(study) == 1
    study = study[0]
    assert study.data.tags["mlflow.note.content"] == "two models, one broken"
    assert study.data.params["protocol"] == "paper" and json.loads(study.data.params["evaluate.seeds"]) == [0, 1]
    from mlflow.tracking import MlflowClient

    assert "sweep.yaml" in {a.path for a in MlflowClient(uri).list_artifacts(study.info.run_id)}
    cells = {r.info.run_id: r for r in _cell_runs(uri)}
    assert all(r.data.tags[PARENT] == study.info.run_id for r in cells.values())
    assert {r.data.tags[f"{TAG}phase"] for r in cells.values()} == {"base", "tune", "evaluate"}
    for cell in cells.values():
        tags, phase = cell.data.tags, cell.data.tags[f"{TAG}phase"]
        name = " · ".join([tags[f"{TAG}regularizer"], tags[f"{TAG}model"], tags[f"{TAG}dataset"]])
        assert cell.info.run_name == (name if phase == "evaluate" else f"{name} · {phase}")
    for trial in _trials(uri):
        parent = cells[trial.data.tags[PARENT]]
        assert parent.data.tags[f"{TAG}phase"] == trial.data.tags[f"{TAG}phase"]
        assert parent.data.tags[f"{TAG}cell"] == trial.data.tags[f"{TAG}cell"]
    tune_cell = next(r for r in cells.values() if r.data.tags[f"{TAG}phase"] == "tune")
    best = min(_trials(uri, "tune"), key=lambda r: r.data.metrics["val_loss"])
    assert tune_cell.data.params == {k: best.data.params[k] for k in ("regularizer.p", "regularizer.m")}


def test_evaluate_runs_carry_their_calibration_bins_and_mean_epoch_times(sweep):
    from mlflow.tracking import MlflowClient
    from ndebench.platform.record.summaries import calibration_from_run, mean_over_epochs
    from ndebench.platform.record.tracking import epoch_values

    root, uri, args, code, out, flag = sweep
    client = MlflowClient(uri)
    ok = [r for r in _trials(uri, "evaluate") if r.data.tags[f"{TAG}status"] == "ok"]
    assert ok
    for trial in ok:
        run_id, metrics = trial.info.run_id, trial.data.metrics
        stored = client.download_artifacts(run_id, "calibration.json", str(root / run_id))
        assert calibration_from_run(metrics, trial.data.tags) == json.loads(Path(stored).read_text())
        assert not [k for k in metrics if k.startswith("calibration.")]
        for key in ("train_time_s", "epoch_time_s"):
            assert metrics[f"mean_{key}"] == mean_over_epochs(epoch_values(client, run_id, key))


def test_cell_runs_carry_the_evaluate_aggregates(sweep):
    root, uri, args, code, out, flag = sweep
    frame = evaluate_runs(uri, "e2e", with_calibration=False)
    cells = [r for r in _cell_runs(uri)
             if r.data.tags[f"{TAG}phase"] == "evaluate" and r.data.tags[f"{TAG}model"] == "neural_cde"]
    assert len(cells) == 3
    for cell in cells:
        regularizer = cell.data.tags[f"{TAG}regularizer"]
        accuracy = frame[(frame.model == "neural_cde") & (frame.regularizer == regularizer)].sort_values(
            "seed").test_accuracy
        assert cell.data.tags[f"{TAG}status"] == "done" and cell.data.metrics["n"] == 2
        assert cell.data.metrics["mean_test_accuracy"] == pytest.approx(accuracy.mean())
        assert cell.data.metrics["std_test_accuracy"] == pytest.approx(accuracy.std(ddof=1))
        assert ("p_value_vs_none" in cell.data.metrics) == (regularizer != "none")
        # The comparison with none on the primary metric under the report's test: with no report.test, the design's
        # (paired by seed under the paper protocol), as the report has it.
        baseline = frame[(frame.model == "neural_cde") & (frame.regularizer == "none")].sort_values(
            "seed").test_accuracy
        if regularizer != "none":
            assert cell.data.metrics["diff_vs_none"] == pytest.approx(accuracy.mean() - baseline.mean())
            for key, value in effect_sizes(accuracy, baseline, "paired").items():
                assert cell.data.metrics.get(key, math.nan) == pytest.approx(value, nan_ok=True), key
        else:
            assert not {"diff_vs_none", "diff_ci_low", "hedges_g"} & set(cell.data.metrics)
        # Params: only what the sweep chose for the cell (the base stage's lr, the regularizer stage's p and m).
        chosen = {"training.lr"} | ({"regularizer.p", "regularizer.m"} if regularizer == "continuum_dropout" else set())
        assert set(cell.data.params) == chosen
        trial = next(r for r in _trials(uri, "evaluate") if r.data.tags[PARENT] == cell.info.run_id)
        assert cell.data.params == {k: trial.data.params[k] for k in chosen}


def test_trials_of_different_cells_run_at_the_same_time(sweep):
    """A stage is one Ray Tune run over all its cells. The evaluate trials of different cells overlap in time; the
    base stage's broken-model trials fail within a second, so whether one meets a running trial depends on the
    machine's load: there the test checks that both cells' trials ran in the stage's one Tune experiment."""
    root, uri, args, code, out, flag = sweep
    runs = _trials(uri, "evaluate")
    assert [(a, b) for a in runs for b in runs
            if a.data.tags[f"{TAG}cell"] < b.data.tags[f"{TAG}cell"]
            and a.info.start_time < b.info.end_time and b.info.start_time < a.info.end_time]
    base = _trials(uri, "base")
    assert len({r.data.tags[f"{TAG}cell"] for r in base}) == 2
    assert len({r.data.tags[f"{TAG}trial_dir"].rsplit("/", 1)[0] for r in base}) == 1


def test_a_failing_model_fails_only_its_cells(sweep):
    root, uri, args, code, out, flag = sweep
    assert code == 1
    failed = [r for r in _cell_runs(uri) if r.data.tags[f"{TAG}status"] == "failed"]
    assert failed and {r.data.tags[f"{TAG}model"] for r in failed} == {"broken_cde"}
    assert all("broken_cde is broken" in r.data.tags[f"{TAG}error"] for r in failed)
    assert {r.data.tags[f"{TAG}regularizer"] for r in failed if r.data.tags[f"{TAG}phase"] == "evaluate"} == {
        "none", "continuum_dropout", "plugin_damped"}
    table = (root / "reports" / "e2e" / "table.md").read_text()
    assert "## Failed cells" in table and "broken_cde x plugin_waves x continuum_dropout" in table
    assert "broken_cde is broken" in out and len(out.splitlines()) < 120


def test_resume_after_the_fix_runs_only_the_failed_cells(sweep):
    root, uri, args, code, out, flag = sweep

    def finished_runs(model):
        return {(r.info.run_id, r.info.end_time) for r in _trials(uri) if r.data.tags[f"{TAG}model"] == model}

    working = finished_runs("neural_cde")
    flag.unlink()
    code, out = _run(args + ["--resume"])
    assert code == 0, out
    assert "rerun broken_cde x plugin_waves x none: failed, searched again from the start: base: " in out
    assert "rerun broken_cde x plugin_waves x plugin_damped seed 1: no run yet" in out
    assert finished_runs("neural_cde") == working
    broken = [r for r in _trials(uri) if r.data.tags[f"{TAG}model"] == "broken_cde"]
    fixed = [r.data.tags[f"{TAG}phase"] for r in broken if r.data.tags[f"{TAG}status"] == "ok"]
    assert sorted(fixed) == ["base"] * 2 + ["evaluate"] * 6 + ["tune"] * 4
    assert [r.data.tags[f"{TAG}phase"] for r in broken if r.data.tags[f"{TAG}status"] == "error"] == ["base"] * 2
    assert all(r.data.tags[f"{TAG}status"] == "done" for r in _cell_runs(uri))
    total = len(_trials(uri))
    again, _ = _run(args + ["--resume"])
    assert again == 0 and len(_trials(uri)) == total


def test_asha_stops_a_hopeless_trial_which_never_becomes_the_base_config(sweep, tmp_path, uri):
    """Under ``max_concurrent: 1`` the grid runs in order: lr 0.01 sets rung 1, then lr 1e-9 (which cannot learn)
    is below the rung's cutoff and ASHA stops it. Needs the per-epoch metrics in the trial's reports."""
    root, *_ = sweep
    spec = {"study": "asha", "protocol": "paper", "models": ["neural_cde"], "datasets": ["synthetic"],
            "regularizers": ["none"], "model": {"hidden_size": 8},
            "training": {"epochs": 4, "min_epochs": 4, "patience": 4, "lr": [0.01, 1e-9]},
            "base": {"sampler": "grid", "scheduler": "asha", "max_concurrent": 1,
                     "asha": {"grace_period": 1, "reduction_factor": 2}},
            "evaluate": {"seeds": [0]}, "resources": {"cpu": 1}, "report": {"figures": "none"}}
    config = tmp_path / "asha.yaml"
    config.write_text(yaml.safe_dump(spec))
    code, out = _run(["run", str(config), "--tracking-uri", uri, "--storage-path", str(tmp_path / "ray"),
                      "--out", str(tmp_path / "reports")])
    assert code == 0, out
    runs = [r for r in search(uri, "asha") if r.data.tags.get(f"{TAG}kind") == "trial"]
    base = {float(r.data.params["training.lr"]): r for r in runs if r.data.tags[f"{TAG}phase"] == "base"}
    assert base[1e-9].data.tags[f"{TAG}status"] == "stopped" and base[1e-9].info.status == "KILLED"
    assert base[0.01].data.tags[f"{TAG}status"] == "ok" and base[0.01].data.tags[f"{TAG}epochs"] == "4"
    evaluate = [r for r in runs if r.data.tags[f"{TAG}phase"] == "evaluate"]
    assert [float(r.data.params["training.lr"]) for r in evaluate] == [0.01]
