"""Imports every built-in regularizer module so that each registers itself."""
from ndebench.regularizers import (  # noqa: F401
    continuum_dropout,
    jump_diffusion,
    naive_dropout_drift,
    naive_dropout_head,
    none,
    steer,
    tabn,
)
