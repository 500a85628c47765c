"""Every cell of a stage in one Ray Tune run: a per-cell Optuna ask/tell searcher and per-cell ASHA.

Ray's maintainers advise one Tune run for many searches (ray#18851); :class:`CellSearcher` keeps one seeded
Optuna study per cell, hands out suggestions round-robin over the cells within a per-cell concurrency limit
(so TPE sees results before it proposes), and tells each study its own trials' outcomes. A resumed stage
hands each cell the trials that already ended (:class:`Past`): they join its study, are taken off its budget
and, under ``grid``, off its grid; the trials an interrupted driver left unfinished are asked first again.

A cell with a stack size ``K > 1`` (``resources.stack``, where its points differ only in the regularizer's
hyperparameters) gets up to K points per Tune trial: K Optuna trials asked at once, trained as one stack
(:mod:`~ndebench.platform.engine.stacktrainable`), each told its own member's outcome.
"""
from __future__ import annotations

import itertools
import math
from typing import Any

import optuna
from ndebench.platform.common.metrics import decisive
from ndebench.platform.engine.searchspace import Past, distribution, make_study
from ndebench.platform.engine.stacktrainable import STACK
from ndebench.platform.spec.config import AshaConfig, TuneConfig
from ndebench.platform.spec.plan import CellSearch
from ray.tune.experiment import Trial
from ray.tune.schedulers import AsyncHyperBandScheduler, FIFOScheduler
from ray.tune.search import Searcher

# A trial's reports carry ``status``: "running" after each epoch, the trial's outcome at the end. A last
# report still "running" means the scheduler stopped the trial.
RUNNING = "running"
DEFAULT_TPE_CONCURRENCY = 4


class CellSearcher(Searcher):
    """Suggests trial configs for the cells of one stage: a cell's ``cell`` key, the sampled values, ``phase`` and
    ``seed``; the trainable completes them with the cell's fixed values (:attr:`templates`). Tune keeps every
    trial's config (several copies, with its results) in the driver until the stage ends, so it holds only what
    varies. ``stack`` (cell key -> K): a Tune trial of that cell holds up to K points, ``"stack": [sampled
    values]``, at most the per-cell concurrency limit."""

    def __init__(self, stage: str, searches: list[CellSearch], tune: TuneConfig, past: dict[str, Past] | None = None,
                 stack: dict[str, int] | None = None):
        # No metric for Ray itself: its strict check would refuse a failed trial's report, which has none.
        super().__init__()
        past = past or {}
        self.stage, self.target = stage, tune.metric
        self._searches = {s.key: s for s in searches}
        self._studies = {s.key: make_study(s, tune, past.get(s.key, Past())) for s in searches}
        self._left = {s.key: max(0, s.budget - len(past.get(s.key, Past()).ended)) for s in searches}
        self._running = {s.key: 0 for s in searches}
        default = DEFAULT_TPE_CONCURRENCY if tune.sampler == "tpe" else None
        self._limit = tune.max_concurrent or default
        self._order = itertools.cycle(list(self._searches))
        self._stack = {s.key: max(1, min((stack or {}).get(s.key, 1), self._limit or math.inf)) for s in searches}
        self._trials: dict[str, tuple[str, list[optuna.trial.Trial]]] = {}

    @property
    def templates(self) -> dict[str, dict[str, Any]]:
        """Per cell key, the fixed values of its trials (the resolved config less what is searched)."""
        return {key: search.template for key, search in self._searches.items()}

    @property
    def total(self) -> int:
        """The trials this searcher still hands out: every cell's budget less its trials that already ended."""
        return sum(self._left.values())

    @property
    def left(self) -> dict[str, int]:
        """Per cell, the trials (points) still to run."""
        return dict(self._left)

    @property
    def tune_trials(self) -> dict[str, int]:
        """Per cell, the Tune trials still to run: its points in stacks of its stack size (the last one smaller)."""
        return {key: -(-n // self._stack[key]) for key, n in self._left.items()}

    @property
    def stacked(self) -> dict[str, int]:
        """Per cell, how many points one of its Tune trials holds at most."""
        return dict(self._stack)

    @property
    def max_live(self) -> int:
        """Tune trials that may be suggested and unfinished at once over all cells."""
        return max(1, sum(-(-(n if self._limit is None else min(n, self._limit)) // self._stack[key])
                          for key, n in self._left.items()))

    def suggest(self, trial_id: str) -> dict[str, Any] | str | None:
        if not any(self._left.values()):
            return Searcher.FINISHED
        for _ in range(len(self._searches)):
            key = next(self._order)
            size = min(self._stack[key], self._left[key])
            if size and (self._limit is None or self._running[key] + size <= self._limit):
                break
        else:
            return None
        search = self._searches[key]
        trials = [self._studies[key].ask({k: distribution(v) for k, v in search.space.items()}) for _ in range(size)]
        self._left[key] -= size
        self._running[key] += size
        self._trials[trial_id] = (key, trials)
        if size == 1:
            return {"cell": key, **trials[0].params, "phase": self.stage, "seed": 0}
        return {"cell": key, STACK: [t.params for t in trials], "phase": self.stage, "seed": 0}

    def on_trial_complete(self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False) -> None:
        key, trials = self._trials.pop(trial_id)
        self._running[key] -= len(trials)
        result = result or {}
        # A stack that ended tells each member its own outcome; one that failed or was stopped, all the same.
        members = result.get("members")
        if error or not isinstance(members, list) or len(members) != len(trials):
            members = [result] * len(trials)
        for trial, outcome in zip(trials, members, strict=True):
            self._tell(self._studies[key], trial, outcome, error)

    def _tell(self, study: optuna.Study, trial: optuna.trial.Trial, result: dict[str, Any], error: bool) -> None:
        value = result.get(self.target)
        if error or result.get("status") != "ok" or value is None or not math.isfinite(value):
            state = optuna.trial.TrialState.PRUNED if result.get("status") == RUNNING else optuna.trial.TrialState.FAIL
            study.tell(trial, state=state)
        else:
            study.tell(trial, decisive(float(value)))  # what the chosen point reads: TPE ranks as the choice does


class LiveFIFOScheduler(FIFOScheduler):
    """Tune's FIFO order (the oldest pending trial, else the oldest paused one), found among the live trials.

    Tune's own FIFO scans every trial of the run at each step of its loop, so a stage's driver time grew with the
    square of its trials. Trials are added in order and live ones sit at the end of
    the list but for a long runner, so this scans from the end until it has seen every live trial."""

    def choose_trial_to_run(self, tune_controller: Any) -> Any:
        live = tune_controller.get_live_trials()
        oldest: dict[str, Any] = {Trial.PENDING: None, Trial.PAUSED: None}
        seen = 0
        for trial in reversed(tune_controller.get_trials()):
            if seen == len(live):
                break
            if trial in live:
                seen += 1
                if trial.status in oldest:
                    oldest[trial.status] = trial
        return oldest[Trial.PENDING] or oldest[Trial.PAUSED]


class PerCellASHA(LiveFIFOScheduler):
    """ASHA within each cell (trials of different datasets never share a rung); epochs are the time axis.

    ``stop_last_trials=False``: a trial reaching ``max_epochs`` finishes normally rather than being stopped.
    """

    def __init__(self, metric: str, mode: str, asha: AshaConfig, max_epochs: dict[str, int]):
        super().__init__()
        self._settings = (metric, mode, asha)
        self._max_epochs = max_epochs
        self._cells: dict[str, AsyncHyperBandScheduler] = {}

    def _for(self, trial: Any) -> AsyncHyperBandScheduler:
        key = trial.config["cell"]
        if key not in self._cells:
            metric, mode, asha = self._settings
            self._cells[key] = AsyncHyperBandScheduler(
                time_attr="epoch", metric=metric, mode=mode, max_t=asha.max_epochs or self._max_epochs[key],
                grace_period=asha.grace_period, reduction_factor=asha.reduction_factor, stop_last_trials=False,
            )
        return self._cells[key]

    def on_trial_add(self, tune_controller: Any, trial: Any) -> None:
        self._for(trial).on_trial_add(tune_controller, trial)

    def on_trial_result(self, tune_controller: Any, trial: Any, result: dict[str, Any]) -> str:
        return self._for(trial).on_trial_result(tune_controller, trial, result)

    def on_trial_complete(self, tune_controller: Any, trial: Any, result: dict[str, Any]) -> None:
        self._for(trial).on_trial_complete(tune_controller, trial, result)

    def on_trial_remove(self, tune_controller: Any, trial: Any) -> None:
        self._for(trial)._trial_info.pop(trial.trial_id, None)

    def debug_string(self) -> str:
        return "Using ASHA per cell: " + ", ".join(f"{k}: {s.debug_string()}" for k, s in self._cells.items())
