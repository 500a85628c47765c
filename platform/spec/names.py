"""The built-in models' and datasets' names and config keys, readable without importing torch.

The built-in regularizers are not restated here: ``ndebench validate`` reads their one declaration,
:data:`ndebench.regularizers.catalog.BUILTINS`, which imports neither torch nor SciPy.

``ndebench validate`` checks a config's names and keys against these tables before the registries (which import
torch and every model) are loaded, so a typo is answered in well under a second. The registries stay the truth:
``tests/test_lint.py`` compares every table with them, so a component added without its row here fails the tests.
Components from plugins (``plugins:`` in a config, or entry points) are not listed; a config that may use them gets
its names checked by the registries only.
"""
from __future__ import annotations

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
