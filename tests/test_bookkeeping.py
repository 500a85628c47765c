"""Honest bookkeeping without Ray: a retried search trial continues its own run (no ghost `error` run beside its
retry), an errored evaluate attempt is not continued but superseded, and a killed worker reads `worker lost`."""
from __future__ import annotations

from ndebench.platform.engine.progress import _error_line
from ndebench.platform.record.completeness import attempts, current, mark_superseded, not_ok_summary, planned_statuses
from ndebench.platform.record.recorder import TrialRecorder
from ndebench.platform.record.runs import evaluate_runs
from ndebench.platform.record.schema import SUPERSEDED, TAG
from ndebench.platform.record.tracking import run_status, search


def _tags(phase: str, seed: int = 0, trial_dir: str = "s/tune-1/abc") -> dict[str, str]:
    return {"study": "s", "phase": phase, "model": "neural_cde", "dataset": "synthetic", "regularizer": "none",
            "seed": str(seed), "cell": "c", "trial_dir": trial_dir}


def test_a_search_trial_retried_by_ray_continues_its_run(uri):
    first = TrialRecorder(uri, "s", {"x": 1}, "h", _tags("tune"))
    retry = TrialRecorder(uri, "s", {"x": 1}, "h", _tags("tune"))
    assert retry.reattached and retry.run_id == first.run_id
    other = TrialRecorder(uri, "s", {"x": 1}, "h", _tags("tune", trial_dir="s/tune-1/def"))
    assert not other.reattached  # the same config in another trial is another run
    assert len(search(uri, "s")) == 2


def test_an_errored_evaluate_attempt_is_superseded_not_continued(uri):
    failed = TrialRecorder(uri, "s", {"x": 1}, "h", _tags("evaluate", trial_dir="s/evaluate-1/a"))
    failed.finish("error", {}, {"error": "boom"}, {})
    assert planned_statuses(uri, "s", ["c"], [0, 1]) == {("c", 0): "error", ("c", 1): "missing"}
    assert not_ok_summary(planned_statuses(uri, "s", ["c"], [0, 1])) == (
        "2 of 2 planned evaluate run(s) not ok (1 error, 1 missing)")
    retry = TrialRecorder(uri, "s", {"x": 1}, "h", _tags("evaluate", trial_dir="s/evaluate-2/a"))
    assert not retry.reattached and retry.run_id != failed.run_id
    retry.finish("ok", {"test_accuracy": 0.5}, {}, {})
    assert mark_superseded(uri, "s") == 1 and mark_superseded(uri, "s") == 0
    runs = attempts(uri, "s")[("c", 0)]
    assert run_status(current(runs)) == "ok"
    assert [r.data.tags.get(SUPERSEDED) for r in runs] == [retry.run_id, None]
    assert list(evaluate_runs(uri, "s", with_calibration=False).run_id) == [retry.run_id]
    assert search(uri, "s", f"tags.`{TAG}status` = 'error'")[0].info.run_id == failed.run_id


def test_a_killed_worker_is_worker_lost_and_an_exception_is_itself():
    died = "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task."
    assert _error_line(died).startswith("worker lost: ray.exceptions.ActorDiedError")
    assert _error_line("") == "worker lost (see the log file)"
    assert _error_line("Traceback ...\nValueError: bad lr") == "ValueError: bad lr"
