"""A compact progress view of one stage: per cell done / running / pending and the best value so far."""
from __future__ import annotations

import math
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ndebench.platform.infrastructure import raised_in_trial
from ndebench.platform.record.tracking import mark_stopped
from ray.tune import Callback

Printer = Callable[[str], None]
OUTCOME_KEYS = ("status", "message", "run_id", "resume_note")
# Ray's words for a trial whose process or node died, as opposed to an exception the trial raised.
WORKER_LOST = ("ActorDiedError", "RayActorError", "actor died", "WorkerCrashedError", "NodeDiedError",
               "worker died", "OutOfMemoryError")
FAILURE_HEADER = re.compile(r"^Failure # \d+ \(occurred at [^)]*\)$", re.MULTILINE)


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}h{seconds // 60 % 60:02d}m" if seconds >= 3600 else f"{seconds // 60}m{seconds % 60:02d}s"


def _error_text(trial: Any) -> str:
    """Ray's text of a trial's latest error: from the ``error.txt`` the driver just wrote in its own staging folder,
    else from the copy in storage. Never ``error.pkl``: unpickling a file of the shared storage runs whatever code
    its writer put there."""
    try:
        local = Path(trial.error_file) if trial.error_file else None
        text = local.read_text(errors="replace") if local is not None and local.is_file() else trial.get_error()
    except Exception:  # noqa: BLE001 - an unreadable error file still leaves the trial failed
        return ""
    # error.txt holds every failure of the trial, each under a "Failure # N (occurred at ...)" line.
    return FAILURE_HEADER.split(str(text or ""))[-1]


def _error_line(text: str) -> str:
    """The last line of Ray's ``text`` of a trial's error (``ValueError: ...``): the message a user acts on;
    ``worker lost: ...`` when Ray reports the trial's process or node dead rather than an exception; the failure
    itself for an infrastructure failure that spent the trial's retries."""
    if infrastructure := raised_in_trial(text):
        return infrastructure[0]
    lines = text.strip().splitlines()
    last = lines[-1].strip() if lines else ""
    if not last or any(mark in text for mark in WORKER_LOST):
        return f"worker lost{': ' + last if last else ''} (see the log file)"
    return last


def _forget_pickled_error(trial: Any) -> None:
    # Ray's ResultGrid (built by Tuner.fit) unpickles error.pkl from storage for each trial that names one; without
    # a name it reads error.txt as text.
    trial.run_metadata.pickled_error_filename = None


class StageProgress(Callback):
    """Prints a line per finished cell and, every ``every_s`` seconds, one line per unfinished cell; keeps
    per-cell ``outcomes`` of the trials (config, last result, error line) for the driver.

    ``budgets`` maps cell key -> trials of the stage; ``labels`` cell key -> readable name. The best value
    counts only trials that finished ``ok`` (a stopped or failed trial never is a cell's best).
    """

    def __init__(self, stage: str, budgets: dict[str, int], labels: dict[str, str], metric: str | None,
                 mode: str, say: Printer, every_s: float = 60.0):
        self.stage, self.metric, self.mode, self.say, self.every_s = stage, metric, mode, say, every_s
        self.budgets, self.labels = budgets, labels
        self.started = {k: 0 for k in budgets}
        self.finished = {k: 0 for k in budgets}
        self.best: dict[str, float] = {}
        self.outcomes: dict[str, list[dict[str, Any]]] = {k: [] for k in budgets}
        self.t0 = self.last = time.monotonic()

    def __getstate__(self) -> dict[str, Any]:
        # Ray pickles the Tuner's callbacks with its experiment state; the console printer stays behind.
        return dict(self.__dict__, say=print)

    def _key(self, trial: Any) -> str:
        return trial.config.get("cell") or trial.config["trial"].split("#")[0]

    def on_trial_start(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self.started[self._key(trial)] += 1

    def _end(self, trial: Any, error: str = "", infrastructure: tuple[str, str | None] | None = None) -> None:
        key = self._key(trial)
        self.finished[key] += 1
        result = trial.last_result or {}
        # A stage may hold thousands of outcomes: only what the driver reads (a failed trial's config, to name its run).
        outcome = {"config": dict(trial.config) if error else {"cell": key},
                   "result": {k: result[k] for k in OUTCOME_KEYS if k in result}, "error": error}
        if infrastructure is not None:
            cause, run_id = infrastructure
            outcome["infrastructure"] = {"cause": cause, "run_id": run_id or result.get("run_id")}
        self.outcomes[key].append(outcome)
        value = result.get(self.metric) if self.metric else None
        if result.get("status") == "ok" and value is not None and math.isfinite(value):
            better = min if self.mode == "min" else max
            self.best[key] = better(self.best.get(key, value), value)
        if self.finished[key] == self.budgets[key]:
            best = f", best {self.metric} {self.best[key]:.4f}" if key in self.best else ""
            self.say(f"  {self.stage} done: {self.labels[key]} ({self.budgets[key]} trial(s){best})")

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self._end(trial)

    def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        _forget_pickled_error(trial)
        text = _error_text(trial)
        self._end(trial, _error_line(text), raised_in_trial(text))

    def on_trial_recover(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        _forget_pickled_error(trial)

    def on_experiment_end(self, trials: list, **info: Any) -> None:
        for trial in trials:
            _forget_pickled_error(trial)

    def on_step_end(self, iteration: int, trials: list, **info: Any) -> None:
        now = time.monotonic()
        if now - self.last >= self.every_s:
            self.last = now
            for line in self.view(now):
                self.say(line)

    def view(self, now: float) -> list[str]:
        done, total = sum(self.finished.values()), sum(self.budgets.values())
        elapsed = now - self.t0
        eta = f", ETA {_duration(elapsed * (total - done) / done)}" if done else ""
        lines = [f"  {self.stage}: {done}/{total} trial(s) done, elapsed {_duration(elapsed)}{eta}"]
        for key, budget in self.budgets.items():
            if self.finished[key] == budget:
                continue
            running = self.started[key] - self.finished[key]
            best = f"  best {self.best[key]:.4f}" if key in self.best else ""
            lines.append(f"    {self.labels[key]}: {self.finished[key]} done, {running} running, "
                         f"{budget - self.started[key]} pending{best}")
        return lines


class MarkStopped(Callback):
    """A trial whose last report still says ``running`` was stopped by the scheduler: mark its MLflow run."""

    def __init__(self, tracking_uri: str):
        self.tracking_uri = tracking_uri

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        last = trial.last_result or {}
        if last.get("status") == "running" and last.get("run_id"):
            mark_stopped(self.tracking_uri, last["run_id"])
