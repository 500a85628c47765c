"""Every cell of a stage in one Ray Tune run: a per-cell Optuna ask/tell searcher and per-cell ASHA.

Ray's maintainers advise one Tune run for many searches (ray#18851); :class:`CellSearcher` keeps one seeded
Optuna study per cell, hands out suggestions round-robin over the cells within a per-cell concurrency limit
(so TPE sees results before it proposes), and tells each study its own trials' outcomes.
"""
from __future__ import annotations

import itertools
import math
from typing import Any

import optuna
from ndebench.platform.spec.config import AshaConfig, Space, TuneConfig
from ndebench.platform.spec.plan import CellSearch
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution
from ray.tune.schedulers import AsyncHyperBandScheduler, FIFOScheduler
from ray.tune.search import Searcher

optuna.logging.set_verbosity(optuna.logging.WARNING)

# A trial's reports carry ``status``: "running" after each epoch, the trial's outcome at the end. A last
# report still "running" means the scheduler stopped the trial.
RUNNING = "running"
DEFAULT_TPE_CONCURRENCY = 4


def distribution(space: Space) -> BaseDistribution:
    """The Optuna distribution of a config :class:`Space` (``randint``'s high bound is exclusive)."""
    if space.kind == "choice":
        return CategoricalDistribution(list(space.args))
    low, high = space.args
    if space.kind == "randint":
        return IntDistribution(int(low), int(high) - 1)
    return FloatDistribution(float(low), float(high), log=space.kind == "loguniform")


def make_study(search: CellSearch, tune: TuneConfig) -> optuna.Study:
    """A seeded study for one cell; under ``grid`` every point of the categorical grid is enqueued once."""
    if tune.sampler == "tpe":
        sampler = optuna.samplers.TPESampler(seed=tune.seed, n_startup_trials=tune.n_startup_trials)
    else:
        sampler = optuna.samplers.RandomSampler(seed=tune.seed)
    study = optuna.create_study(direction="minimize" if tune.mode == "min" else "maximize", sampler=sampler,
                                study_name=search.key)
    if tune.sampler == "grid":
        keys = list(search.space)
        for values in itertools.product(*(search.space[k].args for k in keys)):
            study.enqueue_trial(dict(zip(keys, values, strict=True)), skip_if_exists=False)
    return study


class CellSearcher(Searcher):
    """Suggests flat trial configs for the cells of one stage; each config names its ``cell``."""

    def __init__(self, stage: str, searches: list[CellSearch], tune: TuneConfig):
        # No metric for Ray itself: its strict check would refuse a failed trial's report, which has none.
        super().__init__()
        self.stage, self.target = stage, tune.metric
        self._searches = {s.key: s for s in searches}
        self._studies = {s.key: make_study(s, tune) for s in searches}
        self._left = {s.key: s.budget for s in searches}
        self._running = {s.key: 0 for s in searches}
        default = DEFAULT_TPE_CONCURRENCY if tune.sampler == "tpe" else None
        self._limit = tune.max_concurrent or default
        self._order = itertools.cycle(list(self._searches))
        self._trials: dict[str, tuple[str, optuna.trial.Trial]] = {}

    @property
    def total(self) -> int:
        return sum(s.budget for s in self._searches.values())

    @property
    def max_live(self) -> int:
        """Trials that may be suggested and unfinished at once over all cells."""
        return sum(s.budget if self._limit is None else min(s.budget, self._limit) for s in self._searches.values())

    def suggest(self, trial_id: str) -> dict[str, Any] | str | None:
        if not any(self._left.values()):
            return Searcher.FINISHED
        for _ in range(len(self._searches)):
            key = next(self._order)
            if self._left[key] and (self._limit is None or self._running[key] < self._limit):
                break
        else:
            return None
        search = self._searches[key]
        trial = self._studies[key].ask({k: distribution(v) for k, v in search.space.items()})
        self._left[key] -= 1
        self._running[key] += 1
        self._trials[trial_id] = (key, trial)
        return {**search.template, **trial.params, "phase": self.stage, "seed": 0}

    def on_trial_complete(self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False) -> None:
        key, trial = self._trials.pop(trial_id)
        self._running[key] -= 1
        result = result or {}
        value = result.get(self.target)
        study = self._studies[key]
        if error or result.get("status") != "ok" or value is None or not math.isfinite(value):
            state = optuna.trial.TrialState.PRUNED if result.get("status") == RUNNING else optuna.trial.TrialState.FAIL
            study.tell(trial, state=state)
        else:
            study.tell(trial, float(value))


class PerCellASHA(FIFOScheduler):
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
