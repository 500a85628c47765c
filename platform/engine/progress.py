"""What a sweep tells you while it runs: a line per finished trial, and a view of one stage (per cell done /
running / pending, the best value so far, the stage's and the sweep's ETA) every ``--progress-every`` seconds;
a live bar (tqdm) when stdout is a terminal."""
from __future__ import annotations

import logging
import math
import os
import re
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ndebench.platform.failures.infrastructure import raised_in_trial
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


TEST_METRICS = ("test_accuracy", "test_auroc", "test_top5_accuracy", "test_nll")
FIRST_VIEW_S = 15.0  # the first stage view comes early, so that a sweep is never silent for a whole interval
IDENTITY_KEYS = ("cell", "phase", "seed", "trial")


def quiet_libraries() -> None:
    """Ray's and MLflow's INFO lines stay off the console (``ndebench run`` without ``--verbose``); their
    warnings still show, and Ray's log file still gets everything."""
    os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")
    logging.getLogger("mlflow").setLevel(logging.WARNING)
    import ray  # noqa: F401 - importing Ray installs its console handler, which is what is quietened

    for handler in logging.getLogger("ray").handlers:
        if not isinstance(handler, logging.FileHandler):
            handler.setLevel(logging.WARNING)


def sampled_values(config: dict[str, Any], seeds: str = "") -> str:
    """What distinguishes a trial inside its cell: ``seed 3`` for an evaluate trial (``seeds``, its seed or a
    stack's ``0+1+2``), else its sampled values by their last key part, ``lr=0.005 p=0.3``."""
    if seeds:
        return f"seed {seeds}"
    if isinstance(config.get("stack"), list):  # a search stage's stack: each member's values
        return " | ".join(sampled_values(values) for values in config["stack"])
    return " ".join(f"{k.rsplit('.', 1)[-1]}={v:.4g}" if isinstance(v, float) else f"{k.rsplit('.', 1)[-1]}={v}"
                    for k, v in config.items() if k not in IDENTITY_KEYS)


def trial_line(stage: str, done: int, total: int, label: str, values: str, metric: str | None,
               value: float | None, status: str, seconds: float) -> str:
    """``  tune 4/6: <cell> [p=0.3 m=5]: val_loss 0.4123, ok, 0m12s``: one finished trial."""
    score = f"{metric} {value:.4f}, " if metric and value is not None else ""
    return f"  {stage} {done}/{total}: {label} [{values}]: {score}{status}, {_duration(seconds)}"


def eta_seconds(durations: Sequence[float], running_ages: Sequence[float], pending: int, later: int,
                concurrency: int) -> tuple[float, float] | None:
    """``(stage, sweep)`` seconds left, or ``None`` before a trial ended.

    With ``d`` the mean duration of the ended trials, ``a_i`` the ages of the running ones, ``P`` the pending
    trials of the stage, ``L`` the trials of later stages and ``c`` the most trials seen running at once:
    stage = (P d + sum_i max(d - a_i, 0)) / c, sweep = stage + L d / c. Later stages' trials are costed at this
    stage's mean (an evaluate trial trains longer than a search trial, so the sweep ETA is a lower bound then).
    """
    if not durations:
        return None
    mean = sum(durations) / len(durations)
    c = max(concurrency, 1)
    stage = (pending * mean + sum(max(mean - age, 0.0) for age in running_ages)) / c
    return stage, stage + later * mean / c


def _forget_pickled_error(trial: Any) -> None:
    # Ray's ResultGrid (built by Tuner.fit) unpickles error.pkl from storage for each trial that names one; without
    # a name it reads error.txt as text.
    trial.run_metadata.pickled_error_filename = None


class StageProgress(Callback):
    """Prints a line per finished trial and per finished cell and, every ``every_s`` seconds (the first after
    at most :data:`FIRST_VIEW_S`), the stage view with the stage's and the sweep's ETA (:func:`eta_seconds`;
    ``later``: trials planned in the stages after this one); keeps per-cell ``outcomes`` of the trials (config,
    last result, error line) for the driver. ``bar``: a tqdm bar on stdout (default: when it is a terminal).

    ``budgets`` maps cell key -> trials of the stage; ``labels`` cell key -> readable name; ``owners``, for an
    evaluate stage whose Tune trials are named by a ``trial`` key, that key -> (its cell key, its seeds as shown).
    The best value counts only trials that finished ``ok`` (a stopped or failed trial never is a cell's best).
    """

    def __init__(self, stage: str, budgets: dict[str, int], labels: dict[str, str], metric: str | None,
                 mode: str, say: Printer, every_s: float = 60.0, later: int = 0, bar: bool | None = None,
                 owners: dict[str, tuple[str, str]] | None = None):
        self.stage, self.metric, self.mode, self.say, self.every_s = stage, metric, mode, say, every_s
        self.budgets, self.labels, self.later, self.owners = budgets, labels, later, owners or {}
        self.started = {k: 0 for k in budgets}
        self.finished = {k: 0 for k in budgets}
        self.best: dict[str, float] = {}
        self.outcomes: dict[str, list[dict[str, Any]]] = {k: [] for k in budgets}
        self.begun: dict[str, float] = {}
        self.durations: list[float] = []
        self.peak = 0
        self.t0 = time.monotonic()
        self.last = self.t0 - every_s + min(every_s, FIRST_VIEW_S)
        self.bar = _bar(stage, sum(budgets.values())) if (sys.stdout.isatty() if bar is None else bar) else None

    def __getstate__(self) -> dict[str, Any]:
        # Ray pickles the Tuner's callbacks with its experiment state; the console printer and bar stay behind.
        return dict(self.__dict__, say=print, bar=None)

    def _key(self, trial: Any) -> str:
        return trial.config.get("cell") or self.owners[trial.config["trial"]][0]

    def _say(self, line: str) -> None:
        if self.bar is None:
            self.say(line)
            return
        self.bar.clear()
        self.say(line)
        self.bar.refresh()

    def on_trial_start(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self.started[self._key(trial)] += 1
        self.begun[trial.trial_id] = time.monotonic()
        self.peak = max(self.peak, len(self.begun))

    def _end(self, trial: Any, error: str = "", infrastructure: tuple[str, str | None] | None = None) -> None:
        key = self._key(trial)
        self.finished[key] += 1
        now = time.monotonic()
        seconds = now - self.begun.pop(trial.trial_id, now)
        self.durations.append(seconds)
        result = trial.last_result or {}
        metric = self.metric or next((m for m in TEST_METRICS if m in result), None)
        scored = self._scored(result)
        value = self._better(scored) if scored else result.get(metric) if metric else None
        status = f"error: {error}" if error else str(result.get("status", "ended"))
        done, total = sum(self.finished.values()), sum(self.budgets.values())
        seeds = self.owners.get(trial.config.get("trial"), ("", ""))[1]
        self._say(trial_line(self.stage, done, total, self.labels[key], sampled_values(trial.config, seeds), metric,
                             value if isinstance(value, (int, float)) else None, status, seconds))
        if self.bar is not None:
            self.bar.update(1)
            self.bar.set_postfix_str(self._eta_text(now), refresh=True)
        # A stage may hold thousands of outcomes: only what the driver reads (a failed trial's config, to name its run;
        # an evaluate trial's key, which names a stack's members).
        kept = {"cell": key} | ({"trial": trial.config["trial"]} if "trial" in trial.config else {})
        outcome = {"config": dict(trial.config) if error else kept,
                   "result": {k: result[k] for k in OUTCOME_KEYS if k in result}, "error": error}
        if infrastructure is not None:
            cause, run_id = infrastructure
            outcome["infrastructure"] = {"cause": cause, "run_id": run_id or result.get("run_id"),
                                         "run_ids": list(result.get("run_ids") or [])}  # a stack's members
        self.outcomes[key].append(outcome)
        if scored:
            self.best[key] = self._better([*scored, self.best.get(key, scored[0])])
        if self.finished[key] == self.budgets[key]:
            best = f", best {self.metric} {self.best[key]:.4f}" if key in self.best else ""
            self._say(f"  {self.stage} done: {self.labels[key]} ({self.budgets[key]} trial(s){best})")

    def _scored(self, result: dict[str, Any]) -> list[float]:
        """The finite ``metric`` values of the ``ok`` trials a result reports: its own, or a search stack's
        members' (``members``)."""
        members = result.get("members") if isinstance(result.get("members"), list) else [result]
        values = [m.get(self.metric) for m in members if self.metric and m.get("status") == "ok"]
        return [v for v in values if isinstance(v, (int, float)) and math.isfinite(v)]

    def _better(self, values: list[float]) -> float:
        return min(values) if self.mode == "min" else max(values)

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self._end(trial)

    def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        _forget_pickled_error(trial)
        text = _error_text(trial)
        self._end(trial, _error_line(text), raised_in_trial(text))

    def on_trial_recover(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        _forget_pickled_error(trial)

    def on_step_end(self, iteration: int, trials: list, **info: Any) -> None:
        now = time.monotonic()
        if now - self.last >= self.every_s:
            self.last = now
            for line in self.view(now):
                self._say(line)

    def on_experiment_end(self, trials: list, **info: Any) -> None:
        for trial in trials:
            _forget_pickled_error(trial)
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def _eta_text(self, now: float) -> str:
        pending = sum(self.budgets.values()) - sum(self.started.values())
        eta = eta_seconds(self.durations, [now - t for t in self.begun.values()], pending, self.later, self.peak)
        if eta is None:
            return "ETA after the first trial"
        return f"ETA stage {_duration(eta[0])}, sweep {_duration(eta[1])}"

    def view(self, now: float) -> list[str]:
        done, total = sum(self.finished.values()), sum(self.budgets.values())
        running = sum(self.started.values()) - done
        lines = [f"  {self.stage}: {done}/{total} trial(s) done, {running} running, elapsed "
                 f"{_duration(now - self.t0)}, {self._eta_text(now)}"]
        for key, budget in self.budgets.items():
            if self.finished[key] == budget:
                continue
            running = self.started[key] - self.finished[key]
            best = f"  best {self.best[key]:.4f}" if key in self.best else ""
            lines.append(f"    {self.labels[key]}: {self.finished[key]} done, {running} running, "
                         f"{budget - self.started[key]} pending{best}")
        return lines


# tqdm's own layout less its remaining-time field, which extrapolates the mean trial and disagreed with the stage ETA
# in the postfix (:func:`eta_seconds`, which counts running trials and the cluster's width) by 2-3x.
BAR_FORMAT = "{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}, {rate_fmt}{postfix}]"


def _bar(stage: str, total: int) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, desc=f"  {stage}", unit="trial", file=sys.stdout, dynamic_ncols=True, leave=False,
                bar_format=BAR_FORMAT)


def close_bars() -> None:
    """Clear every live stage bar from the terminal, so that what is printed next starts a line of its own (a
    Ctrl-C stops a stage while its bar holds the cursor at the end of the bar's line)."""
    from tqdm import tqdm

    for bar in list(getattr(tqdm, "_instances", ())):
        bar.close()


class MarkStopped(Callback):
    """A trial whose last report still says ``running`` was stopped by the scheduler: mark its MLflow run."""

    def __init__(self, tracking_uri: str):
        self.tracking_uri = tracking_uri

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        last = trial.last_result or {}
        if last.get("status") == "running" and last.get("run_id"):
            mark_stopped(self.tracking_uri, last["run_id"])
