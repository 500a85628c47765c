"""One driver per study, for real: the lease is taken by compare-and-set in the tracking store, a driver that
lost it writes nothing more, and liveness is the lease's own counter watched on the taker's clock.

Without Ray: the lease's states on a sqlite store. System lane: two drivers started in the same second (one
refused before Ray starts), and a paused driver taken over and resumed (it exits 3 at its next write and changes
no run of the new driver; the table equals an uninterrupted sweep's).
"""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest
from ndebench.platform.record import heartbeat
from ndebench.platform.record.fence import HOLDER, FencedClient, LeaseLostError, lease_name
from ndebench.platform.record.heartbeat import BEAT, RELEASED, DriverConflictError, Lease
from ndebench.platform.record.schema import TAG
from ndebench.platform.record.tracking import TrialRecorder, client, run_status, search, study_names

STUDY = "s"


@pytest.fixture
def uri(tmp_path, monkeypatch):
    monkeypatch.setenv(heartbeat.STALE_ENV, "1")
    return f"sqlite:///{tmp_path / 'mlflow.db'}"


def _hold(uri: str, epoch: int, holder: str = "elsewhere:1") -> str:
    """Epoch ``epoch`` of the lease, held by a driver of another machine; returns its experiment id."""
    return client(uri).create_experiment(lease_name(STUDY, epoch), tags={HOLDER: holder, BEAT: "0"})


def _lease(uri: str, epoch: int):
    return client(uri).get_experiment_by_name(lease_name(STUDY, epoch))


def _never_watched(*_):
    raise AssertionError("the counter was watched")


def test_a_fresh_study_is_leased_at_epoch_one_and_released_at_the_end(uri, monkeypatch):
    monkeypatch.setattr(heartbeat, "_beating", _never_watched)
    lease, previous = Lease.take(uri, STUDY, print)
    assert (lease.epoch, previous) == (1, None)
    assert _lease(uri, 1).tags[HOLDER] == f"{os.uname().nodename}:{os.getpid()}"
    time.sleep(4 * lease.interval)  # the counter moves
    assert int(_lease(uri, 1).tags[BEAT]) >= 2
    lease.release()
    assert _lease(uri, 1).tags[RELEASED] == "1"
    again, previous = Lease.take(uri, STUDY, print)  # a released lease is free at once
    assert (again.epoch, previous) == (2, None) and _lease(uri, 1).lifecycle_stage == "deleted"
    again.release()
    assert study_names(uri) == []  # a lease is no study


def test_a_moving_counter_is_a_live_driver(uri):
    experiment_id = _hold(uri, 1)
    stop = threading.Event()

    def beat():
        count = 0
        while not stop.wait(0.1):
            count += 1
            client(uri).set_experiment_tag(experiment_id, BEAT, str(count))

    thread = threading.Thread(target=beat)
    thread.start()
    try:
        with pytest.raises(DriverConflictError, match="is being run by another driver, elsewhere:1; "):
            Lease.take(uri, STUDY, print)
    finally:
        stop.set()
        thread.join()
    assert _lease(uri, 2) is None


def test_a_still_counter_is_taken_over_and_the_old_driver_is_fenced(uri):
    _hold(uri, 1)
    old = Lease(uri, STUDY, 1, _lease(uri, 1).experiment_id, interval=0.05)
    old._stopped.set()  # a paused driver: its counter stands still
    old._thread.join()
    old.check()  # still the newest epoch
    new, previous = Lease.take(uri, STUDY, print)
    assert (new.epoch, str(previous)) == (2, "elsewhere:1")
    with pytest.raises(LeaseLostError, match=r"lost its lease of study 's' \(epoch 1\): driver .* took it over"):
        old.check()
    fenced = FencedClient(client(uri), old.check)
    with pytest.raises(LeaseLostError):
        fenced.set_experiment_tag(new.experiment_id, RELEASED, "1")
    old.release()  # the old driver's stop frees nothing
    assert RELEASED not in _lease(uri, 2).tags and _lease(uri, 2).lifecycle_stage == "active"
    new.release()


def test_the_heartbeat_of_a_taken_over_driver_finds_it_lost(uri):
    _hold(uri, 1)
    old = Lease(uri, STUDY, 1, _lease(uri, 1).experiment_id, interval=0.05)
    _hold(uri, 2, "elsewhere:2")
    deadline = time.monotonic() + 30
    while old.fence.lost is None:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    with pytest.raises(LeaseLostError, match="driver elsewhere:2 took it over"):
        old.raise_if_lost()
    old.release()
    assert RELEASED not in _lease(uri, 2).tags


def test_a_driver_gone_from_this_machine_is_taken_over_at_once(uri, monkeypatch):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    experiment_id = _hold(uri, 1, f"{os.uname().nodename}:{int(dead.stdout)}")
    client(uri).set_experiment_tag(experiment_id, heartbeat.MACHINE, heartbeat._machine())
    monkeypatch.setattr(heartbeat, "_beating", _never_watched)
    lease, previous = Lease.take(uri, STUDY, print)
    assert lease.epoch == 2 and str(previous) == f"{os.uname().nodename}:{int(dead.stdout)}"
    lease.release()


def test_of_two_takers_of_one_epoch_exactly_one_wins(uri, monkeypatch):
    _hold(uri, 1, "winner:7")
    monkeypatch.setattr(heartbeat, "_newest", lambda *_: None)  # the loser read the store before the winner wrote
    with pytest.raises(DriverConflictError, match="another driver, winner:7;"):
        Lease.take(uri, STUDY, print)


def test_the_stale_limit_is_checked(monkeypatch):
    monkeypatch.setenv(heartbeat.STALE_ENV, "soon")
    with pytest.raises(ValueError, match=r"\$NDEBENCH_LEASE_STALE_S='soon': expected a positive number"):
        heartbeat.stale_s()


def test_a_trial_continues_an_older_drivers_run_and_stops_writing_once_fenced(uri):
    tags = {"study": STUDY, "phase": "evaluate", "model": "neural_cde", "dataset": "synthetic",
            "regularizer": "none", "seed": "0", "cell": "c", "trial_dir": "s/evaluate-1/a"}
    _hold(uri, 1)
    older = TrialRecorder(uri, STUDY, {"x": 1}, "h", tags | {"lease": "1"})
    _hold(uri, 2, "elsewhere:2")
    with pytest.raises(LeaseLostError):  # the old driver's trial, after the takeover
        older.log_metrics({"train_loss": 1.0}, step=1)
    with pytest.raises(LeaseLostError):
        TrialRecorder(uri, STUDY, {"x": 1}, "h2", tags | {"lease": "1"})
    newer = TrialRecorder(uri, STUDY, {"x": 1}, "h", tags | {"lease": "2"})
    assert newer.reattached and newer.run_id == older.run_id
    run, = search(uri, STUDY)
    assert run.data.tags[f"{TAG}lease"] == "2" and run_status(run) == "running"
    assert client(uri).get_metric_history(run.info.run_id, "train_loss") == []
