"""The typed objects a sweep config is validated into: :class:`SweepSpec` and its sections.

Built only by :mod:`ndebench.platform.spec.config`; everything downstream reads them and never re-checks.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ndebench.platform.common import fields as typed
from ndebench.platform.common.choices import CORRECTIONS, FIGURE_MODES, TESTS

if TYPE_CHECKING:  # torch-free, so that `ndebench validate` checks a config before torch is imported
    from ndebench.models.integrate import SolverConfig


class ConfigError(ValueError):
    """A sweep config problem; the message names the key path and what would be valid."""


@dataclass(frozen=True)
class Space:
    """A searched hyperparameter: ``kind`` in choice/loguniform/uniform/randint with its ``args``."""

    kind: str
    args: tuple[Any, ...]

    def values_to_check(self) -> tuple[Any, ...]:
        return self.args

    def to_tune(self) -> Any:
        from ray import tune

        if self.kind == "choice":
            return tune.choice(list(self.args))
        return getattr(tune, self.kind)(*self.args)


Value = Any  # a fixed scalar or a Space


PROTOCOLS = ("paper", "joint")
BASE_SCOPES = ("shared", "per_regularizer")
SAMPLERS = ("tpe", "random", "grid")
SCHEDULERS = ("fifo", "asha")
SELECTS = ("best_epoch", "last_epoch")
MAX_SEED = 2**32 - 1  # NumPy's and Optuna's seeds are 32-bit
MAX_STACK = 64
# resources.stack unless set: a constant of the config, never of the machine, so a study's numbers do not depend on
# where it ran (docs/performance.md measures it against 1, 5, 16 and 64).
DEFAULT_STACK = 32


@dataclass(frozen=True)
class TrainingConfig:
    """Optimisation settings (defaults: the torch-ists reference pipeline).

    ``optimizer``: ``adam`` (weight decay ``lr * weight_decay_factor``) or ``sgd`` (momentum 0.9, same
    decay). ``scheduler``: ``step`` (StepLR every ``lr_step`` epochs by ``lr_gamma``) or ``plateau``
    (ReduceLROnPlateau on validation loss by ``lr_gamma`` after ``lr_step`` epochs without improvement; the
    paper's image recipe is SGD, lr 0.1, halved after 2 flat epochs).
    """

    epochs: int = typed.checked(100, typed.integer(1))
    optimizer: str = typed.checked("adam", typed.one_of("adam", "sgd"))
    scheduler: str = typed.checked("step", typed.one_of("step", "plateau"))
    batch_size: int | str = typed.checked("auto", typed.either(typed.one_of("auto"), typed.integer(1)))
    lr: float = typed.checked(1e-3, typed.number(0, low_open=True))
    weight_decay_factor: float = typed.checked(0.01, typed.number(0))
    lr_step: int = typed.checked(10, typed.integer(1))
    lr_gamma: float = typed.checked(0.5, typed.number(0, low_open=True))
    patience: int = typed.checked(10, typed.integer(1))
    min_epochs: int = typed.checked(20, typed.integer(0))
    grad_clip: float | None = typed.checked(10.0, typed.number(0, low_open=True, null=True))
    threads: int | None = typed.checked(None, typed.integer(1, null=True))


@dataclass(frozen=True)
class AshaConfig:
    """ASHA early stopping of a search stage: rungs at ``grace_period * reduction_factor**k`` epochs up to
    ``max_epochs`` (default: the stage's training epochs)."""

    grace_period: int = typed.checked(1, typed.integer(1))
    reduction_factor: int = typed.checked(4, typed.integer(2))
    max_epochs: int | None = typed.checked(None, typed.integer(1, null=True))


@dataclass(frozen=True)
class TuneConfig:
    """A search stage's budget and sampler, and what every trial of the sweep shares: retries
    (``max_failures``), checkpoints (``checkpoint_every`` epochs) and ``trial_timeout_s``, the seconds after
    which a trial still running ends with status ``timeout`` (default: no limit).

    ``select``: the epoch a search trial is judged by, ``best_epoch`` (its lowest validation loss) or
    ``last_epoch`` (its final epoch's validation values, as Oh et al.'s Ray Tune search takes them with
    ``get_best_trial(..., "last")``). Evaluate trials always restore the best epoch's weights."""

    num_samples: int = typed.checked(20, typed.integer(1))
    metric: str = "val_loss"
    mode: str = typed.checked("min", typed.one_of("min", "max"))
    seed: int = typed.checked(0, typed.integer(0, MAX_SEED))
    max_concurrent: int | None = typed.checked(None, typed.integer(1, null=True))
    sampler: str = typed.checked("tpe", typed.one_of(*SAMPLERS))
    n_startup_trials: int = typed.checked(10, typed.integer(0))
    scheduler: str = typed.checked("fifo", typed.one_of(*SCHEDULERS))
    asha: AshaConfig = AshaConfig()
    max_failures: int = typed.checked(2, typed.integer(0))
    checkpoint_every: int = typed.checked(1, typed.integer(1))
    trial_timeout_s: float | None = typed.checked(None, typed.number(0, low_open=True, null=True))
    select: str = typed.checked("best_epoch", typed.one_of(*SELECTS))


@dataclass(frozen=True)
class EvaluateConfig:
    seeds: tuple[int, ...] = typed.checked((0, 1, 2, 3, 4), typed.sequence_of(typed.integer(0, MAX_SEED)))
    save_weights: bool = True


@dataclass(frozen=True)
class Resources:
    cpu: float = typed.checked(1.0, typed.number(0, low_open=True))
    # Ray packs trials on a GPU by fractions (0.25: four per GPU) or gives whole GPUs; 1.5 it refuses.
    gpu: float = typed.checked(0.0, typed.either(typed.number(0, 1), typed.integer(1)))
    system_metrics: bool = True
    # Trials that share every shape (an evaluate cell's seeds and variants, a tune cell's grid points) train as one
    # stacked model, up to this many; 1 trains every trial alone.
    stack: int = typed.checked(DEFAULT_STACK, typed.integer(1, MAX_STACK))


@dataclass(frozen=True)
class ReportConfig:
    # None: the design's test (choices.default_test), paired under the paper protocol.
    test: str | None = typed.checked(None, typed.one_of(*TESTS))
    alpha: float = typed.checked(0.05, typed.number(0, 1, low_open=True, high_open=True))
    correction: str = typed.checked("none", typed.one_of(*CORRECTIONS))
    figures: str = typed.checked("auto", typed.one_of(*FIGURE_MODES))


@dataclass(frozen=True)
class SweepSpec:
    """A validated sweep: cells = models x datasets x regularizers, each tuned then evaluated over seeds.

    ``base`` and ``base_epochs``/``base_training`` (fixed ``training.*`` values) apply to the base stage's trials
    only; ``variants`` maps a regularizer to the values each of its hyperparameters takes in its fixed-parameter
    variant cells (one cell per point of their product)."""

    study: str
    description: str
    models: tuple[str, ...]
    datasets: tuple[str, ...]
    regularizers: dict[str, dict[str, Value]]
    model: dict[str, Value]
    training: dict[str, Value]
    dataset_options: dict[str, Any]
    solver: dict[str, SolverConfig]
    tune: TuneConfig
    evaluate: EvaluateConfig
    resources: Resources
    report: ReportConfig
    data_dir: str | None = None
    source: str | None = None
    protocol: str = "paper"
    model_overrides: dict[str, dict[str, Value]] = dataclasses.field(default_factory=dict)
    base: TuneConfig = TuneConfig()
    base_epochs: int | None = None
    base_training: dict[str, Any] = dataclasses.field(default_factory=dict)
    base_scope: str = "shared"
    variants: dict[str, dict[str, tuple[Any, ...]]] = dataclasses.field(default_factory=dict)
    plugins: tuple[str, ...] = ()
    overrides: tuple[str, ...] = ()

    def model_params(self, model: str) -> dict[str, Value]:
        """The ``model:`` section for ``model``: shared keys with that model's own block merged over them."""
        return {**self.model, **self.model_overrides.get(model, {})}

    def cells(self) -> list[tuple[str, str, str]]:
        return [(m, d, r) for m in self.models for d in self.datasets for r in self.regularizers]

    def solver_for(self, model: str) -> SolverConfig | None:
        return self.solver.get(model, self.solver.get("default"))

    def base_config(self, model: str, dataset: str, regularizer: str) -> dict[str, Any]:
        """The flat trial config of a cell: ``section.key`` -> fixed value or :class:`Space`."""
        config: dict[str, Any] = {
            "study": self.study, "model": model, "dataset": dataset, "regularizer": regularizer,
            "data_dir": self.data_dir,
        }
        config.update({f"model.{k}": v for k, v in self.model_params(model).items()})
        config.update({f"training.{k}": v for k, v in self.training.items()})
        config.update({f"dataset.{k}": v for k, v in self.dataset_options.items()})
        config.update({f"regularizer.{k}": v for k, v in self.regularizers.get(regularizer, {}).items()})
        solver = self.solver_for(model)
        if solver is not None:
            # An unset max_steps stays out of the trial config: the config hashes of trials recorded before the
            # key existed still match on --resume.
            config.update({f"solver.{k}": v for k, v in dataclasses.asdict(solver).items()
                           if not (k == "max_steps" and v is None)})
        return config
