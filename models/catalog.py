"""The built-in models, each declared once: the module that registers it and its hyperparameters.

:mod:`.registry` imports the modules named here (so a built-in registers itself) and ``ndebench validate``
(:mod:`ndebench.platform.spec.lint`) reads the hyperparameters without importing torch. A model's hyperparameters
are its constructor's keyword-only parameters with those of the base constructors it passes ``**common`` on to
(:func:`ndebench.models.registry.model_options`); ``tests/test_lint.py`` compares every entry with them. A plugin
model is read through the registry only.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Declared:
    """A built-in model: the module of ``ndebench.models`` that registers it and its hyperparameters' names."""

    module: str
    hyperparams: tuple[str, ...]


_BASE = ("hidden_size", "num_layers")
_SERIES = (*_BASE, "interpolation")
_IMAGE = (*_BASE, "depth", "width")

BUILTINS: dict[str, Declared] = {
    "ancde": Declared("ancde", (*_SERIES, "attention_hidden_size", "attention_size", "mask_attention", "timewise")),
    "gru_ode": Declared("gru_ode", (*_SERIES, "intensity")),
    "image_node": Declared("image", _IMAGE),
    "image_nsde_additive": Declared("image", _IMAGE),
    "image_nsde_multiplicative": Declared("image", _IMAGE),
    "neural_cde": Declared("neural_cde", _SERIES),
    "neural_gsde": Declared("snsde", _SERIES),
    "neural_lnsde": Declared("snsde", _SERIES),
    "neural_lsde": Declared("snsde", _SERIES),
    "neural_ode": Declared("neural_ode", _BASE),
    "neural_sde": Declared("snsde", _SERIES),
    "ode_rnn": Declared("ode_rnn", (*_SERIES, "intensity")),
}

# models.integrate.SolverConfig's fields, the keys of a config's ``solver:``
SOLVER_KEYS = ("method", "step_size", "adjoint", "rtol", "atol", "max_steps", "cuda_graph")
