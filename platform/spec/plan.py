"""The stages of a sweep and the cells each one searches, derived from a :class:`SweepSpec` alone.

``protocol: paper`` (the paper's Section 4 / App. D): stage ``base`` searches the ``model.*`` and
``training.*`` hyperparameters per (model, dataset) on the unregularized model (``base.scope: shared``, the
paper's frozen base), or per (model, dataset, regularizer) with that regularizer on at its grid's middle point
(``base.scope: per_regularizer``, :func:`middle_point`); stage ``tune`` (the
regularizer stage) searches each regularizer's own hyperparameters on that frozen base config; ``evaluate``
runs the best config of every cell over the seeds. ``protocol: joint``: stage ``tune`` searches everything
per cell. Fixed-parameter variants (``variants: {name: grid}`` or ``{name: {key: [values]}}``, keys the
regularizer's or ``model.*`` ones, e.g. ``model.hidden_size``) are cells that skip every search.
``base.select``/``tune.select`` ``last_epoch`` and ``base.training`` reach a stage's trials
through its cell templates (keys ``select`` and ``training.*``), never the evaluate configs.
"""
from __future__ import annotations

import itertools
import json
import math
from dataclasses import dataclass, field, replace
from typing import Any

from ndebench.models.registry import model_info
from ndebench.platform.common.labels import cell_name, variant_label
from ndebench.platform.common.metrics import decisive
from ndebench.platform.spec.sweepspec import ConfigError, Space, SweepSpec, TuneConfig
from ndebench.regularizers.none import BASELINE

SHARED_PREFIXES = ("model.", "training.")


@dataclass(frozen=True)
class Cell:
    """(model, dataset, regularizer), optionally a labelled fixed-parameter ``variant`` of the regularizer."""

    model: str
    dataset: str
    regularizer: str
    variant: str | None = None
    fixed: tuple[tuple[str, Any], ...] = ()

    @property
    def key(self) -> str:
        return f"{self.model}__{self.dataset.replace('/', '-')}__{self.name}"

    @property
    def label(self) -> str:
        return f"{self.model} x {self.dataset} x {self.name}"

    @property
    def name(self) -> str:
        """The cell's name (:func:`~ndebench.platform.common.labels.cell_name`): its variant label, else its
        regularizer."""
        return cell_name(self.regularizer, self.variant)

    @property
    def pair(self) -> tuple[str, str]:
        return self.model, self.dataset


@dataclass(frozen=True)
class CellSearch:
    """One cell's search in a stage: the flat ``template`` config (fixed values and :class:`Space` s), the
    searched ``space`` and the number of trials ``budget`` (the grid size under ``sampler: grid``)."""

    cell: Cell
    template: dict[str, Any]
    space: dict[str, Space]
    budget: int

    @property
    def key(self) -> str:
        return self.cell.key

    @property
    def label(self) -> str:
        return self.cell.label


@dataclass(frozen=True)
class Stage:
    name: str
    tune: TuneConfig
    cells: list[CellSearch] = field(default_factory=list)

    @property
    def trials(self) -> int:
        return sum(c.budget for c in self.cells)


def fixed_key(key: str) -> str:
    """The flat config key a variant fixes: ``p`` -> ``regularizer.p``; ``model.hidden_size`` stays as it is."""
    return key if key.startswith("model.") else f"regularizer.{key}"


def variant_models(spec: SweepSpec, regularizer: str) -> tuple[str, ...]:
    """The models the variant cells of ``regularizer`` are planned on: every model of the sweep, except that the
    baseline's variants of ``n_mc`` alone (``none`` with ``n_mc`` > 1, the control of an MC average) go to SDE
    models only: on a model whose latent is deterministic its passes are identical and the cell would repeat
    ``none``."""
    if regularizer != BASELINE or any(k.startswith("model.") for k in spec.variants.get(regularizer, {})):
        return spec.models
    return tuple(m for m in spec.models if model_info(m).family == "sde")


def sweep_cells(spec: SweepSpec) -> list[Cell]:
    """Every cell evaluated over the seeds: models x datasets x regularizers, then the variant cells."""
    cells = [Cell(m, d, r) for m, d, r in spec.cells()]
    for name, grid in spec.variants.items():
        for values in itertools.product(*grid.values()):
            point = dict(zip(grid, values, strict=True))
            cells += [Cell(m, d, name, variant_label(name, point), tuple(point.items()))
                      for m in variant_models(spec, name) for d in spec.datasets]
    return cells


def cell_template(spec: SweepSpec, cell: Cell) -> dict[str, Any]:
    """The flat trial config of a cell with its variant's fixed values applied, and with the variant's label
    (``variant``) and those values as the label names them (``fixed``, e.g. ``{"p": 0.3, "m": 50}``), which the
    record names the cell by."""
    config = spec.base_config(cell.model, cell.dataset, cell.regularizer)
    config.update({fixed_key(k): v for k, v in cell.fixed})
    config["cell"] = cell.key
    if cell.variant:
        config |= {"variant": cell.variant, "fixed": dict(cell.fixed)}
    return config


def chosen_keys(spec: SweepSpec, cell: Cell) -> list[str]:
    """The flat keys the sweep chose a value of for ``cell``: those its config searches (in any stage) and those a
    variant cell fixes, sorted."""
    config = spec.base_config(cell.model, cell.dataset, cell.regularizer)
    return sorted({k for k, v in config.items() if isinstance(v, Space)} | {fixed_key(k) for k, _ in cell.fixed})


def budget(space: dict[str, Space], tune: TuneConfig) -> int:
    if not space:
        return 0
    if tune.sampler == "grid":
        return math.prod(len(s.args) for s in space.values())
    return tune.num_samples


def _search(cell: Cell, template: dict[str, Any], keys: list[str], tune: TuneConfig) -> CellSearch:
    space = {k: template[k] for k in keys if isinstance(template[k], Space)}
    if tune.select != "best_epoch":
        # Only when set: the config hashes of trials recorded before the key existed still match on --resume.
        template = {**template, "select": tune.select}
    return CellSearch(cell, template, space, budget(space, tune))


def middle_point(space: Space) -> Any:
    """The middle of a searched value: the middle choice (the lower middle of an even count: p in {0.1, ..., 0.5}
    -> 0.3, m in {5, 10, 50, 100} -> 10), the geometric mean of a ``loguniform``, the arithmetic one of a
    ``uniform``, the integer middle of a ``randint`` (upper bound exclusive)."""
    low, high = (space.args + (None, None))[:2]
    if space.kind == "choice":
        return space.args[(len(space.args) - 1) // 2]
    if space.kind == "loguniform":
        return math.sqrt(low * high)
    if space.kind == "randint":
        return (low + high - 1) // 2
    return (low + high) / 2


def base_cells(spec: SweepSpec) -> list[Cell]:
    """The base stage's cells: ``none`` per (model, dataset) (``base.scope: shared``), or one per (model, dataset,
    regularizer) of the sweep (``per_regularizer``)."""
    if spec.base_scope == "shared":
        return [Cell(m, d, BASELINE) for m, d in itertools.product(spec.models, spec.datasets)]
    return [Cell(m, d, r) for m, d, r in spec.cells()]


def base_key(spec: SweepSpec, cell: Cell) -> str:
    """The key of the base-stage cell whose chosen values ``cell`` takes (a variant those of its regularizer)."""
    if spec.base_scope == "per_regularizer" and cell.regularizer in spec.regularizers:
        return Cell(cell.model, cell.dataset, cell.regularizer).key
    return Cell(cell.model, cell.dataset, BASELINE).key


def base_stage(spec: SweepSpec) -> Stage:
    """Paper protocol, stage 1: ``model.*``/``training.*`` per (model, dataset) on the unregularized model, or
    under ``base.scope: per_regularizer`` per (model, dataset, regularizer) with the regularizer's searched
    values fixed at their :func:`middle_point`."""
    searches = []
    for cell in base_cells(spec):
        template = cell_template(spec, cell)
        template.update({k: middle_point(v) for k, v in template.items()
                         if k.startswith("regularizer.") and isinstance(v, Space)})
        template["cell"] = f"{cell.key}"
        if spec.base_epochs is not None:
            template["training.epochs"] = spec.base_epochs
        template.update({f"training.{k}": v for k, v in spec.base_training.items()})
        keys = [k for k in template if k.startswith(SHARED_PREFIXES)]
        searches.append(_search(cell, template, keys, spec.base))
    return Stage("base", spec.base, searches)


def tune_stage(spec: SweepSpec, frozen: dict[str, dict[str, Any]] | None = None) -> Stage:
    """Joint protocol: every searched key per cell. Paper protocol: the regularizer's own keys per cell, on
    the base stage's chosen values ``frozen[base_key(spec, cell)]`` (left as spaces when planning ahead)."""
    searches = []
    for cell in sweep_cells(spec):
        if cell.variant:
            continue
        template = cell_template(spec, cell)
        if spec.protocol == "joint":
            keys = list(template)
        else:
            template.update((frozen or {}).get(base_key(spec, cell), {}))
            keys = [k for k in template if k.startswith("regularizer.")]
        searches.append(_search(cell, template, keys, spec.tune))
    return Stage("tune", spec.tune, searches)


def plan_stages(spec: SweepSpec) -> list[Stage]:
    """The search stages in order (cells with nothing to search carry budget 0)."""
    stages = [base_stage(spec)] if spec.protocol == "paper" else []
    return stages + [tune_stage(spec)]


def stage_for_cells(stage: Stage, keys: set[str]) -> Stage:
    """``stage`` restricted to the cells in ``keys`` that have something to search."""
    return replace(stage, cells=[c for c in stage.cells if c.key in keys and c.budget > 0])


def pick_best(candidates: list[tuple[dict[str, Any], float]], mode: str) -> dict[str, Any]:
    """The chosen values among (searched values, objective) pairs: the best objective under ``mode`` (``min`` or
    ``max``) at :data:`~ndebench.platform.common.metrics.DECISION_DIGITS` significant digits; a tie goes to the
    values that sort first, so that the choice never depends on the order in which
    trials ended (an interrupted and resumed search chooses what an uninterrupted one does)."""
    sign = 1.0 if mode == "min" else -1.0
    return min(candidates, key=lambda c: (sign * decisive(c[1]), json.dumps(c[0], sort_keys=True, default=str)))[0]


def check_grids(spec: SweepSpec) -> None:
    """``sampler: grid`` covers a categorical space exactly; a continuous distribution has no grid."""
    for stage in plan_stages(spec):
        if stage.tune.sampler != "grid":
            continue
        for cell in stage.cells:
            continuous = [k for k, v in cell.space.items() if v.kind != "choice"]
            if continuous:
                where = ("base.sampler" if stage.name == "base" and spec.base.sampler != spec.tune.sampler
                         else "tune.sampler")
                raise ConfigError(f"{where}=grid but {cell.label} searches continuous {continuous}; "
                                  "give them as lists of values or use sampler tpe/random")
