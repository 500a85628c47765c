"""The built-in regularizers, each declared once: the module that registers it and its hyperparameters.

A hyperparameter is declared with its default search space (``choices``), the check its values must pass and a
line of help. Every reader takes it from here: the registry (each module registers with
``hyperparams=BUILTINS[name].hyperparams``, and :mod:`.registry` imports the modules named here), the config's
checks (:func:`ndebench.platform.spec.sections.check_hyperparam`), ``ndebench validate``
(:mod:`ndebench.platform.spec.lint`, which reads this module without importing torch or SciPy) and the report's
analyses (each numeric hyperparameter is a column of the study's runs,
:func:`ndebench.platform.record.runs.regularizer_params`). A plugin regularizer declares its :class:`HyperParam`
objects in its own ``register_regularizer`` call and is read the same way, through the registry.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ndebench.platform.common import fields
from ndebench.regularizers import checks


def _any(value: Any) -> str | None:
    return None


def _type_of(choices: tuple[Any, ...]) -> fields.Rule:
    """Values of the default choices' type: numbers (finite, never booleans), booleans or strings."""
    if all(isinstance(c, bool) for c in choices):
        return fields.boolean
    if all(fields.is_number(c) for c in choices):
        return fields.number()
    if all(isinstance(c, str) for c in choices):
        return fields.text
    return _any


@dataclass(frozen=True)
class HyperParam:
    """A regularizer hyperparameter: its default search space (a list of choices) and a validity check."""

    choices: tuple[Any, ...]
    check: fields.Rule = _any
    help: str = ""

    def rule(self, value: Any) -> str | None:
        """``None`` when ``value`` has the type of the default choices and passes :attr:`check`, else what it
        must be: the rule that the config's checks and ``ndebench validate`` apply (``create_regularizer`` applies
        the check alone)."""
        return _type_of(self.choices)(value) or self.check(value)

    @property
    def numeric(self) -> bool:
        """Whether the values are numbers (an axis of the report's sensitivity analysis)."""
        return bool(self.choices) and all(fields.is_number(c) for c in self.choices)


@dataclass(frozen=True)
class Declared:
    """A built-in regularizer: its module in ``ndebench.regularizers`` and its hyperparameters by name."""

    module: str
    hyperparams: dict[str, HyperParam]


_UNIT = (0.1, 0.2, 0.3, 0.4, 0.5)
_N_MC = HyperParam((5,), checks.integer_at_least(1), "Monte-Carlo passes at test time")
_JUMPS = {
    "rate": HyperParam((1e-5, 1e-4, 1e-3, 1e-2, 0.1, 0.2, 0.3, 0.4, 0.5), checks.positive,
                       "the paper's p: the jump intensity (scale: rate) or the per-step drop probability (per_step)"),
    "scale": HyperParam(("rate",), checks.jump_scale,
                        "rate: Liu et al.'s Poisson state jumps, probability rate * dt per step; per_step: App. G.1's "
                        "drop of a unit's increment with probability rate at every step"),
    "size": HyperParam((1.0,), checks.positive, "jump size relative to the state (1: a jumping unit becomes 0 or 2z)"),
}

BUILTINS: dict[str, Declared] = {
    "continuum_dropout": Declared("continuum_dropout", {
        "p": HyperParam(_UNIT, checks.dropout_rate, "dropout rate P(inactive at T)"),
        "m": HyperParam((5, 10, 50, 100), checks.expected_renewals, "expected number of renewals in [t0, T]"),
        "mask": HyperParam(("left",), checks.step_mask, "per-step mask for fixed-step solvers"),
        "n_mc": _N_MC,
        "scope": HyperParam(("increment",), checks.control_scope,
                            "CDEs: pause the whole increment f(z) dX ('increment', the paper's method) or only its "
                            "time channel ('time', ndebench's extension, not the paper's method)"),
    }),
    "jump_diffusion": Declared("jump_diffusion", _JUMPS),
    "jump_diffusion_ttn": Declared("jump_diffusion", {**_JUMPS, "n_mc": _N_MC}),
    "naive_dropout_drift": Declared("naive_dropout_drift", {
        "p": HyperParam(_UNIT, checks.open_unit, "dropout probability of a hidden unit"),
    }),
    "naive_dropout_head": Declared("naive_dropout_head", {
        "p": HyperParam(_UNIT, checks.open_unit, "dropout probability in the head"),
    }),
    "none": Declared("none", {
        "n_mc": HyperParam((1,), checks.integer_at_least(1),
                           "test-time passes averaged as in Algorithm 1 (> 1 only matters for SDE models: a control "
                           "that separates the effect of averaging the Brownian noise from that of Continuum "
                           "Dropout)"),
    }),
    "steer": Declared("steer", {
        "b": HyperParam((0.1, 0.25, 0.5, 0.75), checks.open_unit,
                        "half-width of the end-time interval as a fraction of T - t0"),
    }),
    "tabn": Declared("tabn", {
        "bins": HyperParam((10, 50, 100), checks.integer_at_least(2), "number K of time nodes over [t0, T]"),
        "decay": HyperParam((0.0, 0.1), checks.non_negative, "weight of the affine-decay penalty"),
    }),
}
