"""One driver per study, for real: the lease is taken by compare-and-set in the study's own experiment, a driver
that lost it writes nothing more, and liveness is the lease's own counter watched on the taker's clock.

Without Ray: the lease's states on a sqlite and a PostgreSQL store, hand-made records included (a newer epoch, a
deleted lease run, records without a holder). System lane: two takers of a new study started together 20 times on
each store and 20 times through `ndebench server` on PostgreSQL, one holder each time; two drivers started in the
same second (one refused before Ray starts), then one study handed over three times: a paused driver taken over
and resumed (it exits 3 at its next write and changes no run of the new driver), the new driver's lease run
deleted (it exits 3 saying so), the next driver outbid (exit 3), and a last resume whose table equals an
uninterrupted sweep's.
"""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from fakes import cli, count_rows, without_fingerprint
from ndebench.platform.record.lease import fence, heartbeat
from ndebench.platform.record.lease.fence import Fence, LeaseLostError, fence_writes, raise_if_driver_lost
from ndebench.platform.record.lease.heartbeat import DriverConflictError, Lease
from ndebench.platform.record.lease.ledger import (
    beat_tag,
    claim,
    claims,
    every_run,
    lease_runs,
    new_lease_run,
    released_tag,
    token,
)
from ndebench.platform.record.recorder import TrialRecorder
from ndebench.platform.record.runs import evaluate_runs
from ndebench.platform.record.schema import PARENT, TAG
from ndebench.platform.record.system_metrics import system_metrics
from ndebench.platform.record.tracking import client, ensure_experiment, run_status, search, study_names, study_run
from ndebench.platform.report.integrity import ledger_flags

STUDY = "s"


@pytest.fixture
def uri(store_uri, monkeypatch):
    monkeypatch.setenv(heartbeat.STALE_ENV, "1")
    return store_uri


def _ledger(uri: str) -> str:
    """The study's (first) lease run, made if missing."""
    experiment_id = ensure_experiment(uri, STUDY)
    runs = [r for r in lease_runs(client(uri), experiment_id) if r.info.lifecycle_stage == "active"]
    return min(r.info.run_id for r in runs) if runs else new_lease_run(client(uri), experiment_id, STUDY)


def _hold(uri: str, epoch: int, holder: str = "elsewhere:1", machine: str = "another machine") -> tuple[str, str]:
    """Epoch ``epoch`` of the lease, claimed by a driver of another machine; its lease run and claim id."""
    run_id, lease_id = _ledger(uri), f"id-{holder}-{epoch}"
    assert claim(client(uri), run_id, epoch, token(holder, machine, lease_id)) is None
    return run_id, lease_id


def _claims(uri: str) -> dict[int, list]:
    found: dict[int, list] = {}
    for c in claims(lease_runs(client(uri), ensure_experiment(uri, STUDY))):
        found.setdefault(c.epoch, []).append(c)
    return found


def _never_watched(*_):
    raise AssertionError("the counter was watched")


def _eventually(holds, seconds: float = 20.0) -> None:
    """``holds()`` becomes true within ``seconds`` (a heartbeat every 1/6 s, on a loaded machine)."""
    deadline = time.monotonic() + seconds
    while not holds():
        assert time.monotonic() < deadline, "never held"
        time.sleep(0.05)


def _experiments(uri: str) -> list[str]:
    return sorted(e.name for e in client(uri).search_experiments())


def test_a_fresh_study_is_leased_at_epoch_one_and_released_at_the_end(uri, monkeypatch):
    monkeypatch.setattr(heartbeat, "_moving", _never_watched)
    lease, previous = Lease.take(uri, STUDY, print)
    assert (lease.epoch, previous) == (1, None)
    mine, = _claims(uri)[1]
    assert (mine.holder, mine.id) == (f"{os.uname().nodename}:{os.getpid()}", lease.lease_id)
    _eventually(lambda: int(_claims(uri)[1][0].beat) >= 2)  # the counter moves
    lease.release()
    assert _claims(uri)[1][0].released
    again, previous = Lease.take(uri, STUDY, print)  # a released lease is free at once
    assert (again.epoch, previous, again.run_ids) == (2, None, lease.run_ids)
    again.release()
    # The lease lives in the study's experiment: no experiment beside the study, no run a reader sees.
    assert _experiments(uri) == ["Default", STUDY] and study_names(uri) == [STUDY] and search(uri, STUDY) == []


@contextlib.contextmanager
def _beating(uri: str, run_id: str):
    """A live driver's counter of epoch 1, moved every 0.1 s on ``run_id`` while the block runs."""
    stop = threading.Event()

    def beat():
        count = 0
        while not stop.wait(0.1):
            count += 1
            client(uri).set_tag(run_id, beat_tag(1), str(count))

    thread = threading.Thread(target=beat)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def test_a_moving_counter_is_a_live_driver(uri):
    run_id, _ = _hold(uri, 1)
    with _beating(uri, run_id):
        with pytest.raises(DriverConflictError, match="is being run by another driver, elsewhere:1; "):
            Lease.take(uri, STUDY, print)
    assert 2 not in _claims(uri)


def test_every_unreleased_epoch_is_watched_not_only_the_newest(uri):
    """A still, hand-made epoch 2 above a live epoch 1 does not let a second driver in beside the first."""
    run_id, _ = _hold(uri, 1, "live:1")
    _hold(uri, 2, "made-up:2")
    with _beating(uri, run_id):
        with pytest.raises(DriverConflictError, match="another driver, live:1; "):
            Lease.take(uri, STUDY, print)
    assert 3 not in _claims(uri)


def _paused(uri: str, epoch: int = 1) -> Lease:
    """A driver holding ``epoch`` whose counter stands still (paused)."""
    run_id, lease_id = _hold(uri, epoch)
    lease = Lease(uri, STUDY, epoch, lease_id, [run_id], interval=0.05)
    lease._stopped.set()
    lease._thread.join()
    return lease


def test_a_still_counter_is_taken_over_and_the_old_driver_is_fenced(uri, monkeypatch):
    old = _paused(uri)
    old.check()  # still the newest epoch
    new, previous = Lease.take(uri, STUDY, print)
    assert (new.epoch, str(previous)) == (2, "elsewhere:1")
    with pytest.raises(LeaseLostError, match=r"lost its lease of study 's' \(epoch 1\): driver .* took it over "
                                             r"\(lease epoch 2\); it stopped writing, and the study goes on"):
        old.check()
    fence_writes(old.fence)  # as the old driver's process: every client's writes are checked
    try:
        with pytest.raises(LeaseLostError):
            client(uri).set_tag(new.run_ids[0], released_tag(2), "1")
        with pytest.raises(LeaseLostError):
            raise_if_driver_lost()
        assert not _claims(uri)[2][0].released  # reads go through
    finally:
        fence_writes(None)
    old.release()  # the old driver's stop marks its own epoch released, nothing of the new one's
    assert _claims(uri)[1][0].released and _claims(uri)[2][0].held
    new.release()
    monkeypatch.setattr(heartbeat, "_moving", _never_watched)  # both released: the next take watches nothing
    last, previous = Lease.take(uri, STUDY, print)
    assert (last.epoch, previous) == (3, None)
    last.release()


def test_the_heartbeat_of_a_taken_over_driver_finds_it_lost(uri):
    run_id, lease_id = _hold(uri, 1)
    old = Lease(uri, STUDY, 1, lease_id, [run_id], interval=0.05)
    _hold(uri, 2, "elsewhere:2")
    deadline = time.monotonic() + 30
    while old.fence.lost is None:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    with pytest.raises(LeaseLostError, match="driver elsewhere:2 took it over"):
        raise old.fence.lost
    old.release()
    assert _claims(uri)[1][0].released and not _claims(uri)[2][0].released


def test_deleting_the_held_lease_run_fences_its_driver_without_naming_another(uri, monkeypatch):
    monkeypatch.setattr(heartbeat, "_moving", _never_watched)
    lease, _ = Lease.take(uri, STUDY, print)
    client(uri).delete_run(lease.run_ids[0])
    deadline = time.monotonic() + 30
    while lease.fence.lost is None:  # found by the heartbeat, whose beats the store now refuses
        assert time.monotonic() < deadline
        time.sleep(0.05)
    message = str(lease.fence.lost)
    assert f"its lease run {lease.run_ids[0]} was deleted; it stopped writing, and no driver holds" in message
    assert "took it over" not in message
    lease.release()
    # A deleted run numbers nothing (deleting is the remedy for a record no driver wrote); the fenced driver's own
    # claim is in it, so it stays fenced while a new driver claims epoch 1 afresh.
    again, previous = Lease.take(uri, STUDY, print)
    assert again.epoch == 1 and again.run_ids != lease.run_ids and previous is None
    with pytest.raises(LeaseLostError, match="was deleted"):
        lease.fence.check(fresh=True)
    again.release()


def test_records_without_holder_machine_or_counter_are_ignored_but_keep_their_number(uri, monkeypatch):
    monkeypatch.setattr(heartbeat, "_moving", _never_watched)
    lease, _ = Lease.take(uri, STUDY, print)
    run_id = lease.run_ids[0]
    client(uri).log_param(run_id, "ndebench.lease.5", "{}")  # no holder, machine, id or counter
    client(uri).log_param(run_id, "ndebench.lease.6", token("x:1", "m", "i"))  # no counter
    lease.check()
    lease.release()
    again, _ = Lease.take(uri, STUDY, print)
    assert again.epoch == 7
    again.release()


def test_a_driver_gone_from_this_machine_is_taken_over_at_once(uri, monkeypatch):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    _hold(uri, 1, f"{os.uname().nodename}:{int(dead.stdout)}", heartbeat._machine())
    monkeypatch.setattr(heartbeat, "_moving", _never_watched)
    lease, previous = Lease.take(uri, STUDY, print)
    assert lease.epoch == 2 and str(previous) == f"{os.uname().nodename}:{int(dead.stdout)}"
    lease.release()


def test_of_two_takers_of_one_epoch_exactly_one_wins(uri, monkeypatch):
    _hold(uri, 1, "winner:7")
    monkeypatch.setattr(heartbeat, "claims", lambda *_: [])  # the loser read the store before the winner wrote
    with pytest.raises(DriverConflictError, match="another driver, winner:7;"):
        Lease.take(uri, STUDY, print)


def test_two_takers_that_each_made_a_lease_run_meet_in_one(uri, monkeypatch):
    """Two drivers of a new study that each found no lease run and made one: each claims its epoch in every
    lease run it sees, in run id order, so the later one meets the first one's claim and backs off."""
    experiment_id = ensure_experiment(uri, STUDY)
    runs = sorted(new_lease_run(client(uri), experiment_id, STUDY) for _ in range(2))
    assert claim(client(uri), runs[1], 1, token("winner:7", "m", "w")) is None  # the winner saw only its own run
    monkeypatch.setattr(heartbeat, "claims", lambda *_: [])
    with pytest.raises(DriverConflictError, match="another driver, winner:7;"):
        Lease.take(uri, STUDY, print)
    loser, = [c for c in _claims(uri)[1] if c.run_id == runs[0]]
    assert loser.released  # what the loser claimed before meeting the winner is released


TAKER = """
import faulthandler, sys, time
from pathlib import Path
from ndebench.platform.record.lease.heartbeat import DriverConflictError, Lease
from ndebench.platform.record.store import raw_client
uri, go, me, rounds = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
raw_client(uri)  # the database's schema, before the first start
for n in range(rounds):
    faulthandler.dump_traceback_later(200)  # a round that hangs says where (the test waits 300 s)
    Path(f"{go}.ready{me}.{n}").touch()
    while not Path(f"{go}.{n}").exists():
        time.sleep(0.005)
    try:
        lease, _ = Lease.take(uri, f"s{n}", lambda line: None)
    except DriverConflictError:
        print(n, "refused", flush=True)
        Path(f"{go}.{n}.refused").touch()
    else:
        print(n, f"took {lease.epoch}", flush=True)
        deadline = time.monotonic() + 30  # held until the other one is refused (a second taker would wait it out)
        while not Path(f"{go}.{n}.refused").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        lease.release()
"""
RACES = 20


def _race(uri: str, go: Path) -> None:
    """Two taker processes of :data:`TAKER` on ``uri``, started together on each of :data:`RACES` new studies:
    each time exactly one holds epoch 1 and the other is refused."""
    takers = [subprocess.Popen([sys.executable, "-c", TAKER, uri, str(go), str(i), str(RACES)],
                               stdout=subprocess.PIPE, text=True, env=os.environ | {heartbeat.STALE_ENV: "4"})
              for i in range(2)]
    outputs = None
    try:
        for n in range(RACES):
            deadline = time.monotonic() + 300
            while not all(Path(f"{go}.ready{i}.{n}").exists() for i in range(2)):
                if time.monotonic() > deadline or any(t.poll() is not None for t in takers):
                    break
                time.sleep(0.01)
            else:
                Path(f"{go}.{n}").touch()  # both are waiting on it
                continue
            break
        else:
            outputs = [t.communicate(timeout=300)[0] for t in takers]
    finally:
        for taker in takers:
            taker.kill()
        said = [t.communicate()[0] for t in takers] if outputs is None else outputs
    assert outputs is not None, f"round {n} never started: {said}"
    outcomes: dict[int, list[str]] = {}
    for line in "".join(outputs).splitlines():
        n, _, outcome = line.partition(" ")
        outcomes.setdefault(int(n), []).append(outcome)
    assert {n: sorted(found) for n, found in outcomes.items()} == {n: ["refused", "took 1"] for n in range(RACES)}
    for n in range(RACES):  # each made a lease run and they met in one, or the second found the first's
        assert len(lease_runs(client(uri), ensure_experiment(uri, f"s{n}"))) in (1, 2)


@pytest.mark.system
def test_two_drivers_of_a_new_study_started_together_one_takes_it_twenty_times_over(uri, tmp_path):
    """Without Ray: two processes take a fresh study's lease at the same instant (each finds no lease run and
    makes one), 20 studies in a row: each time exactly one holds epoch 1 and the other is refused. On PostgreSQL
    the two takes run as concurrent transactions, where sqlite serialises every write."""
    _race(uri, tmp_path / "go")


@pytest.mark.system
def test_two_drivers_through_a_server_on_postgresql_one_takes_it_twenty_times_over(postgres_cluster, tmp_path):
    """The team deployment: ``ndebench server --backend-store-uri postgresql://...`` with two workers (requests
    served side by side, each its own database transaction); the race of two takers as above, through it."""
    from fakes import drain, free_port, read_until, wait_healthy

    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "ndebench.platform", "server", "--port", str(port),
                               "--workers", "2", "--backend-store-uri", postgres_cluster.new_store()],
                              cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              start_new_session=True)
    try:
        wait_healthy(port, server)
        assert "runs in postgresql://postgres@127.0.0.1:" in read_until(server, "listening on")
        drain(server)  # else its log fills the pipe after about 15 rounds and every request hangs
        _race(f"http://127.0.0.1:{port}", tmp_path / "go")
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)


def test_a_study_of_the_older_lease_is_numbered_from_its_runs_and_its_old_experiments_leave_the_list(uri,
                                                                                                    monkeypatch):
    """A study recorded when the lease was experiments ``S::lease::<n>``: a resume numbers above its trial runs'
    epochs (so the reattach rule, lease <= own, holds for them), not above names anyone may create, and deletes
    the active old experiment it can."""
    monkeypatch.setattr(heartbeat, "_moving", _never_watched)
    client(uri).create_experiment(f"{STUDY}::lease::4", tags={f"{TAG}kind": "lease"})
    client(uri).create_experiment(f"{STUDY}::lease::9")  # a name, not a lease
    old = client(uri).create_run(ensure_experiment(uri, STUDY), tags={f"{TAG}kind": "trial", f"{TAG}lease": "4"})
    lease, _ = Lease.take(uri, STUDY, print)
    assert lease.epoch == 5 and study_names(uri) == [STUDY]
    lease.release()
    assert _experiments(uri) == ["Default", STUDY, f"{STUDY}::lease::9"] and old.info.run_id


def test_a_driver_of_this_release_keeps_the_older_lease_alive_beside_its_own(uri, monkeypatch):
    """What a driver of a release before the lease moved into the study reads (the newest ``S::lease::<n>``,
    deleted ones included, held while active and unreleased, live while ``ndebench.lease.beat`` moves): held and
    moving while a driver of this release runs, deleted when it ends."""
    from ndebench.platform.record.lease import legacy

    monkeypatch.setattr(heartbeat, "_moving", _never_watched)
    client(uri).create_experiment(f"{STUDY}::lease::3", tags={f"{TAG}kind": "lease"})
    lease, _ = Lease.take(uri, STUDY, print)
    assert lease.epoch == 1
    newest = client(uri).get_experiment(lease.legacy_id)
    assert newest.name == f"{STUDY}::lease::4" and newest.lifecycle_stage == "active"
    assert newest.tags[legacy.HOLDER] == f"{os.uname().nodename}:{os.getpid()}"
    _eventually(lambda: int(client(uri).get_experiment(lease.legacy_id).tags[legacy.BEAT]) >= 2)
    lease.release()
    ended = client(uri).get_experiment(lease.legacy_id)
    assert ended.lifecycle_stage == "deleted" and legacy.RELEASED in ended.tags
    # The name taken by someone else between the read and the create: no older lease, and no stop.
    client(uri).create_experiment(f"{STUDY}::lease::1")
    monkeypatch.setattr(legacy, "old_lease_experiments", lambda *_: [])
    said: list[str] = []
    again, _ = Lease.take(uri, STUDY, said.append)
    assert again.legacy_id is None and said[0].startswith(f"the lease of the older format ('{STUDY}::lease::1')")
    again.release()


def test_names_and_records_that_name_no_epoch_never_stop_a_take(uri, monkeypatch):
    """The review's lock-outs: experiments ``s::lease::²`` (``str.isdigit`` took it, ``int`` did not) and
    ``s::lease::`` + 240 nines (the next claim's key past 250 characters), which any signed-in user may create,
    and a writer's record ``ndebench.lease.<235 nines>`` without a counter: ignored, named in one line."""
    monkeypatch.setattr(heartbeat, "_moving", _never_watched)
    for end in ("\u00b2", "9" * 240, "007", "-1"):
        client(uri).create_experiment(f"{STUDY}::lease::{end}")
    lease, _ = Lease.take(uri, STUDY, print)
    assert lease.epoch == 1
    client(uri).log_param(lease.run_ids[0], "ndebench.lease." + "9" * 235, token("x:1", "m", "i"))
    lease.check()  # the running driver ignores it too
    lease.release()
    said: list[str] = []
    again, _ = Lease.take(uri, STUDY, said.append)
    assert again.epoch == 2
    assert said == [f"ignoring 1 lease record(s) that name no epoch (1 to 9 ASCII digits), e.g. "
                    f"'ndebench.lease.{'9' * 25}'... in run {lease.run_ids[0]}"]
    again.release()


def test_epochs_are_numbered_from_every_claim_in_the_study_whatever_the_runs_tags(uri, monkeypatch):
    """Retagging a lease run (``ndebench.kind``) hides its claims from the lease's readers, not from numbering:
    the next taker never claims an epoch used before."""
    monkeypatch.setattr(heartbeat, "_moving", _never_watched)
    lease, _ = Lease.take(uri, STUDY, print)
    client(uri).log_param(lease.run_ids[0], "ndebench.lease.3", token("x:1", "m", "i"))
    client(uri).set_tag(lease.run_ids[0], f"{TAG}kind", "x")
    again, _ = Lease.take(uri, STUDY, print)
    assert again.epoch == 4 and again.run_ids != lease.run_ids
    again.release()


def test_an_epoch_past_the_last_is_refused_in_one_line(uri, monkeypatch):
    monkeypatch.setattr(heartbeat, "_moving", _never_watched)
    _, _ = _hold(uri, 999_999_999)
    client(uri).set_tag(_ledger(uri), released_tag(999_999_999), "1")
    with pytest.raises(DriverConflictError, match=rf"^study 's': a lease record of epoch 999999999 in run "
                                                  rf"{_ledger(uri)} leaves no epoch to claim \(at most 999999999\); "
                                                  rf"no driver counts that high, so a writer made it: an admin "
                                                  rf"deletes run {_ledger(uri)}"):
        Lease.take(uri, STUDY, print)


def test_a_renamed_study_fences_its_driver_naming_the_new_name_and_the_next_take_says_where_it_went(uri,
                                                                                                   monkeypatch):
    """Renaming the study's experiment mid-sweep (``EDIT`` allows it): the driver's fence holds the experiment id
    of its take, so it stops writing at once, naming the new name, instead of writing beside a new experiment of
    the old name; the next take of the study (a ``--resume``) says where its record went."""
    monkeypatch.setattr(heartbeat, "_moving", _never_watched)
    lease, _ = Lease.take(uri, STUDY, print)
    experiment_id = ensure_experiment(uri, STUDY)
    client(uri).rename_experiment(experiment_id, "s-old")
    with pytest.raises(LeaseLostError, match=rf"\(epoch 1\): the study's experiment \(id {experiment_id}\) was "
                                             r"renamed to 's-old'; it stopped writing \(rename it back to 's'"):
        lease.check()
    lease.release()
    said: list[str] = []
    again, _ = Lease.take(uri, STUDY, said.append)
    assert again.epoch == 1
    assert [line for line in said if "renamed away" in line] == [
        f"this driver starts study 's' in experiment {ensure_experiment(uri, STUDY)}; experiment 's-old' (id "
        f"{experiment_id}) holds a lease run tagged as 's''s, as a study renamed away would, but anyone may make "
        "such a run: ask an admin who made it before trusting its runs"]
    again.release()


def test_a_trial_of_a_renamed_study_checks_its_fence_in_the_take_experiment_before_it_makes_anything(uri,
                                                                                                    monkeypatch):
    """A trial that starts after the study's experiment was renamed under its driver stops at its fence (read in
    the experiment of the take), naming the new name, and creates no experiment of the old name."""
    monkeypatch.setattr(heartbeat, "_moving", _never_watched)
    lease, _ = Lease.take(uri, STUDY, print)
    assert lease.experiment_id == ensure_experiment(uri, STUDY)
    client(uri).rename_experiment(lease.experiment_id, "s-old")
    tags = {"study": STUDY, "phase": "evaluate", "model": "neural_cde", "dataset": "synthetic", "regularizer": "none",
            "seed": "0", "cell": "c", "lease": "1", "lease_id": lease.lease_id,
            "lease_experiment": lease.experiment_id}
    with pytest.raises(LeaseLostError, match=rf"\(id {lease.experiment_id}\) was renamed to 's-old'"):
        TrialRecorder(uri, STUDY, {"x": 1}, "h", tags)
    assert client(uri).get_experiment_by_name(STUDY) is None
    assert client(uri).search_runs([lease.experiment_id], f"tags.`{TAG}kind` = 'trial'") == []
    lease.release()


def test_the_lease_run_folds_under_the_study_run_and_every_reader_of_lease_records_still_finds_it(uri, monkeypatch):
    """MLflow's runs table lists a lease run beside the study run unless it is the study run's child: the study
    run adopts the study's lease runs when it is made and at each resume (one made after a deleted one too), and
    the ledger, the fence, ``verify``'s lease listing and the study's readers see them as before."""
    monkeypatch.setattr(heartbeat, "_moving", _never_watched)
    lease, _ = Lease.take(uri, STUDY, print)
    study_id = study_run(uri, STUDY, description="d", params={}, yaml_text=None)
    first, = lease_runs(client(uri), lease.experiment_id)
    assert first.data.tags[PARENT] == study_id
    assert [c.epoch for c in claims([first]) if c.held] == [1]
    lease.check()
    assert [r.info.run_id for r in search(uri, STUDY)] == [study_id]
    assert ledger_flags(every_run(client(uri), lease.experiment_id), []) == []
    lease.release()
    client(uri).delete_run(first.info.run_id)
    again, _ = Lease.take(uri, STUDY, print)
    assert study_run(uri, STUDY, description="d", params={}, yaml_text=None) == study_id
    nested = {r.info.run_id: r.data.tags.get(PARENT) for r in lease_runs(client(uri), lease.experiment_id)}
    assert len(nested) == 2 and set(nested.values()) == {study_id}
    again.check()
    again.release()


def test_the_stale_limit_is_checked(monkeypatch):
    monkeypatch.setenv(heartbeat.STALE_ENV, "soon")
    with pytest.raises(ValueError, match=r"\$NDEBENCH_LEASE_STALE_S='soon': expected a positive number"):
        heartbeat.stale_s()


def test_a_trial_continues_an_older_drivers_run_and_stops_writing_once_fenced(uri, monkeypatch):
    clock = [100.0]
    monkeypatch.setattr(fence, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    tags = {"study": STUDY, "phase": "evaluate", "model": "neural_cde", "dataset": "synthetic",
            "regularizer": "none", "seed": "0", "cell": "c", "trial_dir": "s/evaluate-1/a"}
    _, first = _hold(uri, 1)
    older = TrialRecorder(uri, STUDY, {"x": 1}, "h", tags | {"lease": "1", "lease_id": first})
    _, second = _hold(uri, 2, "elsewhere:2")
    older.log_metrics({"train_loss": 1.0}, step=1)  # within the interval (1 s / 6): on the last read's verdict
    clock[0] += heartbeat.interval_s(1.0)
    with pytest.raises(LeaseLostError):  # the old driver's trial, once its verdict is that old
        older.log_metrics({"train_loss": 2.0}, step=2)
    with pytest.raises(LeaseLostError):  # a trial reads afresh before it makes a run ...
        TrialRecorder(uri, STUDY, {"x": 1}, "h2", tags | {"lease": "1", "lease_id": first})
    with pytest.raises(LeaseLostError, match="is gone"):  # an epoch's number with another claim's id is not it
        TrialRecorder(uri, STUDY, {"x": 1}, "h2", tags | {"lease": "2", "lease_id": first})
    newer = TrialRecorder(uri, STUDY, {"x": 1}, "h", tags | {"lease": "2", "lease_id": second})
    assert newer.reattached and newer.run_id == older.run_id
    run, = search(uri, STUDY)
    assert run.data.tags[f"{TAG}lease"] == "2" and run_status(run) == "running"
    assert [m.step for m in client(uri).get_metric_history(run.info.run_id, "train_loss")] == [1]

    racing = TrialRecorder.__new__(TrialRecorder)  # ... and before its result: one that read just before the takeover
    racing.client, racing.run_id, racing.lease, racing.check = client(uri), older.run_id, 1, lambda fresh=False: None
    racing.history_keys = set()
    racing.finish("ok", {"test_accuracy": 0.25}, {}, {})
    run, = search(uri, STUDY)
    assert run.data.tags[f"{TAG}result_lease"] == "1" and run_status(run) == "interrupted"
    assert list(evaluate_runs(uri, STUDY)["status"]) == ["interrupted"]  # listed beside the tables, not counted
    newer.finish("ok", {"test_accuracy": 0.5}, {}, {})
    run, = search(uri, STUDY)
    assert run.data.tags[f"{TAG}result_lease"] == "2" and run_status(run) == "ok"
    assert run.data.metrics["test_accuracy"] == 0.5 and list(evaluate_runs(uri, STUDY)["status"]) == ["ok"]


SWEEP = {
    "study": "lease", "protocol": "joint", "models": ["neural_cde"], "datasets": ["synthetic"],
    "regularizers": ["none"], "model": {"hidden_size": 8}, "evaluate": {"seeds": [0, 1]},
    # 20 epochs, the trials one at a time (a one-CPU Ray): time to pause the first driver, let a second take over
    # and resume the first while the second still has trials to run.
    "training": {"epochs": 20, "min_epochs": 20, "patience": 20, "lr": [0.01, 0.02]},
    "tune": {"sampler": "grid"}, "resources": {"cpu": 1}, "report": {"figures": "none"},
}
COMMAND = [sys.executable, "-m", "ndebench.platform", "run", "sweep.yaml"]


def _env() -> dict[str, str]:
    # Read at each start: the `raced` fixture's one_cpu_ray sets the environment after this module is imported.
    return os.environ | {heartbeat.STALE_ENV: "4"}


def _start(cwd: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen([*COMMAND, *args], cwd=cwd, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)


def _finish(driver: subprocess.Popen, seconds: float = 600) -> str:
    try:
        return driver.communicate(timeout=seconds)[0]
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(driver.pid, signal.SIGKILL)  # what is left of its local Ray
        driver.wait()


def _wait(what, ready, *drivers: subprocess.Popen, seconds: float = 400) -> None:
    deadline = time.time() + seconds
    while not ready():
        for driver in drivers:
            assert driver.poll() is None, driver.communicate()[0]
        assert time.time() < deadline, f"never {what}"
        time.sleep(0.1)


def _trained_under(db: Path, epoch: int) -> int:
    """Trial runs of lease epoch ``epoch`` that logged an epoch of training."""
    return count_rows(db, "select count(distinct m.run_uuid) from metrics m join tags t on t.run_uuid = m.run_uuid "
                          "where m.key = 'train_loss' and t.key = 'ndebench.lease' and t.value = ?", str(epoch))


def _table(folder: Path) -> str:
    return without_fingerprint((folder / "reports" / "lease" / "table.md").read_text())


@pytest.fixture(scope="module")
def raced(tmp_path_factory, one_cpu_ray):
    """Two drivers of one new study started in the same second; the winner's sweep runs to its end."""
    folder = tmp_path_factory.mktemp("raced")
    (folder / "sweep.yaml").write_text(yaml.safe_dump(SWEEP))
    drivers = [_start(folder), _start(folder)]
    outputs = [_finish(driver) for driver in drivers]
    loser = 0 if drivers[0].returncode == 2 else 1
    assert "Ray cluster: 1 CPU," in outputs[1 - loser], outputs[1 - loser]
    return folder, drivers[loser], outputs[loser], drivers[1 - loser], outputs[1 - loser]


@pytest.mark.system
def test_of_two_drivers_started_in_one_second_exactly_one_proceeds(raced):
    folder, loser, lost, winner, won = raced
    assert loser is not None and loser.returncode == 2, lost
    refusal = f"ndebench run: error: study 'lease' is being run by another driver, {os.uname().nodename}:{winner.pid}; "
    assert sum(line.startswith(refusal) for line in lost.splitlines()) == 1, lost
    assert "Ray cluster:" not in lost  # refused before Ray started
    assert winner.returncode == 0, won
    assert len(list((folder / "ray_results" / "lease").glob("tune-*-lease1"))) == 1


def _lease_claims(uri: str) -> dict[int, list]:
    found: dict[int, list] = {}
    for c in claims(lease_runs(client(uri), client(uri).get_experiment_by_name("lease").experiment_id)):
        found.setdefault(c.epoch, []).append(c)
    return found


@pytest.mark.system
def test_a_paused_then_deleted_then_outbid_driver_each_exits_3_and_a_resume_ends_the_study(tmp_path, raced):
    """One study through four drivers, each hand-over one of the reviews' scenarios on a real sweep. A paused driver
    (SIGSTOP) is taken over; resumed, it exits 3 naming its taker, and a third driver is refused. The taker's lease
    run is then deleted: it exits 3 saying so, not that another driver took over. The next driver is outbid by a
    hand-made valid epoch above its own and exits 3. The last resume watches the still records, takes the epoch
    above them all and ends the study: no run ends under the paused driver's epoch, no epoch is logged twice in a
    run, and the table equals an uninterrupted sweep's."""
    (tmp_path / "sweep.yaml").write_text(yaml.safe_dump(SWEEP))
    db, uri = tmp_path / "mlflow.db", f"sqlite:///{tmp_path / 'mlflow.db'}"
    paused = _start(tmp_path)
    new = None
    try:
        _wait("trained", lambda: _trained_under(db, 1) >= 1, paused)
        os.kill(paused.pid, signal.SIGSTOP)  # the driver alone (a laptop lid, a long pause): its Ray runs on
        new = _start(tmp_path, "--resume")
        _wait("took over and trained", lambda: _trained_under(db, 2) >= 1, new)
        os.kill(paused.pid, signal.SIGCONT)
        old = _finish(paused, seconds=120)
        assert paused.returncode == 3, old
        assert old.strip().splitlines()[-1].startswith(
            "ndebench run: error: this driver lost its lease of study 'lease' (epoch 1): driver "
            f"{os.uname().nodename}:{new.pid} took it over (lease epoch 2)"), old
        assert "Traceback" not in old, old
        assert new.poll() is None, "the new driver ended before the old one was resumed"
        by_epoch = _lease_claims(uri)
        assert sorted((epoch, len(found)) for epoch, found in by_epoch.items()) == [(1, 1), (2, 1)]
        second, = by_epoch[2]
        assert second.held  # not freed
        third = cli([*COMMAND[3:], "--resume"], tmp_path, _env())  # refused before Ray starts
        assert third.returncode == 2 and f"another driver, {os.uname().nodename}:{new.pid};" in third.stderr, (
            third.stdout + third.stderr)

        client(uri).delete_run(second.run_id)
        out = _finish(new, seconds=180)
        assert new.returncode == 3, out
        assert out.strip().splitlines()[-1].startswith(
            "ndebench run: error: this driver lost its lease of study 'lease' (epoch 2): its lease run "
            f"{second.run_id} was deleted; it stopped writing, and no driver holds the study now"), out
        assert "took it over" not in out and "Traceback" not in out, out
        assert "taking over study 'lease' from driver" in out, out
    finally:
        for driver in filter(None, (paused, new)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(driver.pid, signal.SIGKILL)

    outbid = _start(tmp_path, "--resume")
    _wait("resumed and trained", lambda: _trained_under(db, 3) >= 1, outbid)
    held, = _lease_claims(uri)[3]
    assert claim(client(uri), held.run_id, 5, token("made-up:1", "another machine", "x")) is None
    out = _finish(outbid, seconds=180)
    assert outbid.returncode == 3, out
    assert "(epoch 3): driver made-up:1 took it over (lease epoch 5)" in out.strip().splitlines()[-1], out

    last = subprocess.run([*COMMAND, "--resume"], cwd=tmp_path, env=_env(), capture_output=True, text=True,
                          timeout=600)
    assert last.returncode == 0, last.stdout[-3000:] + last.stderr[-3000:]
    epochs = _lease_claims(uri)
    assert 6 in epochs and 4 not in epochs
    trials = search(uri, "lease", f"tags.`{TAG}kind` = 'trial'")
    phases = {phase: [r for r in trials if r.data.tags[f"{TAG}phase"] == phase] for phase in ("tune", "evaluate")}
    assert Counter(r.data.params["training.lr"] for r in phases["tune"]) == {"0.01": 1, "0.02": 1}
    assert Counter(r.data.tags[f"{TAG}seed"] for r in phases["evaluate"]) == {"0": 1, "1": 1}
    assert {run_status(r) for r in trials} == {"ok"}
    assert "1" not in {r.data.tags[f"{TAG}lease"] for r in trials}  # the paused driver changed none
    for run in trials:  # one writer per run: no epoch logged twice
        steps = [m.step for m in client(uri).get_metric_history(run.info.run_id, "train_loss")]
        assert len(steps) == len(set(steps)) == SWEEP["training"]["epochs"], run.info.run_id
    assert _table(tmp_path) == _table(raced[0])


def test_system_metrics_of_a_fenced_trial_stop(uri):
    pytest.importorskip("psutil", reason="system metrics need psutil (the `cluster` extra)")
    mlflow_client = client(uri)
    experiment = mlflow_client.create_experiment("metrics")
    free, fenced = (mlflow_client.create_run(experiment).info.run_id for _ in range(2))
    _, first = _hold(uri, 1)
    _, second = _hold(uri, 2, "elsewhere:2")
    checks = {free: Fence(client(uri), STUDY, 2, second).check, fenced: Fence(client(uri), STUDY, 1, first).check}
    for run_id, check in checks.items():
        with system_metrics(run_id, uri, interval_s=0.5, check=check):
            time.sleep(2.0)
    assert "system/cpu_utilization_percentage" in mlflow_client.get_run(free).data.metrics
    assert mlflow_client.get_run(fenced).data.metrics == {}


def test_a_lease_record_no_driver_wrote_never_locks_the_study_for_good(uri, monkeypatch):
    """Review (turn 7): a param ``ndebench.lease.999999999`` on the study run (params never go) locked the study for
    good; a valid record of that epoch in a lease run did too, even after the admin deleted it as advised."""
    monkeypatch.setattr(heartbeat, "_moving", _never_watched)
    study = study_run(uri, STUDY, description="", params={"protocol": "paper"}, yaml_text=None)
    client(uri).log_param(study, "ndebench.lease.999999999", token("forged:1", "m", "i"))
    lease, _ = Lease.take(uri, STUDY, print)
    assert lease.epoch == 1
    lease.release()
    flags = ledger_flags(every_run(client(uri), ensure_experiment(uri, STUDY)), [])
    assert [(f["run_id"], f["why"]) for f in flags] == [
        (study, "it holds a lease record (ndebench.lease.999999999) but is no lease run: no driver wrote it there")]
    planted = new_lease_run(client(uri), ensure_experiment(uri, STUDY), STUDY)
    assert claim(client(uri), planted, 999_999_999, token("squatter:1", "m", "i")) is None
    client(uri).set_tag(planted, released_tag(999_999_999), "1")
    with pytest.raises(DriverConflictError, match=f"in run {planted} leaves no epoch to claim"):
        Lease.take(uri, STUDY, print)
    client(uri).delete_run(planted)  # what the message advises, and now it works
    again, _ = Lease.take(uri, STUDY, print)
    assert again.epoch == 2
    again.check()  # the deleted record of a higher epoch fences nobody
    again.release()


def test_the_older_lease_stays_the_newest_name_whoever_makes_one_above_it(uri, monkeypatch):
    """Review N5b: a user with no grant made ``S::lease::50``; a driver of an older release, which reads only the
    newest name, took it over as a lost driver and trained beside this one. At every beat this driver makes its
    own the newest again, which also fences an older driver that took a name (a newer name fences it)."""
    from ndebench.platform.record.lease import legacy

    monkeypatch.setattr(heartbeat, "_moving", _never_watched)
    lease, _ = Lease.take(uri, STUDY, print)
    assert client(uri).get_experiment(lease.legacy_id).name == f"{STUDY}::lease::1"
    for forged in (50, 52):
        client(uri).create_experiment(f"{STUDY}::lease::{forged}", tags={
            legacy.HOLDER: "forged-host:4242", legacy.MACHINE: "m", legacy.BEAT: "0", f"{TAG}kind": "lease"})
        deadline = time.monotonic() + 30
        while client(uri).get_experiment(lease.legacy_id).name != f"{STUDY}::lease::{forged + 1}":
            assert time.monotonic() < deadline
            time.sleep(0.05)
        newest = max(legacy.old_lease_experiments(client(uri), STUDY), key=lambda found: found[0])[1]
        assert newest.experiment_id == lease.legacy_id and newest.lifecycle_stage == "active"
        assert newest.tags[legacy.HOLDER] == f"{os.uname().nodename}:{os.getpid()}"
    lease.check()
    lease.release()
    assert client(uri).get_experiment(lease.legacy_id).lifecycle_stage == "deleted"
