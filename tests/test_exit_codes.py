"""Exit codes a scheduler can act on: a tracking store, Ray or storage that cannot be reached or written exits 3
with one line naming it and the cause, before Ray starts where it can be known then, and an outage during the
sweep is never reported as bad input (2)."""
from __future__ import annotations

import socket
import sqlite3
import time

import pytest
import ray
import requests
import sqlalchemy.exc
import yaml
from fakes import free_port
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient
from ndebench.platform import api
from ndebench.platform.cli.main import main
from ndebench.platform.engine.runchecks import check_tracking_reachable
from ndebench.platform.failures.outage import InfrastructureError, outage

TINY = {"study": "codes", "models": ["neural_cde"], "datasets": ["synthetic"], "regularizers": ["none"],
        "model": {"hidden_size": 8}, "evaluate": {"seeds": [0]},
        "training": {"epochs": 1, "min_epochs": 1, "patience": 1, "lr": 0.01}}


@pytest.fixture
def config(tmp_path, monkeypatch) -> str:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "codes.yaml").write_text(yaml.safe_dump(TINY))
    return "codes.yaml"


def _one_line(capsys, code: int, argv: list[str]) -> str:
    """Run ``argv``; it exits ``code`` with one line of its own on stderr (MLflow may log its database set-up
    there), no traceback, and Ray never started."""
    assert main(argv) == code
    out, err = capsys.readouterr()
    ours = [line for line in err.splitlines() if line.startswith("ndebench ")]
    assert len(ours) == 1 and err.strip().endswith(ours[0]) and "Traceback" not in err, err
    assert "Ray cluster" not in out and not ray.is_initialized()
    return ours[0]


def test_an_unreachable_tracking_server_exits_3_before_ray_starts(config, tmp_path, capsys, monkeypatch):
    from ndebench.platform.engine import runchecks

    monkeypatch.setattr(runchecks, "SERVER_WAIT_S", 1.0)  # the wait for a starting server: its own test
    port = free_port()
    uri = f"http://127.0.0.1:{port}"
    started = time.monotonic()
    line = _one_line(capsys, 3, ["run", config, "--tracking-uri", uri])
    assert line == (f"ndebench run: error: --tracking-uri {uri}: no tracking server answers at 127.0.0.1:{port} "
                    "(ConnectionRefusedError: [Errno 111] Connection refused)")
    assert time.monotonic() - started < 30  # MLflow's own client would retry for minutes
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "ray_results").exists()


def test_a_listening_tracking_server_passes_the_probe():
    with socket.create_server(("127.0.0.1", 0)) as server:
        check_tracking_reachable(f"http://127.0.0.1:{server.getsockname()[1]}/prefix", timeout_s=2)


def test_a_sqlite_database_whose_folder_is_missing_exits_3(config, tmp_path, capsys):
    uri = f"sqlite:///{tmp_path}/gone/mlflow.db"
    line = _one_line(capsys, 3, ["run", config, "--tracking-uri", uri])
    assert line == (f"ndebench run: error: --tracking-uri {uri}: the database's folder {tmp_path / 'gone'} does "
                    "not exist")
    check_tracking_reachable(f"sqlite:///{tmp_path}/mlflow.db")


def test_a_storage_path_that_cannot_be_written_exits_3(config, tmp_path, capsys):
    (tmp_path / "afile").write_text("not a folder")
    line = _one_line(capsys, 3, ["run", config, "--storage-path", "afile/results"])
    assert line.startswith("ndebench run: error: --storage-path ") and "afile/results" in line
    assert "is not writable" in line


def test_ray_failing_to_start_exits_3(config, tmp_path, capsys, monkeypatch):
    def init(**kwargs):
        raise RuntimeError("the object store cannot be allocated\nsecond line")

    monkeypatch.setattr(ray, "init", init)
    line = _one_line(capsys, 3, ["run", config, "--storage-path", str(tmp_path / "ray")])
    assert line == ("ndebench run: error: Ray on this machine did not start: RuntimeError: the object store cannot be "
                    "allocated")


def _server_that_goes_away(monkeypatch) -> str:
    """A port that accepts connections while ``ndebench run`` probes it, and closes once the sweep starts,
    whose MLflow client then fails for real (no retries, so the test is quick)."""
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    server = socket.create_server(("127.0.0.1", 0))
    uri = f"http://127.0.0.1:{server.getsockname()[1]}"

    def sweep(spec, *, uri: str, **kwargs):
        server.close()
        MlflowClient(tracking_uri=uri).search_experiments()

    monkeypatch.setattr(api, "sweep", sweep)
    return uri


def test_a_tracking_server_lost_mid_sweep_exits_3_not_2(config, capsys, monkeypatch):
    uri = _server_that_goes_away(monkeypatch)
    line = _one_line(capsys, 3, ["run", config, "--tracking-uri", uri])
    assert line == (f"ndebench run: error: the tracking store {uri} failed: ConnectionRefusedError: [Errno 111] "
                    "Connection refused")


def _raised(error: BaseException, cause: BaseException | None = None) -> BaseException:
    try:
        try:
            if cause is not None:
                raise cause
        finally:
            raise error
    except BaseException as exc:  # noqa: BLE001 - the chain as Python builds it
        return exc


URI = "http://127.0.0.1:5000"


@pytest.mark.parametrize("error,expected", [
    # requests' connection errors are OSErrors, which the CLI reports as bad input when nothing else matches
    (requests.exceptions.ConnectionError("Max retries exceeded"),
     f"the tracking store {URI} failed: ConnectionError: Max retries exceeded"),
    (_raised(MlflowException("API request to http://127.0.0.1:5000/api/2.0/mlflow/runs/search failed with error "
                             "code 503 != 200")),
     f"the tracking store {URI} failed: MlflowException: API request to http://127.0.0.1:5000/api/2.0/mlflow/runs/"
     "search failed with error code 503 != 200"),
    (_raised(MlflowException("(sqlite3.OperationalError) unable to open database file"),
             sqlalchemy.exc.OperationalError("SELECT 1", {}, sqlite3.OperationalError("unable to open database file"))),
     f"the tracking store {URI} failed: OperationalError: (sqlite3.OperationalError) unable to open database file"),
    (_raised(RuntimeError("stage tune"), InfrastructureError("Ray at 10.0.0.1:6379 did not start: ConnectionError")),
     "Ray at 10.0.0.1:6379 did not start: ConnectionError"),
    (ray.exceptions.RaySystemError("the GCS is gone"), "Ray failed: RaySystemError: System error: the GCS is gone"),
    # How Ray 2.60's Tune raises a trial worker's kill by the memory monitor out of fit()
    (_raised(RuntimeError("Caught unexpected exception: 1 worker(s) were killed"),
             ray.exceptions.OutOfMemoryError("1 worker(s) were killed due to the node running low on memory. Memory "
                                             "on the node was 21.78GB used / 23.54GB limit (0.925186)\nOOM kill")),
     "Ray's memory monitor killed a trial's worker: OutOfMemoryError: 1 worker(s) were killed due to the node running "
     "low on memory. Memory on the node was 21.78GB used / 23.54GB limit (0.925186); a stack of trials "
     "(resources.stack, default 32) trains in one process and needs about as many times one trial's memory: lower "
     "resources.stack (e.g. --set resources.stack=8) and continue with `ndebench run ... --resume`"),
    (ValueError("training.epochs=0 must be an integer >= 1"), None),
    (requests.exceptions.InvalidURL("no host"), None),
    (MlflowException("Run 'abc' not found"), None),
])
def test_what_counts_as_an_outage(error, expected):
    assert outage(error, URI) == expected


@pytest.mark.parametrize("error,code", [
    (requests.exceptions.ConnectionError("connection reset by peer"), 3),
    (sqlalchemy.exc.OperationalError("SELECT 1", {}, sqlite3.OperationalError("disk I/O error")), 3),
    (ValueError("a bad value"), 2),
])
def test_the_cli_maps_outages_to_3_and_bad_values_to_2(config, capsys, monkeypatch, error, code):
    def sweep(spec, **kwargs):
        raise error

    monkeypatch.setattr(api, "sweep", sweep)
    _one_line(capsys, code, ["run", config])



def test_the_last_line_says_diverged_only_when_a_run_diverged(monkeypatch):
    from ndebench.platform.engine import runchecks
    from ndebench.platform.spec.config import parse_spec

    spec = parse_spec({"study": "s", "models": ["neural_cde"], "datasets": ["synthetic"], "regularizers": ["none"],
                       "evaluate": {"seeds": [0, 1]}})
    for statuses, line in [(["ok", "ok"], "all 2 planned evaluate run(s) ok"),
                           (["ok", "diverged"], "all 2 planned evaluate run(s) ok or diverged (1 diverged)")]:
        monkeypatch.setattr(runchecks, "planned_statuses", lambda uri, study, cells, seeds, s=statuses: {
            (cells[0], seed): status for seed, status in zip(seeds, s, strict=True)})
        ending = runchecks.run_exit(spec, "sqlite:///unused.db", {}, [])
        assert (ending.code, ending.ok_line()) == (0, line)
