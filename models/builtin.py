"""Imports every built-in model module so that each registers itself."""
from ndebench.models import neural_cde, neural_ode  # noqa: F401
