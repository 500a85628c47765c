"""A cell's search as an Optuna study: its space as Optuna distributions, and a study seeded with what earlier
drivers of the stage recorded (:class:`Past`), so that a resumed search continues instead of starting over.
Ray-free, so that the driver reads a stage's history without importing Ray Tune.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import numpy as np
import optuna
from ndebench.platform.spec.config import Space, TuneConfig
from ndebench.platform.spec.plan import CellSearch
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution

optuna.logging.set_verbosity(optuna.logging.WARNING)


def distribution(space: Space) -> BaseDistribution:
    """The Optuna distribution of a config :class:`Space` (``randint``'s high bound is exclusive)."""
    if space.kind == "choice":
        return CategoricalDistribution(list(space.args))
    low, high = space.args
    if space.kind == "randint":
        return IntDistribution(int(low), int(high) - 1)
    return FloatDistribution(float(low), float(high), log=space.kind == "loguniform")


def contains(space: Space, value: Any) -> bool:
    """Whether ``value`` is a point of ``space`` (a trial recorded under another search space is not)."""
    if space.kind == "choice":
        return value in space.args
    low, high = space.args
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return low <= value < high if space.kind == "randint" else low <= value <= high


@dataclass(frozen=True)
class Past:
    """A cell's trials recorded by earlier drivers of its stage: ``ended`` as (searched values, Optuna state,
    objective value or ``None``), and ``unfinished`` searched values, cut off by an interrupted driver."""

    ended: tuple[tuple[dict[str, Any], optuna.trial.TrialState, float | None], ...] = ()
    unfinished: tuple[dict[str, Any], ...] = ()


def continued_seed(seed: int, recorded: int) -> int:
    """The sampler seed of a study that continues after ``recorded`` trials: ``seed`` itself for a fresh study;
    otherwise another stream derived from both, since the seed's own stream would propose again the values its
    first trials already ran."""
    if not recorded:
        return seed
    return int(np.random.SeedSequence([seed, recorded]).generate_state(1)[0])


def make_study(search: CellSearch, tune: TuneConfig, past: Past = Past()) -> optuna.Study:
    """A seeded study for one cell holding its ``past`` ended trials. Under ``grid`` every point of the
    categorical grid not yet ended is enqueued once; under ``tpe`` and ``random`` the unfinished trials are
    enqueued, so that they run again with their own values (and continue from their checkpoints)."""
    seed = continued_seed(tune.seed, len(past.ended) + len(past.unfinished))
    if tune.sampler == "tpe":
        sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=tune.n_startup_trials)
    else:
        sampler = optuna.samplers.RandomSampler(seed=seed)
    study = optuna.create_study(direction="minimize" if tune.mode == "min" else "maximize", sampler=sampler,
                                study_name=search.key)
    distributions = {k: distribution(v) for k, v in search.space.items()}
    for params, state, value in past.ended:
        study.add_trial(optuna.trial.create_trial(params=params, distributions=distributions, state=state,
                                                  value=value))
    keys = list(search.space)
    if tune.sampler == "grid":
        ended = [tuple(params[k] for k in keys) for params, _, _ in past.ended]
        for values in itertools.product(*(search.space[k].args for k in keys)):
            if values in ended:
                ended.remove(values)
            else:
                study.enqueue_trial(dict(zip(keys, values, strict=True)), skip_if_exists=False)
    else:
        for params in past.unfinished[:max(0, search.budget - len(past.ended))]:
            study.enqueue_trial(params, skip_if_exists=False)
    return study
