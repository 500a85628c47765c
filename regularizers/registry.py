"""Regularizer registry: ``register_regularizer``, ``create_regularizer``, ``list_regularizers``."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ndebench.platform.common.registry import Registry
from ndebench.regularizers.base import Regularizer
from ndebench.regularizers.catalog import BUILTINS, HyperParam

if TYPE_CHECKING:  # models/ builds on regularizers/, never the other way at run time
    from ndebench.models.registry import ModelInfo

Incompatible = Callable[["ModelInfo"], "str | None"]


def _compatible(model: ModelInfo) -> str | None:
    return None


@dataclass(frozen=True)
class RegularizerInfo:
    """What is known of a registered regularizer: its summary, search space (``hyperparams``), the models it
    cannot act on (``incompatible(model_info)`` -> the reason, or ``None``) and whether it needs a fixed-step
    solver; ``display``: its name in a paper's tables (``Continuum Dropout``)."""

    name: str
    summary: str
    hyperparams: dict[str, HyperParam] = field(default_factory=dict)
    incompatible: Incompatible = _compatible
    requires_fixed_step: bool = False
    display: str = ""


REGISTRY: Registry[Regularizer, RegularizerInfo] = Registry(
    "regularizer", builtins=sorted({f"ndebench.regularizers.{d.module}" for d in BUILTINS.values()}),
    entry_point="ndebench.regularizers",
)


def register_regularizer(
    name: str,
    *,
    summary: str,
    hyperparams: dict[str, HyperParam] | None = None,
    incompatible: Incompatible = _compatible,
    requires_fixed_step: bool = False,
    display: str = "",
) -> Callable[[type[Regularizer]], type[Regularizer]]:
    """Class decorator registering a regularizer with its one-line summary and its hyperparameters.

    ``hyperparams`` declares each hyperparameter once (:class:`~ndebench.regularizers.catalog.HyperParam`: its
    default choices, its check, a line of help): a built-in passes its entry of
    :data:`~ndebench.regularizers.catalog.BUILTINS`, a plugin its own. The config's checks, ``create_regularizer``
    and the report's analyses read it from here.

    ``incompatible`` is a predicate over a model's declared properties (``ModelInfo.family``,
    ``.field_layers``, ...) that returns why the pair cannot work, or ``None``; ``ndebench validate``
    rejects such pairs with that reason, and adaptive solvers when ``requires_fixed_step``. A model
    registered later is judged by the same predicate, with no edit here.

    ``display``: the name a paper's tables print (``Continuum Dropout``); left out, the words of ``name``
    capitalized (``drift_noise`` -> ``Drift Noise``).
    """
    info = RegularizerInfo(name, summary, dict(hyperparams or {}), incompatible, requires_fixed_step,
                           display or words(name))
    return REGISTRY.register(name, info)


def create_regularizer(name: str, **hyperparams: Any) -> Regularizer:
    """Instantiate the regularizer ``name`` with its hyperparameters (e.g. ``p=0.3, m=10`` for Continuum Dropout)."""
    info = regularizer_info(name)
    unknown = sorted(set(hyperparams) - set(info.hyperparams))
    if unknown:
        raise ValueError(
            f"regularizer {name!r} has no hyperparameter(s) {unknown}; valid: {sorted(info.hyperparams) or 'none'}"
        )
    for key, value in hyperparams.items():
        problem = info.hyperparams[key].check(value)
        if problem:
            raise ValueError(f"regularizer {name!r}: {key}={value!r} {problem}")
    return REGISTRY.create(name, **hyperparams)


def words(name: str) -> str:
    """An identifier as capitalized words (``drift_noise`` -> ``Drift Noise``): the display name of a
    registration that gives none."""
    return " ".join(w[:1].upper() + w[1:] for w in name.replace("-", "_").split("_") if w)


list_regularizers = REGISTRY.names
regularizer_info = REGISTRY.info
