"""Imports every built-in regularizer module so that each registers itself."""
from ndebench.regularizers import continuum_dropout, none  # noqa: F401
