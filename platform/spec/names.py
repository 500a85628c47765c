"""The built-in components' names and config keys, readable without importing torch.

``ndebench validate`` checks a config's names and keys against these tables before the registries (which import
torch and every model) are loaded, so a typo is answered in well under a second. The registries stay the truth:
``tests/test_lint.py`` compares every table with them, so a component added without its row here fails the tests.
Components from plugins (``plugins:`` in a config, or entry points) are not listed; a config that may use them gets
its names checked by the registries only.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ndebench.platform.common.fields import Rule

ENTRY_POINT_GROUPS = ("ndebench.models", "ndebench.regularizers", "ndebench.datasets")

# model name -> its hyperparameters (models.registry.model_options)
MODELS: dict[str, tuple[str, ...]] = {
    "ancde": ("attention_hidden_size", "attention_size", "hidden_size", "interpolation", "mask_attention",
              "num_layers", "timewise"),
    "gru_ode": ("hidden_size", "intensity", "interpolation", "num_layers"),
    "image_node": ("depth", "hidden_size", "num_layers", "width"),
    "image_nsde_additive": ("depth", "hidden_size", "num_layers", "width"),
    "image_nsde_multiplicative": ("depth", "hidden_size", "num_layers", "width"),
    "neural_cde": ("hidden_size", "interpolation", "num_layers"),
    "neural_gsde": ("hidden_size", "interpolation", "num_layers"),
    "neural_lnsde": ("hidden_size", "interpolation", "num_layers"),
    "neural_lsde": ("hidden_size", "interpolation", "num_layers"),
    "neural_ode": ("hidden_size", "num_layers"),
    "neural_sde": ("hidden_size", "interpolation", "num_layers"),
    "ode_rnn": ("hidden_size", "intensity", "interpolation", "num_layers"),
}

# regularizer name -> its hyperparameters (regularizers.registry.regularizer_info(name).hyperparams)
REGULARIZERS: dict[str, tuple[str, ...]] = {
    "continuum_dropout": ("m", "mask", "n_mc", "p", "scope"),
    "jump_diffusion": ("rate", "scale", "size"),
    "jump_diffusion_ttn": ("n_mc", "rate", "scale", "size"),
    "naive_dropout_drift": ("p",),
    "naive_dropout_head": ("p",),
    "none": ("n_mc",),
    "steer": ("b",),
    "tabn": ("bins", "decay"),
}



def regularizer_rules() -> dict[str, dict[str, Rule]]:
    """Regularizer name -> hyperparameter -> the rule its values must pass, as the registry checks them
    (``sections.check_hyperparam``: the type of its default choices, then its own check), written here so that
    ``validate`` names a bad value together with a bad name without importing torch or SciPy (which
    ``regularizers.rates`` imports). ``tests/test_lint.py`` compares each rule's verdicts with the registry's,
    at the bounds of Continuum Dropout's rate solver too."""
    from ndebench.platform.common.fields import integer, number, one_of

    count, unit = integer(1), number(0, 1, low_open=True, high_open=True)
    jumps = {"rate": number(0, low_open=True), "scale": one_of("rate", "per_step"), "size": number(0, low_open=True)}
    return {
        "continuum_dropout": {"m": number(1e-6, 1e6), "mask": one_of("left", "occupancy"), "n_mc": count,
                              "p": number(1e-6, 1 - 1e-6), "scope": one_of("increment", "time")},
        "jump_diffusion": jumps,
        "jump_diffusion_ttn": {**jumps, "n_mc": count},
        "naive_dropout_drift": {"p": unit},
        "naive_dropout_head": {"p": unit},
        "none": {"n_mc": count},
        "steer": {"b": unit},
        "tabn": {"bins": integer(2), "decay": number(0)},
    }


# dataset (family) name -> its options (datasets.registry.dataset_options)
DATASETS: dict[str, tuple[str, ...]] = {
    "cifar10": ("augment",),
    "cifar100": ("augment",),
    "sepsis": ("oi", "pos_weight"),
    "speech_commands": ("n_mels",),
    "stl10": ("augment",),
    "svhn": ("augment",),
    "synthetic": ("length", "missing_rate", "noise", "num_samples"),
    "uea": ("missing_rate",),
}
# families whose names take a member, ``uea/BasicMotions`` (members are checked by the registry)
DATASET_FAMILIES = frozenset({"uea"})

# models.integrate.SolverConfig's fields
SOLVER_KEYS = ("method", "step_size", "adjoint", "rtol", "atol", "max_steps", "cuda_graph")
