"""Imports every built-in model module so that each registers itself."""
from ndebench.models import ancde, gru_ode, image, neural_cde, neural_ode, ode_rnn, snsde  # noqa: F401
