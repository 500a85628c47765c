"""Model registry: ``register_model``, ``create_model``, ``list_models``, ``model_info``, ``model_options``."""
from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, get_args

from ndebench.models.base import DataSpec, Family, NDEClassifier
from ndebench.models.catalog import BUILTINS
from ndebench.models.integrate import SolverConfig
from ndebench.platform.common.registry import Registry
from ndebench.regularizers.base import Regularizer
from ndebench.regularizers.registry import words

InputKind = Literal["timeseries", "image"]


@dataclass(frozen=True)
class ModelInfo:
    """What is known of a registered model without building it.

    ``input_kind``: the datasets it takes; ``family``: its latent dynamics (``ode``, ``cde`` or ``sde``);
    ``field_layers``: whether its vector fields insert the regularizer's field layers (TA-BN, naive drift
    dropout act there); ``default_solver``: the solver it runs with when the config sets none.
    Regularizers decide compatibility from these properties, never from model names. ``display``: its name in
    a paper's tables (``Neural CDE``).
    """

    name: str
    summary: str
    input_kind: InputKind
    paper: str
    family: Family
    field_layers: bool
    default_solver: SolverConfig
    display: str = ""


REGISTRY: Registry[NDEClassifier, ModelInfo] = Registry(
    "model", builtins=sorted({f"ndebench.models.{d.module}" for d in BUILTINS.values()}),
    entry_point="ndebench.models",
)


def register_model(
    name: str,
    *,
    summary: str,
    paper: str,
    input_kind: InputKind = "timeseries",
    family: Family | None = None,
    field_layers: bool | None = None,
    display: str = "",
) -> Callable[[type[NDEClassifier]], type[NDEClassifier]]:
    """Class decorator registering a model with a one-line summary, its paper, the input kind it takes, its
    ``family`` (``ode``, ``cde``, ``sde``) and whether its vector fields take field layers.

    ``family`` and ``field_layers`` left out are the class's own, inherited from a registered parent (a
    plugin's subclass of ``NeuralCDE`` is a ``cde`` model); a class with no family is refused. ``display``: the
    name a paper's tables print (``Neural CDE``); left out, the words of ``name`` capitalized.
    """

    def decorator(cls: type[NDEClassifier]) -> type[NDEClassifier]:
        if family is not None:
            cls.family = family
        if field_layers is not None:
            cls.field_layers = field_layers
        families = get_args(Family)
        if getattr(cls, "family", None) not in families:
            raise ValueError(f"model {name!r}: declare its family, register_model(..., family=...) with one of "
                             f"{', '.join(families)}")
        info = ModelInfo(name, summary, input_kind, paper, cls.family, cls.field_layers, cls.default_solver,
                         display or words(name))
        return REGISTRY.register(name, info)(cls)

    return decorator


def model_options(name: str) -> dict[str, inspect.Parameter]:
    """The hyperparameters of model ``name``: its constructor's keyword-only parameters, with those of the
    base-class constructors it passes ``**common`` on to (the subclass's default wins). Annotations are
    resolved (``int``, ``Literal[...]``), so a config can type-check values against them."""
    options: dict[str, inspect.Parameter] = {}
    for cls in REGISTRY.get(name).__mro__:
        if "__init__" not in vars(cls):
            continue
        parameters = inspect.signature(cls.__init__, eval_str=True).parameters.values()
        for parameter in parameters:
            if parameter.kind is inspect.Parameter.KEYWORD_ONLY:
                options.setdefault(parameter.name, parameter)
        if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
            break
    return options


def create_model(
    name: str,
    data: DataSpec,
    *,
    regularizer: Regularizer | None = None,
    solver: SolverConfig | None = None,
    **hyperparams: Any,
) -> NDEClassifier:
    """Build model ``name`` for ``data``: ``regularizer`` ``None`` for none, ``solver`` ``None`` for the model's
    default, ``hyperparams`` among :func:`model_options` (e.g. ``hidden_size=32``)."""
    options = model_options(name)
    unknown = sorted(set(hyperparams) - set(options))
    if unknown:
        raise ValueError(f"model {name!r} has no hyperparameter(s) {unknown}; valid: {sorted(options)}")
    return REGISTRY.get(name)(data, regularizer=regularizer, solver=solver, **hyperparams)


list_models = REGISTRY.names
model_info = REGISTRY.info
