"""Outages are outages: a failure of the tracking store, the storage or the disk inside a trial leaves the trial's run
open and goes to Ray (which retries the trial from its checkpoint), never recorded as the method's failure; the
driver reads Ray's errors as text only. Without Ray: the trainable runs under a stand-in for ``ray.tune``."""
from __future__ import annotations

import errno
import sqlite3
from pathlib import Path
from types import SimpleNamespace

import pytest
import ray.tune
import requests
import sqlalchemy.exc
import torch
from mlflow.exceptions import MlflowException, RestException
from mlflow.tracking import MlflowClient
from ndebench.platform import api
from ndebench.platform.engine.progress import StageProgress
from ndebench.platform.engine.trainable import trainable
from ndebench.platform.failures.infrastructure import TrialInfrastructureError, infrastructure_failure, raised_in_trial
from ndebench.platform.record.schema import TAG
from ndebench.platform.record.tracking import client, search
from ndebench.platform.spec.plan import cell_template, sweep_cells

URI = "http://127.0.0.1:5000"
STORM = ("API request to http://127.0.0.1:5000/api/2.0/mlflow/runs/log-batch failed with exception "
         "HTTPConnectionPool(host='127.0.0.1', port=5000): Max retries exceeded (Caused by ResponseError('too many "
         "503 error responses'))")


def _chained(error: BaseException, cause: BaseException) -> BaseException:
    try:
        try:
            raise cause
        except BaseException as inner:  # noqa: BLE001 - the chain as Python builds it
            raise error from inner
    except BaseException as exc:  # noqa: BLE001
        return exc


@pytest.mark.parametrize("error,expected", [
    (MlflowException(STORM), f"the tracking store {URI} failed: MlflowException: {STORM}"),
    (RestException({"error_code": "TEMPORARILY_UNAVAILABLE", "message": "overloaded"}),
     f"the tracking store {URI} failed: RestException: TEMPORARILY_UNAVAILABLE: overloaded"),
    (requests.exceptions.ConnectionError("connection reset"),
     f"the tracking store {URI} failed: ConnectionError: connection reset"),
    (_chained(MlflowException("(sqlite3.OperationalError) database is locked"),
              sqlalchemy.exc.OperationalError("INSERT", {}, sqlite3.OperationalError("database is locked"))),
     f"the tracking store {URI} failed: OperationalError: (sqlite3.OperationalError) database is locked"),
    (OSError(errno.ENOSPC, "No space left on device", "/store/s/evaluate-1/t/checkpoint_000002/trial_state.pt"),
     "disk full: cannot write /store/s/evaluate-1/t/checkpoint_000002/trial_state.pt ([Errno 28] No space left on "
     "device: '/store/s/evaluate-1/t/checkpoint_000002/trial_state.pt')"),
    (OSError(errno.EIO, "Input/output error"),
     "storage or disk failed at /store: OSError: [Errno 5] Input/output error"),
    (_chained(RuntimeError("checkpoint upload failed"), OSError(errno.EROFS, "Read-only file system", "/store/x")),
     "storage or disk failed at /store/x: OSError: [Errno 30] Read-only file system: '/store/x'"),
    # The method's failures and bad input stay what they are.
    (ValueError("training.lr=-1 must be > 0"), None),
    (FileNotFoundError(errno.ENOENT, "No such file", "/data/x.ts"), None),
    (MlflowException("Run 'abc' not found"), None),
    (MlflowException("API request to http://127.0.0.1:5000/api/2.0/mlflow/runs/get failed with error code 403 != "
                     "200. Response body: 'forbidden'"), None),
    (RestException({"error_code": "INVALID_PARAMETER_VALUE", "message": "bad"}), None),
    (torch.cuda.OutOfMemoryError("CUDA out of memory"), None),
])
def test_what_counts_as_an_infrastructure_failure(error, expected):
    assert infrastructure_failure(error, URI, "/store") == expected


def test_the_failure_and_its_run_are_read_from_rays_text():
    text = ("Failure # 1 (occurred at 2026-11-26_06-00-00)\nray::ImplicitFunc.train() (pid=1, ip=10.0.0.1)\n"
            "  File \"trainable.py\", line 9, in run\nOSError: [Errno 28] No space left on device\n\n"
            "The above exception was the direct cause of the following exception:\n\n"
            "ndebench.platform.failures.infrastructure.TrialInfrastructureError: disk full: cannot write /x (No space) "
            f"(run {'a' * 32})\n")
    assert raised_in_trial(text) == ("disk full: cannot write /x (No space)", "a" * 32)
    assert raised_in_trial(text.replace(f" (run {'a' * 32})", "")) == ("disk full: cannot write /x (No space)", None)
    assert raised_in_trial("Traceback ...\nValueError: bad lr") is None


class _Trial:
    """What the progress callback reads of a Ray trial; unpickling its error is a test failure."""

    def __init__(self, error_file: Path, cell: str = "c"):
        self.error_file, self.config, self.last_result = str(error_file), {"cell": cell}, {"run_id": "b" * 32}
        self.trial_id = "t0"
        self.run_metadata = SimpleNamespace(pickled_error_filename="error.pkl")

    def get_pickled_error(self):
        raise AssertionError("the driver unpickled error.pkl")

    def get_error(self):
        raise AssertionError("the local error.txt was there to read")


def test_the_driver_reads_a_trials_error_as_text_and_ray_is_left_no_pickle_to_read(tmp_path):
    (tmp_path / "error.txt").write_text(
        "Failure # 1 (occurred at 2026-11-26_06-00-00)\nray.exceptions.ActorDiedError: The actor died\n"
        "Failure # 2 (occurred at 2026-11-26_06-00-09)\nTraceback ...\n"
        "ndebench.platform.failures.infrastructure.TrialInfrastructureError: the tracking store x failed: boom\n")
    progress = StageProgress("evaluate", {"c": 2}, {"c": "cell c"}, None, "min", print)
    trial, other = _Trial(tmp_path / "error.txt"), _Trial(tmp_path / "missing.txt")
    progress.on_trial_error(0, [trial], trial)
    outcome = progress.outcomes["c"][0]
    assert outcome["error"] == "the tracking store x failed: boom"  # the latest failure, not the worker lost before
    assert outcome["infrastructure"] == {"cause": "the tracking store x failed: boom", "run_id": "b" * 32,
                                         "run_ids": []}
    # Ray's ResultGrid unpickles error.pkl for each trial that names one: none is left named.
    progress.on_trial_recover(0, [other], other)
    assert trial.run_metadata.pickled_error_filename is None and other.run_metadata.pickled_error_filename is None
    other.run_metadata.pickled_error_filename = "error.pkl"
    progress.on_experiment_end([trial, other])
    assert other.run_metadata.pickled_error_filename is None


@pytest.fixture
def fake_tune(monkeypatch, tmp_path, uri):
    """``ray.tune`` as a trial sees it, without Ray: no checkpoint to restore, reports collected."""
    reports: list[dict] = []
    monkeypatch.setattr(ray.tune, "get_context", lambda: SimpleNamespace(get_trial_id=lambda: "t0001"))
    monkeypatch.setattr(ray.tune, "get_checkpoint", lambda: None)
    monkeypatch.setattr(ray.tune, "report", lambda metrics, checkpoint=None: reports.append(dict(metrics)))
    (tmp_path / "s.yaml").write_text("study: s\nmodels: [neural_cde]\ndatasets: [synthetic]\nregularizers: [none]\n"
                                     "model: {hidden_size: 8}\nevaluate: {seeds: [0]}\n"
                                     "training: {epochs: 3, min_epochs: 3, patience: 3, lr: 0.01}\n")
    spec = api.load(str(tmp_path / "s.yaml"))
    cell = sweep_cells(spec)[0]
    config = dict(cell_template(spec, cell), phase="evaluate", seed=0, device="cpu", data_dir=str(tmp_path))

    def run() -> None:
        trainable({"trial": "c#0"}, tracking_uri=uri, parents={}, evaluate_configs={"c#0": config},
                  storage_uri=str(tmp_path / "store"), experiment="s/evaluate-1", system_metrics=False)

    return SimpleNamespace(run=run, reports=reports, uri=uri)


def _trial_run(uri: str):
    runs = search(uri, "s", f"tags.`{TAG}kind` = 'trial'")
    assert len(runs) == 1
    return client(uri).get_run(runs[0].info.run_id)


def test_a_5xx_storm_inside_a_trial_goes_to_ray_with_the_run_left_open(fake_tune, monkeypatch):
    logged = MlflowClient.log_batch

    def log_batch(self, run_id, metrics=(), *args, **kwargs):
        if any(m.step == 2 for m in metrics):
            raise MlflowException(STORM)
        return logged(self, run_id, metrics, *args, **kwargs)

    monkeypatch.setattr(MlflowClient, "log_batch", log_batch)
    with pytest.raises(TrialInfrastructureError) as raised:
        fake_tune.run()
    run = _trial_run(fake_tune.uri)
    assert str(raised.value) == (f"the tracking store {fake_tune.uri} failed: MlflowException: {STORM} "
                                 f"(run {run.info.run_id})")
    assert run.data.tags[f"{TAG}status"] == "running" and run.info.status == "RUNNING"
    assert [r["status"] for r in fake_tune.reports] == ["running"]  # epoch 1's checkpoint report, nothing after


def test_enospc_on_a_checkpoint_goes_to_ray_with_the_run_left_open(fake_tune, monkeypatch):
    saved = torch.save

    def save(obj, path, *args, **kwargs):
        if str(path).endswith("trial_state.pt") and obj["epoch"] == 2:
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return saved(obj, path, *args, **kwargs)

    monkeypatch.setattr(torch, "save", save)
    full = r"^disk full: cannot write /\S+/trial_state.pt .* \(run \w{32}\)$"
    with pytest.raises(TrialInfrastructureError, match=full):
        fake_tune.run()
    assert _trial_run(fake_tune.uri).data.tags[f"{TAG}status"] == "running"


def test_the_methods_own_failure_is_still_recorded_as_error(fake_tune, monkeypatch):
    import ndebench.platform.engine.trainable as trainable_module

    def run_trial(*args, **kwargs):
        raise ValueError("the loss is not finite")

    monkeypatch.setattr(trainable_module, "run_trial", run_trial)
    fake_tune.run()
    run = _trial_run(fake_tune.uri)
    assert run.data.tags[f"{TAG}status"] == "error" and run.info.status == "FAILED"
    assert fake_tune.reports[-1]["status"] == "error"
    assert fake_tune.reports[-1]["message"] == "ValueError: the loss is not finite"


def test_a_full_artifact_store_after_training_goes_to_ray(fake_tune, monkeypatch):
    """Outside the training loop too (the final artifacts): Ray retries, the run is not closed."""
    def log_dict(self, run_id, dictionary, artifact_file):
        raise OSError(errno.ENOSPC, "No space left on device", f"/artifacts/{artifact_file}")

    monkeypatch.setattr(MlflowClient, "log_dict", log_dict)
    with pytest.raises(TrialInfrastructureError, match=r"^disk full: cannot write /artifacts/calibration.json"):
        fake_tune.run()
    assert _trial_run(fake_tune.uri).data.tags[f"{TAG}status"] == "running"
