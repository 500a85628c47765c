"""A report reads a study in a few queries: run summaries on the run, readers that fall back for older runs,
figure modes, parallel drawing, report.html that stays usable, and ``ndebench bench scale``."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from fakes import without_fingerprint
from mlflow.tracking import MlflowClient
from ndebench.platform import api
from ndebench.platform.api import report_study
from ndebench.platform.bench.scale import trivial_sweep
from ndebench.platform.cli.main import main
from ndebench.platform.common.metrics import calibration_bins
from ndebench.platform.record import tracking
from ndebench.platform.record.bulk import write_trial
from ndebench.platform.record.recorder import TrialRecorder
from ndebench.platform.record.runs import evaluate_runs, runs_frame
from ndebench.platform.record.summaries import BIN_KEYS, calibration_from_run, calibration_tags, time_summaries
from ndebench.platform.record.synthetic import cells, trial
from ndebench.platform.report.render import drawing, figures, html_report
from ndebench.platform.report.report import build_report
from ndebench.platform.spec import plan

STUDY = "scaled"
EPOCH_KEYS = ("train_loss", "val_loss", "epoch_time_s", "train_time_s")


def _trial(regularizer: str, dataset: str, seed: int) -> tuple[dict, dict, list[dict], dict, dict]:
    rng = np.random.default_rng([len(regularizer), len(dataset), seed])
    identity = {"study": STUDY, "phase": "evaluate", "model": "neural_cde", "dataset": dataset,
                "regularizer": regularizer, "seed": str(seed), "metric": "accuracy", "cell": f"{dataset}-{regularizer}"}
    epochs = [{"train_loss": 0.7 - 0.1 * e + rng.uniform(0, 0.01), "val_loss": 0.72 - 0.1 * e,
               "epoch_time_s": rng.uniform(1, 2), "train_time_s": rng.uniform(0.1, 0.3) * (1 + e)} for e in range(4)]
    targets = rng.integers(0, 2, 60)
    probs = np.clip(0.5 + (targets - 0.5) * rng.uniform(0.0, 0.9, 60), 0.01, 0.99)
    bins = calibration_bins(np.stack([1 - probs, probs], axis=1), targets)
    final = {"test_accuracy": 0.7 + 0.1 * (regularizer == "none") + rng.normal(0, 0.02),
             "test_nll": 0.5 + rng.normal(0, 0.02), "test_ece": 0.05 + rng.uniform(0, 0.02)}
    return identity, {"regularizer": regularizer, "seed": seed}, epochs, final, bins


def _calibration_metrics(bins: dict) -> dict[str, float]:
    """The bins as the metrics runs recorded before the ``ndebench.calibration`` tag carry."""
    out = {"calibration.n_bins": float(bins["n_bins"])}
    for key in BIN_KEYS:
        out |= {f"calibration.{key}.{i}": float(v) for i, v in enumerate(bins[key])}
    return out


def _study(uri: str, layout: str) -> None:
    """Six runs per dataset, as the trainable records them now (``new``: calibration as a tag, time summaries),
    did before (``metrics``: calibration as 31 metrics) or before that (``old``: calibration only as
    ``calibration.json``, times only as per-epoch history)."""
    for dataset in ("uea/GunPoint", "uea/Epilepsy"):
        for regularizer in ("none", "continuum_dropout"):
            for seed in range(3):
                identity, config, epochs, final, bins = _trial(regularizer, dataset, seed)
                recorder = TrialRecorder(uri, STUDY, config, f"{dataset}-{regularizer}-{seed}", identity)
                for step, record in enumerate(epochs, start=1):
                    recorder.log_metrics(record, step=step)
                tags = {"num_classes": 2}
                if layout != "old":
                    final = final | time_summaries({k: [e[k] for e in epochs] for k in ("train_time_s",
                                                                                        "epoch_time_s")})
                if layout == "new":
                    tags |= calibration_tags(bins)
                if layout == "metrics":
                    final = final | _calibration_metrics(bins)
                recorder.finish("ok", final, tags, {"calibration.json": bins})


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    """The same study in the new layout and in the older ones, each reported (without figures: their inputs are
    compared directly)."""
    out = {}
    for layout in ("new", "metrics", "old"):
        root = tmp_path_factory.mktemp(layout)
        uri = f"sqlite:///{root / 'mlflow.db'}"
        _study(uri, layout)
        report_study(STUDY, uri, root / "reports", figures="none")  # figure inputs are compared below
        out[layout] = (uri, root / "reports" / STUDY)
    return out


def test_calibration_bins_survive_the_round_trip_through_the_tag_and_the_older_metrics():
    bins = calibration_bins(np.array([[0.2, 0.8], [0.9, 0.1], [0.45, 0.55]]), np.array([1, 0, 0]))
    tags = {f"ndebench.{k}": v for k, v in calibration_tags(bins).items()}
    assert list(tags) == ["ndebench.calibration"] and calibration_from_run({}, tags) == bins
    assert calibration_from_run(_calibration_metrics(bins), {}) == bins
    assert calibration_from_run({"test_accuracy": 1.0}, {}) is None
    assert time_summaries({"train_time_s": [1.0, 2.0], "epoch_time_s": []}) == {"mean_train_time_s": 1.5}
    # A trial run's metrics keep to what people read: no calibration.* metric beside test_ece.
    assert not [k for k in trial(cells(5)[0], 0, STUDY)["final"] if k.startswith("calibration")]


@pytest.mark.parametrize("layout", ["new", "metrics"])
def test_new_and_old_runs_give_the_same_report(both, layout):
    (new_uri, new), (old_uri, old) = both[layout], both["old"]
    # Everything but the fingerprint, which hashes the record itself (run ids).
    summaries = [json.loads((folder / "summary.json").read_text()) for folder in (new, old)]
    for summary in summaries:
        summary.pop("fingerprint")
    assert summaries[0] == summaries[1]
    ignore = ["run_id", "config_hash"]
    pd.testing.assert_frame_equal(pd.read_csv(new / "results.csv").drop(columns=ignore),
                                  pd.read_csv(old / "results.csv").drop(columns=ignore))
    for name in ("table.md", "timing.md"):
        assert without_fingerprint((new / name).read_text()) == without_fingerprint((old / name).read_text())
    # The figures' inputs: the calibration bins of each run and the per-run epoch times.
    key = ["dataset", "regularizer", "seed"]
    cal = [evaluate_runs(uri, STUDY).sort_values(key)["calibration"].tolist() for uri in (new_uri, old_uri)]
    assert cal[0] == cal[1] and all(isinstance(c, dict) for c in cal[0])
    times = [runs_frame(uri, STUDY).query("seed >= 0").sort_values(key)[["train_time_s", "epoch_time_s"]]
             .reset_index(drop=True) for uri in (new_uri, old_uri)]
    pd.testing.assert_frame_equal(times[0], times[1])
    assert times[0].notna().all().all()


def test_only_old_runs_cost_a_request_each(both, monkeypatch):
    calls = []
    for name in ("get_metric_history", "download_artifacts"):
        original = getattr(MlflowClient, name)
        monkeypatch.setattr(MlflowClient, name, lambda self, *a, _f=original, _n=name, **k: (calls.append(_n),
                                                                                              _f(self, *a, **k))[1])
    for layout, expected in (("new", 0), ("metrics", 0), ("old", 12 + 2 * 12)):
        calls.clear()
        evaluate_runs(both[layout][0], STUDY)
        runs_frame(both[layout][0], STUDY)
        assert len(calls) == expected, layout


def test_bulk_writer_records_what_the_trial_recorder_records(uri):
    kwargs = trial(cells(5)[0], 0, STUDY)
    recorder = TrialRecorder(uri, STUDY, kwargs["config"], kwargs["config_hash"], kwargs["tags"])
    for step, record in enumerate(kwargs["epochs"], start=1):
        recorder.log_metrics(record, step=step)
    recorder.finish(kwargs["status"], kwargs["final"], kwargs["final_tags"], kwargs["artifacts"])
    client = tracking.client(uri)
    bulk_id = write_trial(client, tracking.ensure_experiment(uri, STUDY), parent_run_id=None, **kwargs)
    one, two = client.get_run(recorder.run_id).data, client.get_run(bulk_id).data
    assert one.params == two.params and one.metrics == two.metrics and one.tags.keys() == two.tags.keys()
    assert {k: v for k, v in one.tags.items() if k != "mlflow.runName"} == {
        k: v for k, v in two.tags.items() if k != "mlflow.runName"}
    for key in ("train_time_s", "val_loss"):
        assert tracking.epoch_values(client, recorder.run_id, key) == tracking.epoch_values(client, bulk_id, key)
    assert [a.path for a in client.list_artifacts(bulk_id)] == ["calibration.json"]


def test_figure_modes_are_chosen_by_pairs_and_named(tmp_path):
    assert drawing.figure_mode("auto", 49)[0] == "all" and drawing.figure_mode("auto", 50)[0] == "summary"
    assert "report.figures: auto; 50 (model, dataset) pairs" in drawing.figure_mode("auto", 50)[1]
    with pytest.raises(ValueError, match="one of auto, all, summary, none"):
        drawing.figure_mode("some", 3)
    runs = pd.DataFrame([{"run_id": f"{d}{r}{s}", "study": "modes", "model": "m", "dataset": d, "regularizer": r,
                          "seed": s, "status": "ok", "metric": "accuracy", "test_accuracy": 0.5 + 0.1 * s + 0.01 * i}
                         for i, d in enumerate("abc") for r in ("none", "steer") for s in range(3)])
    names = {}
    for mode in ("all", "summary", "none"):
        files = build_report(runs, tmp_path / mode, "modes", figures=mode)
        names[mode] = {p.name.split("_")[0] for p in files.figures}
        summary = json.loads(files.summary_json.read_text())["figures"]
        assert summary["mode"] == mode and f"Figures: {mode}" in files.table_md.read_text()
    assert names == {"all": {"seeds"}, "summary": set(), "none": set()}


def test_many_figures_are_drawn_in_worker_processes_like_here(tmp_path):
    values = pd.DataFrame({"regularizer": ["none", "steer"] * 3, "value": np.arange(6, dtype=float)})
    jobs = [(figures.seed_plot, (values, ["none", "steer"], tmp_path / f"seeds_{i}.png", f"pair {i}", "accuracy"))
            for i in range(drawing.PARALLEL_FROM)]
    paths = drawing.draw(jobs, workers=2)
    assert paths == [tmp_path / f"seeds_{i}.png" for i in range(drawing.PARALLEL_FROM)]
    assert all(p.stat().st_size > 0 and p.with_suffix(".pdf").exists() for p in paths)


def test_report_html_collapses_pairs_and_links_figures_past_its_budget(tmp_path):
    values = pd.DataFrame({"regularizer": ["none"] * 3, "value": [0.1, 0.2, 0.3]})
    paths = [figures.seed_plot(values, ["none"], tmp_path / f"seeds_m_d{i}.png", "t", "y") for i in range(12)]
    budget = 3 * paths[0].stat().st_size
    sources = html_report.image_sources(paths, budget)
    inlined = [p for p in paths if sources[p].startswith("data:image/png;base64,")]
    assert 1 <= len(inlined) <= 3 and all(sources[p] == p.name for p in paths if p not in inlined)
    page = html_report.figures_section(paths, sources)
    assert page.count("<details>") == 12 and "<details open>" not in page  # more pairs than stay open


def test_bench_scale_prints_exactly_its_keys(capsys):
    assert main(["bench", "scale", "--runs", "12", "--workers", "1", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert list(result) == ["runs", "write_s", "report_s", "tracking_uri"] and result["runs"] == 12
    assert result["write_s"] > 0 and result["report_s"] > 0 and result["tracking_uri"].startswith("sqlite:///")
    assert [c[3] for c in cells(12)] == [5, 5, 2]


def test_bench_scale_reuse_study_writes_once_then_only_reports(uri, capsys):
    argv = ["bench", "scale", "--runs", "6", "--workers", "1", "--tracking-uri", uri, "--reuse-study", "--json"]
    assert main(argv) == 0
    first = json.loads(capsys.readouterr().out)
    assert main(argv) == 0
    second = json.loads(capsys.readouterr().out)
    assert first["write_s"] > 0 and second["write_s"] is None and second["report_s"] > 0
    trials = tracking.search(uri, "scale-6", "tags.`ndebench.phase` = 'evaluate' and tags.`ndebench.kind` = 'trial'")
    assert len(trials) == 6


def test_bench_scale_reuse_study_needs_a_tracking_uri(capsys):
    assert main(["bench", "scale", "--runs", "6", "--reuse-study"]) == 2
    assert "--reuse-study needs --tracking-uri" in capsys.readouterr().err


def test_bench_scale_takes_runs_or_trials_and_names_both(capsys):
    for argv in (["bench", "scale"], ["bench", "scale", "--runs", "5", "--trials", "5"]):
        assert main(argv) == 2
        assert "bench scale needs one of --runs N" in capsys.readouterr().err


def test_the_trivial_sweep_is_one_cell_of_n_trials_then_one_evaluate_run():
    spec = api.load(trivial_sweep("trivial", 37))
    assert api.validate(spec) == []
    stages = plan.plan_stages(spec)
    assert [(s.name, [c.budget for c in s.cells]) for s in stages if s.cells] == [("tune", [37])]
    assert spec.evaluate.seeds == (0,) and spec.resources.system_metrics is False


@pytest.mark.system
def test_bench_scale_trials_runs_them_on_a_simulated_cluster(capsys):
    assert main(["bench", "scale", "--trials", "4", "--nodes", "2", "--cpus-per-node", "1", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert list(result) == ["trials", "wall_s", "overhead_ms_per_trial", "driver_peak_rss_mb"]
    assert result["trials"] == 4 and result["wall_s"] > 0 and result["overhead_ms_per_trial"] > 0
    assert result["driver_peak_rss_mb"] > 100  # torch, Ray and MLflow are imported in the driver


def test_the_fifo_scheduler_picks_the_oldest_live_pending_trial_then_the_oldest_paused():
    from types import SimpleNamespace

    from ndebench.platform.engine.searcher import LiveFIFOScheduler
    from ray.tune.experiment import Trial

    class FakeTrial:  # hashed by identity, as Tune's trials are
        def __init__(self, index: int, status: str):
            self.index, self.status = index, status

    def controller(statuses):
        trials = [FakeTrial(i, s) for i, s in enumerate(statuses)]
        live = {t for t in trials if t.status not in (Trial.TERMINATED, Trial.ERROR)}
        return SimpleNamespace(get_trials=lambda: trials, get_live_trials=lambda: live)

    choose = LiveFIFOScheduler().choose_trial_to_run
    T, R, P, Z = Trial.TERMINATED, Trial.RUNNING, Trial.PENDING, Trial.PAUSED
    # A long runner early in the list, thousands of ended trials, then the pending ones: the oldest pending wins.
    assert choose(controller([T, R] + [T] * 5000 + [R, P, Z, P])).index == 5003
    assert choose(controller([Z, T, R, Z, Trial.ERROR])).index == 0
    assert choose(controller([T, R, T])) is None
    assert choose(controller([])) is None
